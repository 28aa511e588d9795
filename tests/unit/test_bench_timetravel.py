"""`mirror bench timetravel` reads through the gateway's own reader, and leaves the snapshots a
user's stack has before it times anything; both on the in-memory infrastructure (no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.actors.settings import RuntimeSettings
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.gateway.runtime import FinishedJobs, GatewayRuntime
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.tenants import TenantRegistry
from mirror.harness.bench.timetravel import TENANT, TimeTravelBenchConfig, bench_history, measure_timetravel
from mirror.replay import History


def reading_path(history: History) -> tuple[Any, ...]:
    """Everything that decides what a look costs: the class, where snapshots are read, written
    and discarded, the interval, and how the latest position is settled."""
    return (type(history), history.snapshots is history.log, history.materialize, history.snapshot_every,
            history.settle_timeout_s, getattr(history.stream_head, "__qualname__", None))


def no_conversations(key: StreamKey) -> Any:
    raise AssertionError("reading a history asks no conversation")


async def test_the_bench_reads_through_the_reader_the_gateway_builds(tmp_path: Path) -> None:
    infrastructure = InMemoryInfrastructure()
    settings = GatewaySettings(RuntimeSettings(infrastructure, None), str(tmp_path / "tenants.json"))  # type: ignore[arg-type]  # no LLM: nothing here calls one
    gateway = GatewayRuntime(settings, TenantRegistry(settings.tenants_file), no_conversations, FinishedJobs(8))
    gateways = await gateway.history(TENANT)
    benchs = bench_history(await infrastructure.connect(name="bench"))
    assert gateways.snapshots is not None and gateways.stream_head is not None  # the gateway writes and settles
    assert reading_path(benchs) == reading_path(gateways)


async def test_the_bench_times_looks_only_once_every_interval_has_its_snapshot() -> None:
    connections = await InMemoryInfrastructure().connect(name="bench")
    result = await measure_timetravel(connections, TimeTravelBenchConfig(events=1_000, lookups=20))
    assert result["snapshot_every"] == RuntimeSettings.__dataclass_fields__["snapshot_every"].default
    assert result["snapshots"] == 1_000 // result["snapshot_every"]
    key = StreamKey(TENANT, "long-conversation")
    rebuilt = await bench_history(connections).rebuild(key, 999)
    assert rebuilt.snapshot is not None and rebuilt.snapshot.seq == 800 and rebuilt.events_folded == 199
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["ratio_deep_vs_shallow"] == pytest.approx(result["deep_p50_ms"] / result["shallow_p50_ms"], rel=0.02)
