"""Forgetting a conversation in the DuckDB log: a tombstone first, then every row, then the bytes.

Measured (``harness/bench/erasure_residue.py``, docs/operations.md "Forgetting and retention"):
a ``DELETE`` leaves every deleted row's bytes in the database file, through ``CHECKPOINT``,
``FORCE CHECKPOINT`` and ``VACUUM``; rewriting the table (a new table filled from the old, the
old dropped, a checkpoint) leaves none. Rewriting a table in place is not enough either (freed blocks
keep their bytes until reused). So erasure here is delete, then copy the database into a fresh
file that takes the old one's place (the log's connections closed and opened again around it).

The tombstone (table ``forgotten``) is written before anything is deleted, in its own
transaction, marked unfinished; the sweep is idempotent (deleting what is already gone deletes
nothing), so a sweep cut short by a crash is run again from the start by whoever finds the
unfinished tombstone. It holds no content: the tenant, the conversation, when it was asked and
finished, and how many events there were. While it exists the log refuses the conversation's
reads (:class:`~mirror.events.errors.ConversationForgotten`) and drops its late events at ingest.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

__all__ = [
    "CONTENT_TABLES", "TOMBSTONE_SCHEMA", "TenantTombstone", "Tombstone", "begin", "begin_tenant", "copy_into_fresh_file",
    "finish", "forgetting_tenants", "forgotten", "release", "sweep", "tenant_tombstone", "tombstone", "unfinished",
    "unfinished_tenants", "without_forgotten", "without_forgotten_rows",
]

TOMBSTONE_SCHEMA = """
CREATE TABLE IF NOT EXISTS forgotten (
    tenant VARCHAR NOT NULL,
    conversation VARCHAR NOT NULL,
    requested_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    events BIGINT NOT NULL,
    PRIMARY KEY (tenant, conversation)
);
CREATE TABLE IF NOT EXISTS forgotten_tenants (
    tenant VARCHAR PRIMARY KEY,
    requested_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    conversations BIGINT NOT NULL,
    events BIGINT NOT NULL
);
"""

CONTENT_TABLES = ("events", "snapshots", "discarded_snapshots", "branches", "rejected_events")
"""Every table that names or holds a conversation's content; each is emptied of it and rewritten.
(The offsets and regressions tables hold stream positions only.)"""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a forgotten conversation: who, which, when, how many events. No content."""

    tenant: str
    conversation: str
    requested_at: float
    finished_at: float | None
    events: int

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def as_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "conversation": self.conversation, "requested_at": self.requested_at,
                "finished_at": self.finished_at, "events": self.events,
                "status": "forgotten" if self.finished else "forgetting"}


@dataclass(frozen=True, slots=True)
class TenantTombstone:
    """What is left of a forgotten tenant: which, when, how many conversations and events. Each
    of its conversations has its own :class:`Tombstone` too (written in the same transaction)."""

    tenant: str
    requested_at: float
    finished_at: float | None
    conversations: int
    events: int

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def as_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "requested_at": self.requested_at, "finished_at": self.finished_at,
                "conversations": self.conversations, "events": self.events,
                "status": "forgotten" if self.finished else "forgetting"}


def tombstone(con: duckdb.DuckDBPyConnection, tenant: str, conversation: str) -> Tombstone | None:
    row = con.execute("SELECT requested_at, finished_at, events FROM forgotten WHERE tenant = ? AND conversation = ?",
                      [tenant, conversation]).fetchone()
    return None if row is None else Tombstone(tenant, conversation, float(row[0]),
                                              None if row[1] is None else float(row[1]), int(row[2]))


def tenant_tombstone(con: duckdb.DuckDBPyConnection, tenant: str) -> TenantTombstone | None:
    row = con.execute("SELECT requested_at, finished_at, conversations, events FROM forgotten_tenants WHERE tenant = ?",
                      [tenant]).fetchone()
    return None if row is None else TenantTombstone(tenant, float(row[0]), None if row[1] is None else float(row[1]),
                                                    int(row[2]), int(row[3]))


def unfinished_tenants(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in con.execute("SELECT tenant FROM forgotten_tenants WHERE finished_at IS NULL").fetchall()]


forgetting_tenants = unfinished_tenants
"""The tenants whose every late event is dropped at ingest: those being swept (see :func:`begin_tenant`)."""


def forgotten(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], Tombstone]:
    """Every tombstone, by (tenant, conversation)."""
    rows = con.execute("SELECT tenant, conversation, requested_at, finished_at, events FROM forgotten").fetchall()
    return {(row[0], row[1]): Tombstone(row[0], row[1], float(row[2]), None if row[3] is None else float(row[3]),
                                        int(row[4])) for row in rows}


