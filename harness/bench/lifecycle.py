"""``mirror bench lifecycle``: what a tenant's data costs from export to erasure, on the product's path.

A real nats-server (embedded, its defaults) and the ingester (the code ``mirror ingest`` runs,
its defaults) writing one DuckDB file, asked as the gateway asks them: through the log's NATS
client and the JetStream bus. Background data of another tenant fills the file first, since a
forget's cost is one copy of the *whole* file (:mod:`mirror.events.duckdb._forgetting`).

Measured, in this order:
- ``export``: a whole tenant read from the log into an archive (``export_conversations`` and
  ``write_archive``, what ``GET /v1/tenants/{t}/export`` does): events/s and MB/s of archive;
- ``import``: that archive imported into a new tenant (``import_archive``, what ``POST
  /v1/import`` does: every event appended through the bus, answered once the log has committed);
- ``erase_conversation``: one conversation forgotten (the tombstone, the stream's messages
  securely erased, the rows deleted, one fresh copy of the file), until its job is ``forgotten``;
- ``erase_tenant``: a tenant of several conversations forgotten, one sweep for all of them;
- ``raw_fresh_copy``: the raw limit in the same run — DuckDB copying a file of the same size into
  a fresh file (``COPY FROM DATABASE``), the step no erasure here can avoid.
Then ``batching``, an in-run A/B: five conversations forgotten one at a time (a copy each)
against five asked at once (sharing copies). Each erase is also given per 1,000 events erased,
and beside the raw copy (``over_raw_copy``),
with its parts: the stream's messages erased (``stream_s``) and the log's rows and copy (``log_s``).

Production path: the log's NATS client (``LogClient``) asking an ``Ingester`` with its default
settings, and ``export_conversations`` / ``import_archive`` as the gateway's routes call them;
only the HTTP hop in front of them is left out.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mirror.events.archive import read_archive, write_archive
from mirror.events.bus import Head
from mirror.events.duckdb import _erasure
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from mirror.events.transfer import export_conversations, import_archive

__all__ = ["LifecycleBenchConfig", "run_lifecycle_bench"]

BATCH = 5
"""Conversations in each half of the batching A/B."""
TEXT = "a sentence of a conversation, about as long as a user's message and the reply to it. " * 3


@dataclass(frozen=True)
class LifecycleBenchConfig:
    conversation_events: int = 1_000
    """Events of the conversation that is forgotten."""
    tenant_conversations: int = 10
    """Conversations of the tenant that is exported, imported and forgotten (each ``conversation_events``)."""
    background_events: int = 20_000
    """Events of another tenant, kept: the rest of the file every forget copies."""
    batch: int = 200
    """Events per append."""


async def _write(bus: JetStreamBus, key: StreamKey, count: int, batch: int) -> None:
    head = Head(0, 0)
    for first in range(1, count + 1, batch):
        events = [make_event(key, seq, Turn(f"{TEXT}{seq}", f"{TEXT}{seq}"), turn=seq, timestamp=1_000_000.0 + seq)
                  for seq in range(first, min(first + batch, count + 1))]
        head = await bus.append(key, events, head)


async def _until(check: Callable[[], Awaitable[bool]], poll_s: float = 0.01) -> None:
    while not await check():
        await asyncio.sleep(poll_s)


def _rate(events: int, size: int, seconds: float) -> dict[str, Any]:
    return {"events": events, "bytes": size, "s": round(seconds, 4), "events_per_s": round(events / seconds, 1),
            "mb_per_s": round(size / seconds / 1e6, 2)}


async def _flushed(ingester: Ingester, bus: JetStreamBus) -> None:
    last = (await bus.js.stream_info(bus.settings.name)).state.last_seq
    if not await ingester.wait_for_offset(last, timeout=600):
        raise RuntimeError("the ingester did not commit the bench's events in 600 s")


def _raw_copy(db_path: Path, work: Path) -> dict[str, Any]:
    """The raw limit: the same file copied into a fresh one by DuckDB, as the sweep does."""
    copy = work / "raw-copy.duckdb"
    shutil.copyfile(db_path, copy)
    started = time.perf_counter()
    _erasure.copy_into_fresh_file(copy)
    seconds = time.perf_counter() - started
    return {"bytes": db_path.stat().st_size, "s": round(seconds, 4)}


async def _measure(config: LifecycleBenchConfig, server: EmbeddedNats, work: Path) -> dict[str, Any]:
    db_path = work / "log.duckdb"
    per = config.conversation_events
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="mirror-bench-lifecycle")
    client = LogClient(nc)
    try:
        event_log = DuckDBEventLog(db_path)
        ingester = Ingester(await connect_nats(server.url, name="mirror-bench-ingester"), event_log, IngesterSettings())
        await ingester.start()
        for n in range(max(1, config.background_events // per)):
            await _write(bus, StreamKey("kept", f"c{n}"), min(per, config.background_events), config.batch)
        await _write(bus, StreamKey("one", "gone"), per, config.batch)
        for n in range(config.tenant_conversations):
            await _write(bus, StreamKey("acme", f"c{n}"), per, config.batch)
        await _flushed(ingester, bus)
        await ingester.stop()
        await event_log.close()
        await ingester.nc.close()
        raw = _raw_copy(db_path, work)  # closed: the file as a sweep would copy it

        event_log = DuckDBEventLog(db_path)
        ingester = Ingester(await connect_nats(server.url, name="mirror-bench-ingester"), event_log, IngesterSettings())
        await ingester.start()
        try:
            started = time.perf_counter()
            found = await export_conversations(client, "acme", None)
            archive = write_archive("acme", found.conversations, personas=found.personas)
            exported = sum(len(events) for branches in found.conversations.values() for events in branches.values())
            export = _rate(exported, len(archive), time.perf_counter() - started)

            started = time.perf_counter()
            imported = await import_archive(bus, client, read_archive(archive), tenant="copy", commit_timeout_s=600)
            import_ = _rate(imported.events, len(archive), time.perf_counter() - started)

            copies = event_log.fresh_copies
            started = time.perf_counter()
            await client.forget("one", "gone")
            await _until(lambda: _finished(client.tombstone("one", "gone")))
            conversation_s = time.perf_counter() - started
            conversation_parts = dict(ingester.sweeper.last)

            tenant_events = config.tenant_conversations * per
            started = time.perf_counter()
            await client.forget_tenant("acme")
            await _until(lambda: _finished(client.tenant_tombstone("acme")))
            tenant_s = time.perf_counter() - started
            tenant_parts = dict(ingester.sweeper.last)
            copies = event_log.fresh_copies - copies
            batching = await _batching(client, event_log, config)
        finally:
            await ingester.stop()
            await event_log.close()
            await ingester.nc.close()
    finally:
        await nc.close()
        await bus.close()
    return {
        "config": asdict(config),
        "export": export, "import": import_,
        "erase_conversation": {"events": per, "s": round(conversation_s, 4),
                               "s_per_1000_events": round(conversation_s * 1000 / per, 4),
                               "over_raw_copy": round(conversation_s / raw["s"], 2), **_parts(conversation_parts)},
        "erase_tenant": {"conversations": config.tenant_conversations, "events": tenant_events, "s": round(tenant_s, 4),
                         "s_per_1000_events": round(tenant_s * 1000 / tenant_events, 4),
                         "over_raw_copy": round(tenant_s / raw["s"], 2), **_parts(tenant_parts)},
        "fresh_copies": copies,
        "batching": batching,
        "raw_fresh_copy": raw,
    }


async def _swept(client: LogClient, tenant: str, conversation: str) -> None:
    await _until(lambda: _finished(client.tombstone(tenant, conversation)))


async def _batching(client: LogClient, event_log: DuckDBEventLog, config: LifecycleBenchConfig) -> dict[str, Any]:
    """The in-run A/B of sharing a copy: ``BATCH`` of the kept tenant's conversations forgotten one
    at a time (each waited for: a copy each), then as many more asked at once (those queued while
    a sweep runs share the next one's copy). Empty when the background holds too few."""
    names = [f"c{n}" for n in range(max(1, config.background_events // config.conversation_events))]
    if len(names) < 2 * BATCH:
        return {}
    found: dict[str, Any] = {"conversations": BATCH}
    for label, group, together in (("one_at_a_time", names[:BATCH], False), ("asked_together", names[BATCH:2 * BATCH], True)):
        copies, started = event_log.fresh_copies, time.perf_counter()
        if together:
            await asyncio.gather(*(client.forget("kept", name) for name in group))
        for name in group:
            if not together:
                await client.forget("kept", name)
            await _swept(client, "kept", name)
        found[label] = {"s": round(time.perf_counter() - started, 4), "fresh_copies": event_log.fresh_copies - copies}
    return found


def _parts(last: dict[str, float]) -> dict[str, Any]:
    """The sweep's parts: the stream's messages securely erased, then the log (rows and the fresh copy)."""
    return {"stream_messages": int(last.get("stream_messages", 0)), "stream_s": round(last.get("stream_s", 0.0), 4),
            "log_s": round(last.get("log_s", 0.0), 4)}


async def _finished(asked: Awaitable[dict[str, Any] | None]) -> bool:
    tombstone = await asked
    return tombstone is not None and tombstone["status"] == "forgotten"


def run_lifecycle_bench(config: LifecycleBenchConfig = LifecycleBenchConfig()) -> dict[str, Any]:
    """Run the bench in a temporary data directory (removed after); its one JSON object."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-lifecycle-") as directory:
        work = Path(directory)
        with EmbeddedNats(work / "nats") as server:
            return asyncio.run(_measure(config, server, work))
