"""`mirror bench recovery` end to end, small: one conversation process and one ingester killed
with SIGKILL under load, and what it reports holds together."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]  # ~35 s: .ci/run runs it with -m long


def test_bench_recovery_kills_and_times_what_comes_back() -> None:
    command = [sys.executable, "-m", "mirror", "bench", "recovery", "-c", "3", "--rounds", "2",
               "--ingester-kills", "1", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    actor, ingester = result["actor_kill"], result["ingester_kill"]
    assert actor["failed"] == 0 and actor["next_turn_s"]["n"] == 2
    phases = actor["phases_s"]
    # The phases account for the whole wait: a live process, the rebuild, the turn (each figure is
    # rounded to the millisecond, so their sum may fall short of the rounded p50 by a few).
    accounted = phases["until_a_live_process"]["max"] + phases["rebuild"]["max"] + phases["turn"]["max"]
    assert accounted >= actor["next_turn_s"]["p50"] - 0.005
    assert 0 < phases["rebuild"]["max"] < actor["next_turn_s"]["max"]
    assert ingester["failed"] == 0 and ingester["reads_back_s"]["n"] == 1
    assert ingester["turn_s_after_kill"]["n"] > 0  # turns went on while the ingester was down
    assert set(result["statuses"]) <= {"200", "503"} and result["statuses"]["200"] > 0