def unfinished(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in
            con.execute("SELECT tenant, conversation FROM forgotten WHERE finished_at IS NULL").fetchall()]


def begin(con: duckdb.DuckDBPyConnection, tenant: str, conversation: str) -> Tombstone:
    """The tombstone, written (unfinished) and committed before anything is deleted; an existing
    one is returned as it is (forgetting twice is one forgetting)."""
    return begin_many(con, tenant, [conversation])[0]


def begin_many(con: duckdb.DuckDBPyConnection, tenant: str, conversations: Sequence[str]) -> list[Tombstone]:
    """:func:`begin` for several conversations of a tenant, in one transaction."""
    con.begin()
    try:
        found = [_begin(con, tenant, conversation) for conversation in conversations]
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return found


def begin_tenant(con: duckdb.DuckDBPyConnection, tenant: str) -> tuple[TenantTombstone, list[Tombstone]]:
    """The tenant's tombstone and one per conversation it has, in one transaction, before anything
    is deleted; the conversations' tombstones. While the tenant's tombstone is unfinished every event of the
    tenant is dropped at ingest (a conversation begun meanwhile included); once its sweep has
    finished, its conversations' tombstones refuse them for good, and a new conversation of the
    same tenant name is a new conversation. Forgetting twice is one forgetting (a second one
    sweeps only what came since). A log that holds nothing of the tenant finishes at once."""
    con.begin()
    try:
        conversations = sorted({row[0] for table in ("events", "branches", "snapshots") for row in con.execute(
            f"SELECT DISTINCT conversation FROM {table} WHERE tenant = ?", [tenant]).fetchall()})
        existing = tenant_tombstone(con, tenant)
        tombstones = [_begin(con, tenant, conversation) for conversation in conversations]
        if existing is None:
            # Nothing of the tenant here (another shard holds it): finished at once, no sweep, no copy.
            finished = None if conversations else time.time()
            con.execute("INSERT INTO forgotten_tenants VALUES (?, ?, ?, ?, ?)",
                        [tenant, time.time(), finished, len(conversations), sum(t.events for t in tombstones)])
        elif existing.finished and conversations:  # forgotten again, with some come since: swept too
            con.execute("UPDATE forgotten_tenants SET finished_at = NULL, conversations = conversations + ?, "
                        "events = events + ? WHERE tenant = ?",
                        [len(conversations), sum(t.events for t in tombstones), tenant])
        con.commit()
    except BaseException:
        con.rollback()
        raise
    found = tenant_tombstone(con, tenant)
    assert found is not None, "just written"
    return found, tombstones


def _begin(con: duckdb.DuckDBPyConnection, tenant: str, conversation: str) -> Tombstone:
    existing = tombstone(con, tenant, conversation)
    if existing is not None:
        return existing
    events = con.execute("SELECT count(*) FROM events WHERE tenant = ? AND conversation = ?",
                         [tenant, conversation]).fetchone()
    con.execute("INSERT INTO forgotten VALUES (?, ?, ?, NULL, ?) ON CONFLICT DO NOTHING",
                [tenant, conversation, time.time(), int(events[0]) if events else 0])
    found = tombstone(con, tenant, conversation)
    assert found is not None, "just written"
    return found


def _escaped(text: str) -> str:
    # Identifiers are [A-Za-z0-9_-]: '_' is LIKE's one-character wildcard, so it is escaped.
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


def _subject_pattern(tenant: str, conversation: str) -> str:
    return f"%.{_escaped(tenant)}.{_escaped(conversation)}.%"


def sweep(con: duckdb.DuckDBPyConnection, keys: Sequence[tuple[str, str]], tenants: Sequence[str] = ()) -> None:
    """Delete every row of each conversation (every branch) and of each whole tenant, in one
    transaction. Idempotent. The bytes stay in the file's freed blocks until
    :func:`copy_into_fresh_file` (measured: see the module docstring)."""
    con.begin()
    try:
        for table in CONTENT_TABLES:
            for tenant, conversation in keys:
                if table == "rejected_events":
                    con.execute("DELETE FROM rejected_events WHERE subject LIKE ? ESCAPE '\\'",
                                [_subject_pattern(tenant, conversation)])
                else:
                    con.execute(f"DELETE FROM {table} WHERE tenant = ? AND conversation = ?", [tenant, conversation])
            for tenant in tenants:
                if table == "rejected_events":
                    con.execute("DELETE FROM rejected_events WHERE subject LIKE ? ESCAPE '\\'",
                                [f"%.{_escaped(tenant)}.%"])
                else:
                    con.execute(f"DELETE FROM {table} WHERE tenant = ?", [tenant])
        con.commit()
    except BaseException:
        con.rollback()
        raise


