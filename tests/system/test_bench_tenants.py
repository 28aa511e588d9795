"""`mirror bench tenants` at a small size: every phase runs through the real stack (gateway, hosts,
nats-server, ingester, simulator) with two tenants' tokens, and the overload step is answered
with refusals that carry ``Retry-After``, not with time-outs."""

from __future__ import annotations

import json

import pytest

from mirror.harness.bench.tenants import TenantsBenchConfig, run_tenants_bench

PHASES = ("capacity", "b_alone", "b_with_a", "a_flood", "overload")


@pytest.mark.long
def test_the_tenants_bench_runs_every_phase_and_refuses_the_excess_with_retry_after() -> None:
    config = TenantsBenchConfig(llm_latency_ms=200, b_users=2, b_pause_ms=300, a_users=16, phase_s=4, model_slots=2)
    report = json.loads(json.dumps(run_tenants_bench(config)))
    assert report["benchmark"] == "tenants" and report["model_slots_per_host"] == 2
    slots = report["hosts"] * 2
    assert report["capacity_users"] == 2 * slots  # as many as the stack holds Talker calls
    # The model bounds capacity: each slot serves a call per 200 ms (a host whose racing first
    # turns each opened a fair share of their own once served several times this).
    assert report["capacity_turns_per_s"] <= slots / 0.2 * 1.1
    for phase in PHASES:
        assert report[phase]["admitted"] > 0, phase
        assert report[phase]["timeouts"] == 0 and report[phase]["errors"] == 0, (phase, report[phase])
    assert report["capacity_turns_per_s"] > 0
    overload = report["overload"]
    assert overload["offered"] > overload["admitted"]  # 2 × capacity offered: some refused
    assert overload["refused"] > 0 and overload["refused_without_retry_after"] == 0
    assert set(overload["statuses"]) <= {"200", "429", "503"}
    assert set(report["targets"]) == {
        "b_p99_with_a_over_alone", "a_offered_over_b_rate", "a_goodput_over_capacity_minus_b",
        "overload_goodput_over_capacity", "overload_admitted_p99_over_unloaded_p99", "overload_refusal_p99_ms",
        "overload_refusals_without_retry_after", "timeouts"}
    assert all(isinstance(target["pass"], bool) for target in report["targets"].values())
    assert report["targets"]["timeouts"]["pass"]
    # The two phases compared (capacity and overload) start with no thinking left from the last, and
    # every phase's slot-time is all accounted for.
    for phase in ("capacity", "overload"):
        spent = report["slot_time"][phase]
        assert spent["waiting_thinker_at_start"] == 0 and spent["waiting_talker_at_start"] == 0, (phase, spent)
    for phase, spent in report["slot_time"].items():
        assert spent["slot_s"] > 0 and abs(spent["idle"] + spent["talker"] + spent["thinker"] - 1) < 0.01, (phase, spent)
