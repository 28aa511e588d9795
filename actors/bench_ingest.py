"""`mirror bench ingest`: end-to-end event throughput against the raw JetStream limit.

End to end = fenced, deduplicated appends from many conversations through JetStream, until
an ingester in its own process has committed every event to DuckDB. The raw limit is the
same encoded payloads published pipelined, without fences, ids or consumers, measured in the
same run before and after; the faster of the two is reported, so the ratio is conservative.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.errors import AppendConflict
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.jetstream import JetStreamBus, StreamSettings, connect_nats
from mirror.events.log_service import LogClient
from mirror.events.nats_server import EmbeddedNats
from mirror.events.payloads import Monologue, Narrative, Provenance, Turn

from .processes import IngesterProcess

RAW_STREAM = "BENCHRAW"


@dataclass(frozen=True, slots=True)
class IngestBenchConfig:
    events: int = 30_000
    conversations: int = 1_000
    in_flight: int = 512
    timeout_s: float = 300.0
    show_progress: bool = False


def workload(config: IngestBenchConfig) -> list[tuple[StreamKey, list[Event]]]:
    """Conversations shaped like Mirror's: a turn, then the monologue and narrative it caused."""
    per_conversation = max(1, config.events // config.conversations)
    tenant = f"bench-{secrets.token_hex(4)}"  # a fresh tenant per run, also on a shared broker
    provenance = Provenance(
        model="bench-model", prompt_set="bench", request_fingerprint="0" * 64,
        parameters={"temperature": 0.7, "max_tokens": 3000}, latency_ms=812.5,
        prompt_tokens=1200, completion_tokens=180,
    )
    batches = []
    for index in range(config.conversations):
        key = StreamKey(tenant, f"conversation-{index}")
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


async def _raw_publish_rate(bus: JetStreamBus, payloads: list[bytes], in_flight: int) -> float:
    js = bus.nc.jetstream(publish_async_max_pending=in_flight)
    with contextlib.suppress(Exception):
        await js.delete_stream(RAW_STREAM)
    await js.add_stream(name=RAW_STREAM, subjects=["benchraw.>"])
    started = time.perf_counter()
    acks = [await js.publish_async(f"benchraw.{i % 1000}", data) for i, data in enumerate(payloads)]
    await asyncio.gather(*acks)
    elapsed = time.perf_counter() - started
    await js.delete_stream(RAW_STREAM)
    return len(payloads) / elapsed


async def _run(config: IngestBenchConfig, nats_url: str, db_path: Path) -> dict[str, Any]:
    batches = workload(config)
    total = sum(len(events) for _, events in batches)
    payloads = [encode(event) for _, events in batches for event in events]
    bus = await JetStreamBus.connect(nats_url, StreamSettings(max_in_flight=config.in_flight))
    monitor = await connect_nats(nats_url, name="mirror-bench-monitor")
    client = LogClient(monitor)
    try:
        raw_before = await _raw_publish_rate(bus, payloads, config.in_flight)
        heads = [(await bus.head(key)).with_last_seq(0) for key, _ in batches]
        started = time.perf_counter()
        results = await bus.append_many([(key, events, head) for (key, events), head in zip(batches, heads)])
        published = time.perf_counter() - started
        conflicts = sum(isinstance(result, AppendConflict) for result in results)
        last_stream_seq = max(result.fence for result in results if isinstance(result, Head))
        offset = 0
        with Progress(transient=True, disable=not config.show_progress) as progress:
            task = progress.add_task("ingesting", total=last_stream_seq)
            while offset < last_stream_seq and time.perf_counter() - started < config.timeout_s:
                offset = await client.committed_offset()
                progress.update(task, completed=offset)
                if offset < last_stream_seq:
                    await asyncio.sleep(0.005)
        end_to_end = time.perf_counter() - started
        committed = sum(summary.events for summary in await client.conversations(batches[0][0].tenant))
        raw_after = await _raw_publish_rate(bus, payloads, config.in_flight)
    finally:
        await bus.close()
        await monitor.close()
    raw = max(raw_before, raw_after)
    events_per_s = committed / end_to_end
    return {
        "benchmark": "ingest",
        "events": total,
        "committed": committed,
        "conversations": config.conversations,
        "conflicts": conflicts,
        "mean_payload_bytes": round(sum(map(len, payloads)) / len(payloads)),
        "publish_per_s": round(total / published),
        "events_per_s": round(events_per_s),
        "raw_publish_per_s": round(raw),
        "raw_publish_before_per_s": round(raw_before),
        "raw_publish_after_per_s": round(raw_after),
        "ratio": round(events_per_s / raw, 3),
        "seconds": round(end_to_end, 3),
    }


def run_ingest_bench(config: IngestBenchConfig, nats_url: str | None = None) -> dict[str, Any]:
    """Start NATS (unless a URL is given) and an ingester process, run, tear everything down."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir:
        server = None if nats_url else EmbeddedNats(Path(workdir) / "nats").start()
        url = nats_url or server.url  # type: ignore[union-attr]
        ingester = IngesterProcess(url, Path(workdir) / "log.duckdb").start()
        try:
            return asyncio.run(_run(config, url, Path(workdir) / "log.duckdb"))
        finally:
            ingester.stop()
            if server is not None:
                server.stop()
