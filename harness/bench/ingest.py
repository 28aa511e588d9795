"""`mirror bench ingest`: end-to-end event throughput against the raw JetStream limit.

Production path: the writers' fenced appends (``JetStreamBus.append``, many conversations'
appends in flight at once) and the shard's ingester process committing them to DuckDB
(``IngesterProcess``, as the stack starts it), on a nats-server that syncs as Mirror's does; no
actors, gateway or model, so the figures are the bus's and the log's.

End to end = fenced, deduplicated appends from many conversations through JetStream, until
an ingester in its own process has committed every event to DuckDB. The raw limit is the
same encoded payloads published pipelined, without fences, ids or consumers, measured in the
same run before and after; the faster of the two is reported, so the ratio is conservative.

With ``shards`` > 1 there is one tenant per shard (shard ``0`` the default, the others listed
in a shard map), the conversations spread evenly over them, and an ingester process per shard;
each shard's rate is its events over the time until it had committed the last of them, the
total rate all events over the time until the last shard had.

Those figures are measured on an embedded nats-server with ``sync_interval: always`` (Mirror's
default: each acknowledgement after an fsync) unless ``nats_sync`` relaxes it; ``sync_interval``
in the JSON says which (None with ``--nats-url``: that server's own setting). Then
:mod:`._sync_cost` prices the default:
``sync_always`` and ``sync_relaxed``, writers that await each ack (N at once, and one alone) on
two fresh servers, one syncing always and one at the relaxed interval, and their ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from rich.progress import Progress

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import SYNC_ALWAYS, validate_sync_interval
from mirror.events.payloads import Monologue, Narrative, Provenance, Turn
from mirror.events.shards import ShardMap
from mirror.harness.bench._stacks import nats_and_ingester
from mirror.harness.bench._sync_cost import SyncCostConfig, sync_cost

RAW_STREAM = "BENCHRAW"
WAIT_SLICE_S = 0.25
"""How long one wait for a shard's commits lasts before the others' (and the progress bar) are looked at."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of process ``pid`` (this process when None), from /proc on Linux.

    Throughput on a shared 2-core machine is noisy; CPU time per event is not, so the
    benchmark reports both. None where /proc is not available.
    """
    if pid is None:
        times = os.times()
        return times.user + times.system
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


class _CpuMeter:
    """CPU seconds used by named processes between :meth:`start` and :meth:`per_unit`."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self._started: dict[str, float | None] = {}

    def start(self) -> _CpuMeter:
        self._started = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def per_unit(self, units: int) -> dict[str, float | None]:
        """Microseconds of CPU per unit (event or message), per process."""
        used: dict[str, float | None] = {}
        for name, pid in self.pids.items():
            now, before = _cpu_seconds(pid), self._started.get(name)
            used[name] = None if now is None or before is None else round((now - before) * 1e6 / units, 1)
        return used


@dataclass(frozen=True, slots=True)
class IngestBenchConfig:
    events: int = 30_000
    conversations: int = 1_000
    in_flight: int = 512
    timeout_s: float = 300.0
    show_progress: bool = False
    shards: int = 1
    nats_sync: str = SYNC_ALWAYS
    """The end-to-end run's embedded nats-server's ``sync_interval``."""
    sync: SyncCostConfig = SyncCostConfig()
    """The comparison of sync always with a relaxed interval (``writers=0`` skips it)."""


def bench_tenants(shards: int) -> tuple[list[str], tuple[str, ...]]:
    """A fresh tenant per shard (also on a shared broker) and the shard map placing them:
    the first on the default shard ``0``, the ``i``-th listed on shard ``i``."""
    run = secrets.token_hex(4)
    tenants = [f"bench-{run}" if shards == 1 else f"bench-{run}-{index}" for index in range(shards)]
    return tenants, tuple(f"{index}={tenant}" for index, tenant in enumerate(tenants) if index)