def copy_into_fresh_file(path: Path) -> None:
    """Copy the (closed, checkpointed) database into a new file and put it in the old one's place.

    A rewrite inside the file is not enough: DuckDB does not clear freed blocks, so a table
    rewritten in place left every deleted row's bytes whenever the freed blocks were not reused
    (seen in the resume test). ``COPY FROM DATABASE`` writes only live rows, keys included."""
    fresh = path.with_name(path.name + ".fresh")
    fresh.unlink(missing_ok=True)
    with duckdb.connect() as copier:
        copier.execute(f"ATTACH '{path}' AS old (READ_ONLY)")
        copier.execute(f"ATTACH '{fresh}' AS fresh")
        copier.execute("COPY FROM DATABASE old TO fresh")
        copier.execute("DETACH old")
        copier.execute("CHECKPOINT fresh")
        copier.execute("DETACH fresh")
    with fresh.open("rb") as file:
        os.fsync(file.fileno())
    os.replace(fresh, path)
    Path(f"{fresh}.wal").unlink(missing_ok=True)


def finish(con: duckdb.DuckDBPyConnection, keys: Sequence[tuple[str, str]], tenants: Sequence[str] = ()) -> list[Tombstone]:
    """Mark the swept tombstones finished (a tenant's finishes every conversation tombstone of it)."""
    now = time.time()
    for tenant, conversation in keys:
        con.execute("UPDATE forgotten SET finished_at = ? WHERE tenant = ? AND conversation = ? AND finished_at IS NULL",
                    [now, tenant, conversation])
    for tenant in tenants:
        con.execute("UPDATE forgotten SET finished_at = ? WHERE tenant = ? AND finished_at IS NULL", [now, tenant])
        con.execute("UPDATE forgotten_tenants SET finished_at = ? WHERE tenant = ? AND finished_at IS NULL", [now, tenant])
    con.execute("FORCE CHECKPOINT")
    found = [tombstone(con, tenant, conversation) for tenant, conversation in keys]
    assert all(found), "a sweep follows its tombstone"
    return [t for t in found if t is not None]


def without_forgotten(table: pa.Table, forgotten: Collection[tuple[str, str]], tenants: Collection[str] = ()) -> pa.Table:
    """An ingest batch without the events of forgotten conversations and of tenants being
    forgotten (late writes): never inserted, so not even an aborted transaction's blocks hold them."""
    keys = pc.binary_join_element_wise(table["tenant"], table["conversation"], ".")
    keep = pc.invert(pc.is_in(keys, value_set=pa.array([f"{t}.{c}" for t, c in forgotten], type=pa.string())))
    if tenants:
        keep = pc.and_(keep, pc.invert(pc.is_in(table["tenant"], value_set=pa.array(sorted(tenants), type=pa.string()))))
    kept = table.filter(keep)
    if kept.num_rows < table.num_rows:
        log.info("dropped %d late event(s) of forgotten conversations", table.num_rows - kept.num_rows)
    return kept


def without_forgotten_rows(rows: list[tuple[Any, ...]], forgotten: Collection[tuple[str, str]],
                           tenants: Collection[str] = ()) -> list[tuple[Any, ...]]:
    """:func:`without_forgotten` for a small batch's rows (tenant and conversation first)."""
    kept = [row for row in rows if (row[0], row[1]) not in forgotten and row[0] not in tenants]
    if len(kept) < len(rows):
        log.info("dropped %d late event(s) of forgotten conversations", len(rows) - len(kept))
    return kept


def release(con: duckdb.DuckDBPyConnection, tenant: str, conversation: str,
            forgotten: dict[tuple[str, str], Tombstone]) -> bool:
    """Drop a *finished* tombstone, so the conversation id may be written again (an import with
    ``force``, :mod:`mirror.events.transfer`), and from ``forgotten`` (the log's refused keys);
    False when there is none or its sweep is still running (lifting it then would let the sweep
    delete what comes next)."""
    row = con.execute("DELETE FROM forgotten WHERE tenant = ? AND conversation = ? AND finished_at IS NOT NULL "
                      "RETURNING conversation", [tenant, conversation]).fetchone()
    if row is not None:
        forgotten.pop((tenant, conversation), None)
    return row is not None
