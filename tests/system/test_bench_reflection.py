"""`mirror bench reflection` at 30 turns, each thought through before the next: both runs on real
stacks (nats-server, Ray, the ingester, the simulator at 100 ms), the reflections where the
policy puts them, and figures that agree with each other (the pure parts:
``tests/unit/test_bench_reflection.py``)."""

from __future__ import annotations

import json

import pytest

from mirror.harness.bench._cpu import MIRROR_ROLES
from mirror.harness.bench.reflection import ReflectionBenchConfig, run_reflection_bench

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # ~80 s: two stacks; .ci/run runs it with -m long

TURNS = 30
RUN_FIELDS = {
    "reflection", "turns", "latency_p50_ms", "latency_p90_ms", "overhead_p50_ms", "overhead_p90_ms", "llm_call_p50_ms",
    "phases_p50_ms", "cpu_ms_per_turn", "cpu_idle_ms_per_s", "cpu_ms_per_turn_above_idle", "cpu_processes_exited",
    "cpu_window_s", "chat_calls_per_turn", "embedding_calls_per_turn", "events_per_turn", "events_by_type",
    "thinking_backlog_at_end", "drained", "drain_s", "thinking_backlog_after_drain", "answered_late_share",
    "beliefs_at_end", "seconds",
}
REFLECTION_FIELDS = {
    "reflections", "rejected", "warnings", "overruled", "overruled_by_rule", "decisions", "decayed", "forgotten",
    "triggers", "reflection_turns", "rejected_reasons", "insights", "failures_by_stage", "reflection_model_ms",
    "portrait_chars", "reflection_model_ms_per_turn",
}


def test_the_reflection_bench_reflects_where_the_policy_says_and_compares_both_runs() -> None:
    config = ReflectionBenchConfig(turns=TURNS, pause_ms=20, wait_for_thinking=True, idle_s=1.0, settle_at_most_s=0)
    report = json.loads(json.dumps(run_reflection_bench(config)))
    on, off = report["reflection_on"], report["reflection_off"]
    assert set(on) == RUN_FIELDS | REFLECTION_FIELDS and set(off) == RUN_FIELDS
    policy = report["policy"]
    assert policy["max_per_hour"] == config.max_per_hour and policy["every"] == 20 and policy["cooldown"] == 10

    for run in (on, off):
        assert run["turns"] == TURNS and run["drained"] and run["cpu_processes_exited"] == 0
        assert run["thinking_backlog_after_drain"]["thinking"] == run["thinking_backlog_after_drain"]["memory"] == 0
        assert run["events_by_type"]["turn"] == run["events_by_type"]["narrative"] == TURNS  # each turn thought through
        assert run["events_per_turn"] == round(sum(run["events_by_type"].values()) / TURNS, 3)
        assert run["answered_late_share"] == 0.0  # waited for each turn's thinking
        assert run["latency_p50_ms"] > run["llm_call_p50_ms"] >= config.llm_latency_ms
        assert all(run["cpu_ms_per_turn"][role] > 0 for role in MIRROR_ROLES)
        assert run["cpu_ms_per_turn"]["mirror"] == pytest.approx(sum(run["cpu_ms_per_turn"][role] for role in MIRROR_ROLES), abs=0.05)

    # Reflection's work is on's alone: an insight per turn, the reflections, none of either when off.
    assert "insight" not in off["events_by_type"] and "reflection" not in off["events_by_type"]
    assert on["events_by_type"]["insight"] == on["insights"] == TURNS
    assert on["events_by_type"]["reflection"] == on["reflections"] > 0
    assert on["thinking_backlog_after_drain"]["insight"] == 0
    assert on["chat_calls_per_turn"] - off["chat_calls_per_turn"] >= 1.0  # the insight call, at least
    assert report["added_per_turn"]["events"] >= 1.0

    # Where the policy puts them: never inside the cooldown, never later than `every` (each turn
    # was thought through before the next, so nothing delayed them); the warm-up turn is turn 0.
    turns = on["reflection_turns"]
    assert turns == sorted(turns) and policy["cooldown"] - 1 <= turns[0] <= policy["every"] - 1
    assert all(policy["cooldown"] <= later - earlier <= policy["every"] for earlier, later in zip(turns, turns[1:], strict=False))
    assert on["thinking_backlog_after_drain"]["not_reflected_on"] == TURNS - turns[-1] < policy["every"]
    assert on["overruled"] == sum(on["overruled_by_rule"].values())
    assert sum(on["triggers"].values()) >= on["reflections"] and on["portrait_chars"] > 0
    assert not on["failures_by_stage"]

    # The summary repeats the runs' figures; the comparison is computed from them.
    for name in ("reflections", "rejected", "warnings", "overruled", "thinking_backlog_at_end"):
        assert report[name] == on[name]
    assert report["cpu_ms_per_turn_on"] == on["cpu_ms_per_turn"]["mirror"]
    assert report["cpu_ms_per_turn_off"] == off["cpu_ms_per_turn"]["mirror"]
    assert report["latency_added_p50_ms"] == round(on["latency_p50_ms"] - off["latency_p50_ms"], 2)
    assert report["targets"]["latency_met"] == (report["latency_added_p50_ms"] <= 2.0)
    assert report["targets"]["cpu_met"] == (report["cpu_added_share_above_idle"] <= 0.2)
