"""What acknowledged-means-durable costs: writers awaiting each ack, with ``sync_interval: always``
and with a relaxed interval, each on a fresh embedded nats-server of its own (``bench ingest``).

A writer here is what a conversation is to the bus: it appends one event, fenced on the one
before, and waits for the acknowledgement before the next. ``writers_per_s`` is N such writers
at once on one connection (events per second in all), ``ack_p50_ms``/``ack_p99_ms`` one writer
alone, per acknowledged append. With ``always`` the server fsyncs before each ack, so those
waits include the disk's flush; relaxed, they end at the page cache. With ``servers`` ≥ 2 both
run on a JetStream cluster of that many on loopback (the stream with min(3, N) replicas), where
nats-server syncs a replicated stream per Raft batch rather than per message.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.nats.cluster import EmbeddedNatsCluster
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.server import SYNC_ALWAYS, validate_sync_interval
from mirror.harness.bench._stats import percentile


@dataclass(frozen=True, slots=True)
class SyncCostConfig:
    writers: int = 64
    """Concurrent writers for ``writers_per_s``; 0 skips the comparison."""
    appends: int = 200
    """Appends by each writer, and by the one writer timed alone."""
    relaxed: str = "2m"
    """The interval compared with ``always`` (nats-server's own default: two minutes)."""
    servers: int = 1
    """nats-servers each comparison runs: 1, or a JetStream cluster of that many."""

    def __post_init__(self) -> None:
        validate_sync_interval(self.relaxed)


async def _append_one_by_one(bus: JetStreamBus, key: StreamKey, events: list[Event]) -> list[float]:
    """Append ``events`` one at a time, each after the previous one's ack; the seconds each took."""
    head = (await bus.head(key)).with_last_seq(0)
    waits = []
    for event in events:
        started = time.perf_counter()
        head = await bus.append(key, [event], head)
        waits.append(time.perf_counter() - started)
    return waits


async def _measure(url: str, config: SyncCostConfig,
                   workload: list[tuple[StreamKey, list[Event]]]) -> dict[str, Any]:
    """``workload``: a conversation to warm up on (the first publishes pay for the stream's first block
    and the connection's first round trips), the lone writer's, then one per concurrent writer."""
    (warm_key, warm_events), (lone_key, lone_events), *concurrent = workload
    bus = await JetStreamBus.connect(url)
    try:
        await _append_one_by_one(bus, warm_key, warm_events)
        lone = await _append_one_by_one(bus, lone_key, lone_events)
        started = time.perf_counter()
        await asyncio.gather(*(_append_one_by_one(bus, key, events) for key, events in concurrent))
        seconds = time.perf_counter() - started
    finally:
        await bus.close()
    appended = sum(len(events) for _, events in concurrent)
    return {
        "writers": len(concurrent), "appends": appended,
        "writers_per_s": round(appended / seconds),
        "ack_p50_ms": round(percentile(lone, 0.5) * 1000, 3), "ack_p99_ms": round(percentile(lone, 0.99) * 1000, 3),
    }


def _on_fresh_server(sync_interval: str, config: SyncCostConfig,
                     workload: list[tuple[StreamKey, list[Event]]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-sync-") as workdir, \
            EmbeddedNatsCluster(Path(workdir) / "nats", config.servers, sync_interval=sync_interval) as servers:
        return ({"sync_interval": servers.sync_interval, "servers": servers.size}
                | asyncio.run(_measure(servers.url, config, workload)))


def sync_cost(config: SyncCostConfig, workload: list[tuple[StreamKey, list[Event]]]) -> dict[str, Any]:
    """``sync_always``, ``sync_relaxed`` and ``sync_always_over_relaxed`` (each figure's ratio):
    the same ``workload`` (see :func:`_measure`) on two fresh servers, always first."""
    always = _on_fresh_server(SYNC_ALWAYS, config, workload)
    relaxed = _on_fresh_server(config.relaxed, config, workload)
    return {
        "sync_always": always,
        "sync_relaxed": relaxed,
        "sync_always_over_relaxed": {
            figure: round(always[figure] / relaxed[figure], 3) if relaxed[figure] else None
            for figure in ("writers_per_s", "ack_p50_ms", "ack_p99_ms")
        },
    }


__all__ = ["SyncCostConfig", "sync_cost"]
