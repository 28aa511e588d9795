"""`mirror bench inspector` at 4 turns and 2 repeats, through the CLI: every action measured over a
real stack (nats-server, Ray, DuckDB, the gateway over HTTP, the simulator), and opening asks what
the page asks for that many events. Marked ``long`` (a stack of its own, ~12 s) to keep the default
run under its 15 minutes; ``.ci/run`` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ACTIONS = ("open", "step", "why_reply", "why_belief", "compare")


@pytest.mark.long
def test_the_inspector_bench_measures_what_the_page_asks() -> None:
    result = subprocess.run([sys.executable, "-m", "mirror", "bench", "inspector", "--turns", "4", "--repeat", "2", "--json"],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "inspector" and report["turns"] == 4 and report["repeat"] == 2
    assert report["events"] == report["last_seq"] > 4
    for name in ACTIONS:
        figures = report[name]
        assert 0 < figures["p50_ms"] <= figures["p95_ms"], name
        assert 0 < figures["bytes_p50"] <= figures["bytes_p95"], name
        assert figures["requests"] >= 1, name
    # the summary and the timeline at once, then at once the last state, the dialogue's turns, the last event (a
    # thought, not a turn), the narrative before the last and (once a reflection ran) the reflections
    assert 1 + 1 + 3 <= report["open"]["requests"] <= 1 + 1 + 5
    assert set(report["open"]["parts_p50_ms"]) == {"summary_and_timeline", "select"}
    assert report["why_reply"]["requests"] == report["why_belief"]["requests"] == 1
    assert report["compare"]["requests"] == 3
    assert report["why_belief"]["recall_count"] >= 0
    assert report["healthz_p50_ms"] > 0
    assert abs(report["open_floor_ms"] - report["open"]["requests"] * report["healthz_p50_ms"]) <= 0.01 * report["open"]["requests"]
