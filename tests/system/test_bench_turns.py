"""`mirror bench turns` in its closed loop on a real stack (nats-server, Ray, the ingester, the
simulator): it runs to the end through the bench's own aiohttp client and reports throughput
and the stack's CPU per turn by role."""

from __future__ import annotations

import json

import pytest

from mirror.harness.bench._cpu import MIRROR_ROLES
from mirror.harness.bench.turns import TurnsBenchConfig, run_turns_bench

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]  # ~40 s: one stack; .ci/run runs it with -m long


def test_the_closed_loop_runs_to_the_end_and_prices_each_turn() -> None:
    report = json.loads(json.dumps(run_turns_bench(TurnsBenchConfig(conversations=4, turns=5, llm_latency_ms=5))))
    assert report["turns"] == 20 and report["turns_per_s"] > 0
    cpu = report["cpu_ms_per_turn"]
    assert set(MIRROR_ROLES) <= set(cpu) and cpu["conversations"] > 0 and cpu["gateway"] > 0
    assert cpu["mirror"] == pytest.approx(sum(cpu[role] for role in MIRROR_ROLES), abs=0.05)
    assert cpu["all"] >= cpu["mirror"] and report["cpu_exited_processes"] == 0
    assert report["client_reused_retries"] >= 0
