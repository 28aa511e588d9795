"""Every adapter of the log port, each with a way to put events into it.

The port only reads; how events get in differs by adapter: the in-memory log takes them
directly, the DuckDB log through the ingester's batch commit (the one write path it has), and
the NATS client through the DuckDB log of the :class:`LogService` it asks.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.events.codec import encode
from mirror.events.duckdb._ingest_batch import IngestBatch
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import Event
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient, LogService

ADAPTERS = ("memory", "duckdb", "nats")
_shards = itertools.count()


@dataclass
class WritableLog:
    """A log port adapter (``log``) and the function that commits events to it (``write``)."""

    name: str
    log: Any
    write: Callable[[Sequence[Event]], Awaitable[None]]


def duckdb_writer(event_log: DuckDBEventLog) -> Callable[[Sequence[Event]], Awaitable[None]]:
    """Commit events the way the ingester does: one checked batch and the consumer's offset."""
    stream_seqs = itertools.count(1)

    async def write(events: Sequence[Event]) -> None:
        batch = IngestBatch()
        offset = 0
        for event in events:
            offset = next(stream_seqs)
            batch.add(encode(event), offset, f"mirror.events.{event.tenant}.{event.conversation}")
        await event_log.commit_batch("contract", "MIRROR", offset, batch)

    return write


@contextlib.asynccontextmanager
async def writable_log(name: str, directory: Path, nats_url: str) -> AsyncIterator[WritableLog]:
    if name == "memory":
        memory = InMemoryEventLog()

        async def add(events: Sequence[Event]) -> None:
            memory.add(events)

        yield WritableLog(name, memory, add)
        return
    duck = DuckDBEventLog(directory / f"{name}.duckdb")
    try:
        if name == "duckdb":
            yield WritableLog(name, duck, duckdb_writer(duck))
            return
        nc = await connect_nats(nats_url, name="log-contract")
        shard = f"contract{next(_shards)}"
        service = LogService(nc, duck, shard=shard)
        await service.start()
        try:
            yield WritableLog(name, LogClient(nc, shard=shard, timeout=5.0), duckdb_writer(duck))
        finally:
            await service.stop()
            await nc.close()
    finally:
        await duck.close()
