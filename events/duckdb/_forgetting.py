"""The DuckDB log's forgetting methods (a mixin of :class:`~mirror.events.duckdb.log.DuckDBEventLog`).

What is stored and why is in :mod:`mirror.events.duckdb._erasure`; this is the log's side: the
tombstones written on the write thread and remembered in memory (reads of a forgotten
conversation refused, late events dropped at ingest), and one sweep for any number of
conversations and tenants — their rows deleted, then *one* copy of the database into a fresh
file for all of them. The copy is the cost (the whole file is rewritten while ingest waits on the
write thread), so a tenant, or several forgets queued while a sweep ran, share one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from mirror.events.duckdb import _erasure
from mirror.events.duckdb._erasure import TenantTombstone, Tombstone
from mirror.events.errors import ConversationForgotten
from mirror.events.ids import StreamKey, validate_identifier

__all__ = ["ForgettingLog"]

T = TypeVar("T")


class ForgettingLog:
    """Tombstones and the sweep; the log supplies the connection, the threads and the file."""

    path: Path
    _con: duckdb.DuckDBPyConnection
    _readable: asyncio.Event
    _forgotten: dict[tuple[str, str], Tombstone]
    """Forgotten conversations' tombstones: their reads refused (the tombstone in the error), their late events dropped."""
    _forgetting_tenants: set[str]
    """Tenants being swept: every late event of theirs dropped (see :func:`_erasure.begin_tenant`)."""
    fresh_copies = 0
    """Copies of the database into a fresh file since this log was opened (one per sweep)."""

    if TYPE_CHECKING:  # the log's (DuckDBEventLog)
        async def _run(self, function: Callable[..., T], *args: Any) -> T: ...
        async def _read(self, function: Callable[..., T], *args: Any) -> T: ...
        def _close(self) -> None: ...
        def _open(self) -> duckdb.DuckDBPyConnection: ...

        @property
        def _db(self) -> duckdb.DuckDBPyConnection: ...

    def _load_tombstones(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(_erasure.TOMBSTONE_SCHEMA)
        self._forgotten = _erasure.forgotten(con)
        self._forgetting_tenants = set(_erasure.forgetting_tenants(con))

    def _refuse_forgotten(self, key: StreamKey) -> None:
        tombstone = self._forgotten.get((key.tenant, key.conversation))
        if tombstone is not None:
            raise ConversationForgotten(key.tenant, key.conversation, tombstone.as_dict())

    def is_forgotten(self, tenant: str, conversation: str) -> bool:  # its late events are dropped at ingest
        return (tenant, conversation) in self._forgotten

    async def forget(self, tenant: str, conversation: str) -> Tombstone:
        """Write the conversation's tombstone (unfinished) and refuse it from now on; the rows
        stay until :meth:`sweep_forgotten`. Forgetting twice returns the first tombstone."""
        return (await self.forget_conversations(tenant, [conversation]))[0]

    async def forget_conversations(self, tenant: str, conversations: Sequence[str]) -> list[Tombstone]:
        """:meth:`forget` for several conversations of ``tenant``, their tombstones in one transaction."""
        validate_identifier("tenant", tenant)
        for conversation in conversations:
            validate_identifier("conversation", conversation)
        found = await self._run(_erasure.begin_many, self._con, tenant, list(conversations))
        self._forgotten.update({(tenant, tombstone.conversation): tombstone for tombstone in found})
        return found

    async def forget_tenant(self, tenant: str) -> tuple[TenantTombstone, list[Tombstone]]:
        """Write the tenant's tombstone and one per conversation of it; from now on every event of
        the tenant is dropped at ingest until the sweep has finished. Its conversations' tombstones too."""
        validate_identifier("tenant", tenant)
        found, tombstones = await self._run(_erasure.begin_tenant, self._con, tenant)
        self._forgotten.update({(tenant, tombstone.conversation): tombstone for tombstone in tombstones})
        self._forgetting_tenants.add(tenant)
        return found, tombstones

    async def sweep_forgotten(self, keys: Sequence[tuple[str, str]], tenants: Sequence[str] = ()) -> list[Tombstone]:
        """Delete every row of the forgotten conversations ``keys`` and tenants ``tenants``, copy the
        database into a fresh file once (no byte of them left in the file or the WAL), mark their
        tombstones finished. Idempotent: run again for tombstones a crash left unfinished. Ingest
        waits while it runs (one write thread)."""
        await self._run(_erasure.sweep, self._con, list(keys), list(tenants))
        self._readable.clear()  # reads wait while the file is swapped (~0.4 s per 10,000 events)
        try:
            return await self._run(self._swap_fresh_file, list(keys), list(tenants))
        finally:
            self._readable.set()

    def _swap_fresh_file(self, keys: list[tuple[str, str]], tenants: list[str]) -> list[Tombstone]:
        self._close()
        _erasure.copy_into_fresh_file(self.path)
        self.fresh_copies += 1
        self._con = self._open()
        found = _erasure.finish(self._con, keys, tenants)
        self._load_tombstones(self._con)  # the finished ones, as written
        return found

    async def tombstone(self, tenant: str, conversation: str) -> Tombstone | None:
        return await self._read(lambda: _erasure.tombstone(self._db, tenant, conversation))

    async def tenant_tombstone(self, tenant: str) -> TenantTombstone | None:
        return await self._read(lambda: _erasure.tenant_tombstone(self._db, tenant))

    async def release(self, tenant: str, conversation: str) -> bool:  # a finished tombstone lifted: _erasure.release
        return await self._run(_erasure.release, self._con, tenant, conversation, self._forgotten)

    async def unfinished_forgets(self) -> tuple[list[tuple[str, str]], list[str]]:
        """Conversations and tenants whose sweep has not finished (a crash cut it short): to sweep again."""
        return (await self._run(_erasure.unfinished, self._con),
                await self._run(_erasure.unfinished_tenants, self._con))
