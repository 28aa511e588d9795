"""The ingester's sweeper: forgotten conversations and tenants erased from the stream and the log,
as many at a time as have queued.

A forget writes its tombstone at once (:mod:`mirror.events.duckdb._forgetting`) and queues its
sweep here. One task sweeps: it takes everything queued, securely erases each one's stream
messages (:meth:`~mirror.events.nats.jetstream.JetStreamBus.erase`), then has the log delete
their rows and copy the database into a fresh file *once* for all of them. The copy rewrites the
whole file while ingest waits, so a tenant's conversations, and forgets that queued while a sweep
ran, share one copy rather than paying one each. A sweep cut short (a crash, a stop) leaves its
tombstones unfinished; the next start queues them again (every step is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.nats.jetstream import JetStreamBus

log = logging.getLogger(__name__)

__all__ = ["Sweeper"]


class Sweeper:
    """Queue with :meth:`add`; :meth:`start` runs the one sweeping task, :meth:`stop` ends it."""

    def __init__(self, bus: JetStreamBus, event_log: DuckDBEventLog, stream_lock: asyncio.Lock) -> None:
        self.bus, self.log, self._stream_lock = bus, event_log, stream_lock
        self._keys: dict[tuple[str, str], None] = {}
        self._tenants: dict[str, None] = {}
        self._queued = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0
        """Sweeps finished (each one fresh copy of the database) since the start."""
        self.last: dict[str, float] = {}
        """The last finished sweep's parts: ``stream_messages`` erased, ``stream_s``, ``log_s`` (rows and copy)."""
        self._late_erasures: dict[tuple[str, str], asyncio.Task[None]] = {}
        """Late writes of forgotten conversations whose stream copies are being erased."""

    def without_late_writes(self, newest_by_subject: dict[str, int]) -> dict[str, int]:
        """The subjects to compact, but those of forgotten conversations: their events were dropped
        at ingest (a late write: a host or a recompute that had not heard), and their stream copies
        are erased now rather than left to compaction."""
        kept = {}
        for subject, stream_seq in newest_by_subject.items():
            _, tenant, conversation, _ = subject.split(".", 3)
            if not self.log.is_forgotten(tenant, conversation):
                kept[subject] = stream_seq
            elif (tenant, conversation) not in self._late_erasures:
                self._late_erasures[tenant, conversation] = asyncio.create_task(
                    self._erase_late(tenant, conversation), name=f"erase-late-{tenant}-{conversation}")
        return kept

    async def _erase_late(self, tenant: str, conversation: str) -> None:
        try:
            async with self._stream_lock:
                erased = await self.bus.erase(tenant, conversation)
            log.info("erased %d late stream message(s) of forgotten %s/%s", erased, tenant, conversation)
        except Exception:
            log.exception("erasing late messages of forgotten %s/%s failed; the next forget of it erases them",
                          tenant, conversation)
        finally:
            self._late_erasures.pop((tenant, conversation), None)

    def add(self, keys: Iterable[tuple[str, str]] = (), tenants: Iterable[str] = ()) -> None:
        """Queue conversations (tenant, conversation) and whole tenants to sweep."""
        self._keys.update(dict.fromkeys(keys))
        self._tenants.update(dict.fromkeys(tenants))
        if self._keys or self._tenants:
            self._queued.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="ingest-forget")

    async def stop(self) -> None:
        """End the sweeping task; a sweep cut here resumes at the next start."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            keys, tenants = list(self._keys), list(self._tenants)
            self._keys.clear()
            self._tenants.clear()
            await self._sweep(keys, tenants)

    async def _sweep(self, keys: list[tuple[str, str]], tenants: list[str]) -> None:
        """The stream's copies securely erased and purged, then the log's rows and their bytes."""
        try:
            erased, started = 0, time.perf_counter()
            async with self._stream_lock:  # not while a compaction purges by sequences
                for tenant in tenants:
                    erased += await self.bus.erase(tenant, "*")
                for tenant, conversation in keys:
                    if tenant not in tenants:
                        erased += await self.bus.erase(tenant, conversation)
            streamed = time.perf_counter()
            await self.log.sweep_forgotten(keys, tenants)
            self.sweeps += 1
            self.last = {"stream_messages": erased, "stream_s": streamed - started, "log_s": time.perf_counter() - streamed}
            log.info("forgot %d conversation(s) and %d tenant(s) in one sweep; %d stream message(s) erased",
                     len(keys), len(tenants), erased)
        except Exception:
            log.exception("forgetting %s and tenants %s failed; they are swept again at the next start or request",
                          keys, tenants)