def workload(config: IngestBenchConfig, tenants: list[str] | None = None) -> list[tuple[StreamKey, list[Event]]]:
    """Conversations shaped like Mirror's: a turn, then the monologue and narrative it caused;
    dealt to ``tenants`` in turn (default: one fresh tenant)."""
    per_conversation = max(1, config.events // config.conversations)
    tenants = tenants or bench_tenants(1)[0]
    provenance = Provenance(
        model="bench-model", prompt_set="bench", request_fingerprint="0" * 64,
        parameters={"temperature": 0.7, "max_tokens": 3000}, latency_ms=812.5,
        prompt_tokens=1200, completion_tokens=180,
    )
    batches = []
    for index in range(config.conversations):
        key = StreamKey(tenants[index % len(tenants)], f"conversation-{index}")
        events = []
        for seq in range(1, per_conversation + 1):
            turn = (seq - 1) // 3
            kind = (seq - 1) % 3
            if kind == 0:
                payload: Any = Turn(f"user message {turn} " * 8, f"reply {turn} " * 20, narrative_seq=seq - 1 or None)
            elif kind == 1:
                payload = Monologue("I reason that " * 12, "I remember that " * 10, "My goal is " * 8)
            else:
                payload = Narrative("The narrative so far: " * 40, monologue_seq=seq - 1)
            events.append(make_event(key, seq, payload, turn=turn, provenance=provenance if kind else None))
        batches.append((key, events))
    return batches


async def _raw_publish_rate(
    bus: JetStreamBus, payloads: list[bytes], in_flight: int, meter: _CpuMeter
) -> tuple[float, dict[str, float | None]]:
    """Messages per second and CPU µs per message of the raw publish, per process."""
    js = bus.nc.jetstream(publish_async_max_pending=in_flight)
    with contextlib.suppress(Exception):
        await js.delete_stream(RAW_STREAM)
    await js.add_stream(name=RAW_STREAM, subjects=["benchraw.>"])
    meter.start()
    started = time.perf_counter()
    acks = [await js.publish_async(f"benchraw.{i % 1000}", data) for i, data in enumerate(payloads)]
    await asyncio.gather(*acks)
    elapsed = time.perf_counter() - started
    cpu = meter.per_unit(len(payloads))
    await js.delete_stream(RAW_STREAM)
    return len(payloads) / elapsed, cpu


@dataclass(frozen=True, slots=True)
class _EndToEnd:
    """What the fenced appends until every shard's commit took."""

    conflicts: int
    publish_s: float
    """Until the last append was acknowledged."""
    seconds: float
    """Until every shard had committed its last event (or the timeout)."""
    finished: dict[str, float]
    """Per shard that got there: the seconds until it had committed its last event."""
    cpu: dict[str, float | None]
    """CPU µs per event, per process."""


@contextlib.asynccontextmanager
async def _connections(nats_url: str, in_flight: int,
                       shards: ShardMap) -> AsyncIterator[tuple[JetStreamBus, dict[str, LogClient]]]:
    """The fenced bus to append through, and a log client per shard on a connection of its own."""
    bus = await JetStreamBus.connect(nats_url, StreamSettings(max_in_flight=in_flight))
    monitor = await connect_nats(nats_url, name="mirror-bench-monitor")
    try:
        yield bus, {shard: LogClient(monitor, shard=shard) for shard in shards.shards}
    finally:
        await bus.close()
        await monitor.close()


def _commit_targets(shards: ShardMap, batches: list[tuple[StreamKey, list[Event]]],
                    results: list[Head | AppendConflict]) -> dict[str, int]:
    """The stream seq each shard must commit up to: the highest fence of an append to one of its tenants."""
    targets = dict.fromkeys(shards.shards, 0)
    for (key, _), result in zip(batches, results, strict=True):
        if isinstance(result, Head):
            shard = shards.shard_of(key.tenant)
            targets[shard] = max(targets[shard], result.fence)
    return targets


async def _wait_committed(clients: dict[str, LogClient], targets: dict[str, int], started: float,
                          config: IngestBenchConfig) -> dict[str, float]:
    """Wait, a slice at a time, until each shard's committed offset reaches its target (or ``timeout_s``
    after ``started``); returns, per shard that got there, the seconds since ``started``. The waits
    are the log service's read-your-writes barrier, as a reader's: a batch lingering at the end is
    committed at the request, not after the linger."""
    finished: dict[str, float] = {}
    with Progress(transient=True, disable=not config.show_progress) as progress:
        task = progress.add_task("ingesting", total=sum(targets.values()))
        while len(finished) < len(targets) and time.perf_counter() - started < config.timeout_s:
            for shard in [shard for shard in targets if shard not in finished]:
                if await clients[shard].wait_committed(targets[shard], WAIT_SLICE_S):
                    finished[shard] = time.perf_counter() - started
            if config.show_progress:
                offsets = {shard: await clients[shard].committed_offset() for shard in targets if shard not in finished}
                progress.update(task, completed=sum(min(offsets.get(s, targets[s]), targets[s]) for s in targets))
    return finished


async def _end_to_end(bus: JetStreamBus, clients: dict[str, LogClient], shards: ShardMap,
                      batches: list[tuple[StreamKey, list[Event]]], pids: dict[str, int | None],
                      config: IngestBenchConfig) -> _EndToEnd:
    """Append every conversation's events through the fenced bus and wait until every shard committed them."""
    heads = [(await bus.head(key)).with_last_seq(0) for key, _ in batches]
    meter = _CpuMeter(pids).start()
    started = time.perf_counter()
    results = await bus.append_many([(key, events, head) for (key, events), head in zip(batches, heads, strict=True)])
    publish_s = time.perf_counter() - started
    finished = await _wait_committed(clients, _commit_targets(shards, batches, results), started, config)
    seconds = time.perf_counter() - started
    cpu = meter.per_unit(sum(len(events) for _, events in batches))
    return _EndToEnd(conflicts=sum(isinstance(result, AppendConflict) for result in results), publish_s=publish_s,
                     seconds=seconds, finished=finished, cpu=cpu)


async def _per_shard(clients: dict[str, LogClient], shards: ShardMap, tenants: list[str],
                     batches: list[tuple[StreamKey, list[Event]]], run: _EndToEnd) -> dict[str, dict[str, Any]]:
    """Per shard, read back from its log: its tenants, events sent and committed, rate, events it skipped."""
    per_shard: dict[str, dict[str, Any]] = {}
    for shard, client in clients.items():
        owned = [tenant for tenant in tenants if shards.shard_of(tenant) == shard]
        committed_here = 0
        for tenant in owned:
            committed_here += sum(summary.events for summary in await client.conversations(tenant))
        seconds = run.finished.get(shard, run.seconds)
        per_shard[shard] = {
            "tenants": owned,
            "events": sum(len(events) for key, events in batches if shards.shard_of(key.tenant) == shard),
            "committed": committed_here, "events_per_s": round(committed_here / seconds), "seconds": round(seconds, 3),
            "skipped": (await client.stats()).skipped,
        }
    return per_shard


def _figures(config: IngestBenchConfig, payloads: list[bytes], run: _EndToEnd, per_shard: dict[str, dict[str, Any]],
             raw_before: tuple[float, dict[str, float | None]],
             raw_after: tuple[float, dict[str, float | None]], sync_interval: str | None) -> dict[str, Any]:
    """The JSON object: end to end against the faster of the two raw publishes."""
    total = len(payloads)
    committed = sum(shard["committed"] for shard in per_shard.values())
    raw = max(raw_before[0], raw_after[0])
    raw_cpu = raw_before[1] if raw_before[0] >= raw_after[0] else raw_after[1]
    events_per_s = committed / run.seconds
    return {
        "benchmark": "ingest",
        "sync_interval": sync_interval,
        "events": total,
        "committed": committed,
        "conversations": config.conversations,
        "conflicts": run.conflicts,
        "mean_payload_bytes": round(sum(map(len, payloads)) / len(payloads)),
        "publish_per_s": round(total / run.publish_s),
        "events_per_s": round(events_per_s),
        "raw_publish_per_s": round(raw),
        "raw_publish_before_per_s": round(raw_before[0]),
        "raw_publish_after_per_s": round(raw_after[0]),
        "ratio": round(events_per_s / raw, 3),
        "seconds": round(run.seconds, 3),
        "cpu_us_per_event": run.cpu,
        "raw_cpu_us_per_message": raw_cpu,
        "shards": len(per_shard),
        "per_shard": per_shard,
    }


async def _run(config: IngestBenchConfig, nats_url: str, pids: dict[str, int | None], tenants: list[str],
               shard_map: tuple[str, ...], sync_interval: str | None) -> dict[str, Any]:
    """The raw limit, end to end, each shard's figures, the raw limit again."""
    shards = ShardMap.parse(shard_map)
    batches = workload(config, tenants)
    payloads = [encode(event) for _, events in batches for event in events]
    raw_meter = _CpuMeter({name: pids[name] for name in ("publisher", "nats_server")})
    async with _connections(nats_url, config.in_flight, shards) as (bus, clients):
        raw_before = await _raw_publish_rate(bus, payloads, config.in_flight, raw_meter)
        run = await _end_to_end(bus, clients, shards, batches, pids, config)
        per_shard = await _per_shard(clients, shards, tenants, batches, run)
        raw_after = await _raw_publish_rate(bus, payloads, config.in_flight, raw_meter)
    return _figures(config, payloads, run, per_shard, raw_before, raw_after, sync_interval)


def _sync_workload(config: SyncCostConfig) -> list[tuple[StreamKey, list[Event]]]:
    """A warm-up conversation, the lone writer's, one per concurrent writer: ``appends`` events each."""
    conversations = config.writers + 2
    return workload(IngestBenchConfig(events=config.appends * conversations, conversations=conversations))


def run_ingest_bench(config: IngestBenchConfig, nats_url: str | None = None) -> dict[str, Any]:
    """Start NATS (unless a URL is given) and an ingester process per shard, run, tear everything down;
    then the sync comparison on servers of its own."""
    tenants, shard_map = bench_tenants(config.shards)
    with nats_and_ingester(nats_url, shard_map, config.nats_sync) as log_stack:
        pids = {"publisher": None, "nats_server": log_stack.nats_pid}
        if config.shards == 1:
            pids["ingester"] = log_stack.ingester_pid
        else:
            pids |= {f"ingester_{shard}": pid for shard, pid in log_stack.ingester_pids.items()}
        figures = asyncio.run(_run(config, log_stack.url, pids, tenants, shard_map,
                                   None if nats_url else validate_sync_interval(config.nats_sync)))
    if config.sync.writers:
        figures |= sync_cost(config.sync, _sync_workload(config.sync))
    return figures


__all__ = ["IngestBenchConfig", "RAW_STREAM", "SyncCostConfig", "bench_tenants", "run_ingest_bench", "workload"]
