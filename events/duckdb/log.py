"""DuckDB adapter of the log port, owned by one process (DuckDB allows one writer).

Writes (the ingest transaction, snapshots) run on one worker thread owned by the log, and
reads on two others, each with its own connection to the same database: a read sees what is
committed (DuckDB's MVCC) and never waits behind a commit, and the asyncio loop that feeds the
log keeps fetching from NATS while DuckDB works (DuckDB releases the GIL while it runs).

Ingest is exactly-once: a batch of events and the consumer's stream offset are written in one
transaction, with the stream's mark (:class:`~mirror.events.log.StreamMark`: its creation time
and the newest message stored), by which the ingester recognises a stream that came back older
(:meth:`DuckDBEventLog.record_regression` notes it and moves the offset back for the re-read). A batch that was committed but not acknowledged to NATS is redelivered after a
crash and skipped by offset; an event already present (same primary key, same bytes) is
ignored; one present with *other* bytes is a divergent duplicate and goes to
``rejected_events`` rather than silently replacing or shadowing anything.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import duckdb
import pyarrow as pa

from mirror.events.codec import decode
from mirror.events.duckdb import _erasure, _reads
from mirror.events.duckdb._forgetting import ForgettingLog
from mirror.events.duckdb._ingest_batch import EVENT_COLUMNS, IngestBatch, RejectedRecord
from mirror.events.envelope import Event
from mirror.events.errors import LogError, LogLocked
from mirror.events.ids import StreamKey, validate_identifier
from mirror.events.log import (
    ConversationSummary,
    IndexEntry,
    Loaded,
    LogStats,
    Snapshot,
    StreamMark,
    StreamRegression,
    check_range,
    check_timestamp,
    check_types,
)
from mirror.events.payloads import Fork

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOCK_CONFLICT = "Could not set lock"
"""How DuckDB's IOException says another process holds the file (it has no error code for it)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    tenant VARCHAR NOT NULL,
    conversation VARCHAR NOT NULL,
    branch VARCHAR NOT NULL,
    seq BIGINT NOT NULL,
    event_id VARCHAR NOT NULL,
    type VARCHAR NOT NULL,
    schema_version INTEGER NOT NULL,
    ts DOUBLE NOT NULL,
    turn INTEGER NOT NULL,
    stream_seq BIGINT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (tenant, conversation, branch, seq)
);
CREATE TABLE IF NOT EXISTS snapshots (
    tenant VARCHAR NOT NULL,
    conversation VARCHAR NOT NULL,
    branch VARCHAR NOT NULL,
    seq BIGINT NOT NULL,
    projection_version INTEGER NOT NULL,
    state BLOB NOT NULL,
    created_at DOUBLE NOT NULL,
    PRIMARY KEY (tenant, conversation, branch, seq, projection_version)
);
CREATE TABLE IF NOT EXISTS discarded_snapshots (
    tenant VARCHAR NOT NULL,
    conversation VARCHAR NOT NULL,
    branch VARCHAR NOT NULL,
    seq BIGINT NOT NULL,
    projection_version INTEGER NOT NULL,
    reason VARCHAR NOT NULL,
    discarded_at DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS ingest_offsets (
    consumer VARCHAR PRIMARY KEY,
    stream VARCHAR NOT NULL,
    stream_seq BIGINT NOT NULL,
    updated_at DOUBLE NOT NULL
);
ALTER TABLE ingest_offsets ADD COLUMN IF NOT EXISTS stream_created VARCHAR;
ALTER TABLE ingest_offsets ADD COLUMN IF NOT EXISTS anchor_seq BIGINT;
ALTER TABLE ingest_offsets ADD COLUMN IF NOT EXISTS anchor_id VARCHAR;
CREATE TABLE IF NOT EXISTS stream_regressions (
    consumer VARCHAR NOT NULL,
    stream VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    detail VARCHAR NOT NULL,
    committed_offset BIGINT NOT NULL,
    stream_last_seq BIGINT NOT NULL,
    reread_from BIGINT NOT NULL,
    detected_at DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    tenant VARCHAR NOT NULL,
    conversation VARCHAR NOT NULL,
    branch VARCHAR NOT NULL,
    parent_branch VARCHAR,
    fork_seq BIGINT,
    prompt_set VARCHAR,
    created_at DOUBLE NOT NULL,
    PRIMARY KEY (tenant, conversation, branch)
);
CREATE TABLE IF NOT EXISTS rejected_events (
    stream VARCHAR NOT NULL,
    stream_seq BIGINT NOT NULL,
    subject VARCHAR NOT NULL,
    error VARCHAR NOT NULL,
    data BLOB NOT NULL,
    rejected_at DOUBLE NOT NULL,
    PRIMARY KEY (stream, stream_seq)
);
"""


def _one_row(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of a query that always returns one: an aggregate, or an INSERT's row count."""
    row = result.fetchone()
    assert row is not None, "an aggregate or an INSERT returns exactly one row"
    return row


@dataclass(frozen=True, slots=True)
class CommitResult:
    inserted: int
    duplicates: int
    rejected: int


READ_THREADS = 2
"""Threads answering reads, each with its own connection (DuckDB runs them in parallel)."""
DUCKDB_THREADS = 1
"""DuckDB's own worker threads, beside the threads that issue statements. Each statement is small
(a commit of a few events, one conversation's range, an index), and handing its tasks to a worker
cost more CPU than it saved: ~0.9 ms per one-event commit, about a tenth of the ingester's CPU at
a trickle. Reads still run side by side, each on its own thread and connection (READ_THREADS); a
range read over 600,000 events took no longer on one thread than on two."""
VALUES_ROWS = 8
"""A batch of up to this many events is inserted as one ``INSERT … VALUES`` with parameters, a
larger one as an Arrow table. At a trickle (a thinking conversation writes an event every model
call) a commit carries one to a few events, and building, registering and unregistering an Arrow
table for them cost more than the insert itself (4.8 → 3.0 ms of CPU for one event); each
parameterised row costs ~0.15 ms, so from about ten rows on the Arrow table is cheaper."""

_Events: TypeAlias = pa.Table | list[tuple[Any, ...]] | None
"""A batch's events as the insert takes them: an Arrow table, rows for ``VALUES``, or none."""


@functools.lru_cache(maxsize=VALUES_ROWS)
def _insert_values(rows: int) -> str:
    """``INSERT INTO events VALUES (?, …), …`` for ``rows`` rows."""
    return "INSERT INTO events VALUES " + ", ".join([f"({', '.join('?' * len(EVENT_COLUMNS))})"] * rows)


class DuckDBEventLog(ForgettingLog):
    """The event log in one DuckDB file. Only one process may open it for writing."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duckdb")
        self._local = threading.local()  # each thread's connection: see _db
        self._reader: ThreadPoolExecutor | None = None
        self._readable = asyncio.Event()
        """Cleared while a forget's sweep swaps the file (reads wait for the reopened connections)."""
        self._readable.set()
        try:
            self._con = self._executor.submit(self._open).result()
        except duckdb.IOException as exc:
            self._executor.shutdown()
            if _LOCK_CONFLICT in str(exc):
                raise LogLocked(self.path, str(exc)) from exc
            raise LogError(f"cannot open the event log {self.path}: {exc}") from exc
        except duckdb.Error as exc:
            self._executor.shutdown()
            raise LogError(
                f"cannot open the event log {self.path}: {exc}; only one process may own it "
                "(is another `mirror ingest` running on this file?)"
            ) from exc

    def _open(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(str(self.path), config={"threads": DUCKDB_THREADS})
        con.execute(SCHEMA)
        self._load_tombstones(con)
        self._held = _reads.held_branches(con)  # a new conversation's load needs no query (load_raw)
        self._local.con = con
        # More connections to the same database, one per read thread (made here, on the thread
        # that owns the first; a reader thread takes one when it starts).
        self._reader_cons = [con.cursor() for _ in range(READ_THREADS)]
        spare: queue.SimpleQueue[duckdb.DuckDBPyConnection] = queue.SimpleQueue()
        for reader in self._reader_cons:
            spare.put(reader)
        self._reader = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="duckdb-read",
                                          initializer=lambda: setattr(self._local, "con", spare.get()))
        return con

    @property
    def _db(self) -> duckdb.DuckDBPyConnection:
        """This thread's connection: the writer's on the write thread, its own on a read thread."""
        return self._local.con

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        """On the write thread: ingest transactions, snapshots, anything that must see its own writes."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def _read(self, function: Callable[..., T], *args: Any) -> T:
        """On a read thread: sees what is committed, never waits behind a commit."""
        await self._readable.wait()  # set: returns at once, so the read is submitted before any swap closes
        assert self._reader is not None
        return await asyncio.get_running_loop().run_in_executor(self._reader, function, *args)

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.shutdown()
            for reader in self._reader_cons:
                reader.close()
        self._con.execute("CHECKPOINT")
        self._con.close()

    def close_sync(self) -> None:
        self._executor.submit(self._close).result()
        self._executor.shutdown()

    async def close(self) -> None:
        await self._run(self._close)
        self._executor.shutdown()

    # --------------------------------------------------------------------- ingest

    async def committed_offset(self, consumer: str) -> int:
        return await self._run(self._committed_offset, consumer)

    def _committed_offset(self, consumer: str) -> int:
        row = self._con.execute(
            "SELECT stream_seq FROM ingest_offsets WHERE consumer = ?", [consumer]
        ).fetchone()
        return 0 if row is None else int(row[0])

    async def stream_mark(self, consumer: str) -> StreamMark:
        """What ``consumer`` knows of its stream: creation time, newest stored message."""
        return await self._run(self._stream_mark, consumer)

    def _stream_mark(self, consumer: str) -> StreamMark:
        row = self._con.execute(
            "SELECT stream_created, anchor_seq, anchor_id FROM ingest_offsets WHERE consumer = ?", [consumer]
        ).fetchone()
        return StreamMark() if row is None else StreamMark(row[0], int(row[1] or 0), row[2])

    async def mark_stream(self, consumer: str, stream: str, created: str) -> None:
        """Remember the stream's creation time (the first time the ingester sees it)."""
        await self._run(self._mark_stream, consumer, stream, created)

    def _mark_stream(self, consumer: str, stream: str, created: str) -> None:
        con = self._con
        con.begin()
        try:
            offset = self._committed_offset(consumer)
            self._store_offset(con, consumer, stream, offset, time.time())
            con.execute("UPDATE ingest_offsets SET stream_created = ? WHERE consumer = ?", [created, consumer])
            con.commit()
        except BaseException:
            con.rollback()
            raise

    async def record_regression(
        self, consumer: str, stream: str, regression: StreamRegression, created: str | None
    ) -> None:
        """One transaction: the regression noted, the offset moved back to just before where the
        re-read starts, the anchor forgotten, the stream's (new) creation time kept. Events stay:
        the re-read stores each one once (primary key and bytes)."""
        await self._run(self._record_regression, consumer, stream, regression, created)

    def _record_regression(self, consumer: str, stream: str, regression: StreamRegression, created: str | None) -> None:
        con = self._con
        now = time.time()
        con.begin()
        try:
            con.execute("INSERT INTO stream_regressions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [consumer, stream, regression.kind, regression.detail, regression.committed_offset,
                         regression.stream_last_seq, regression.reread_from, now])
            self._store_offset(con, consumer, stream, regression.reread_from - 1, now)
            con.execute("UPDATE ingest_offsets SET stream_created = ?, anchor_seq = NULL, anchor_id = NULL "
                        "WHERE consumer = ?", [created, consumer])
            con.commit()
        except BaseException:
            con.rollback()
            raise
        log.warning("%s: %s", consumer, regression.describe())

    async def commit_batch(self, consumer: str, stream: str, offset: int, batch: IngestBatch) -> CommitResult:
        """Insert ``batch``'s events and move ``consumer``'s offset to ``offset``, atomically."""
        return await self._run(self._commit_batch, consumer, stream, offset, batch)

    def _commit_batch(self, consumer: str, stream: str, offset: int, batch: IngestBatch) -> CommitResult:
        forgetting = bool(self._forgotten or self._forgetting_tenants)
        events: _Events = None
        if len(batch) > VALUES_ROWS:
            events = self._table(batch)
        elif len(batch):
            rows = batch.rows()
            events = _erasure.without_forgotten_rows(rows, self._forgotten, self._forgetting_tenants) if forgetting else rows
        try:
            return self._insert_batch(consumer, stream, offset, batch, events, redelivered=False)
        except duckdb.ConstraintException:
            # An event of the batch is already in the log (redelivered after a lost offset, or
            # published twice): the transaction was rolled back; redo it sorting out each row.
            return self._insert_batch(consumer, stream, offset, batch, self._table(batch), redelivered=True)

    def _table(self, batch: IngestBatch) -> pa.Table:
        table = batch.table()
        if self._forgotten or self._forgetting_tenants:
            table = _erasure.without_forgotten(table, self._forgotten, self._forgetting_tenants)
        return table

    def _insert_batch(
        self, consumer: str, stream: str, offset: int, batch: IngestBatch, events: _Events, *, redelivered: bool
    ) -> CommitResult:
        """One transaction: the events, their branches, rejected records, the offset.

        The plain insert is the common case; with ``redelivered`` (``events`` then a table) rows
        already present are skipped if identical (a redelivery) and rejected as divergent otherwise.
        """
        now = time.time()
        rejected: list[RejectedRecord] = list(batch.rejected)
        duplicates = batch.duplicates
        con = self._con
        registered = isinstance(events, pa.Table)
        # Before the commit: a branch whose rows a reader can see is always held.
        self._held.update(map(_reads.held_key, batch.tenant, batch.conversation, batch.branch))
        con.begin()
        try:
            try:
                inserted = 0
                if isinstance(events, pa.Table):
                    con.register("ingest_batch", events)
                    if not redelivered:
                        inserted = _one_row(con.execute("INSERT INTO events SELECT * FROM ingest_batch"))[0]
                    else:
                        inserted = _one_row(con.execute(
                            "INSERT INTO events SELECT * FROM ingest_batch ON CONFLICT DO NOTHING"
                        ))[0]
                        clashes = con.execute(
                            "SELECT b.stream_seq FROM ingest_batch b JOIN events e "
                            "USING (tenant, conversation, branch, seq) "
                            "WHERE e.data <> b.data"
                        ).fetchall()
                        rejected.extend(batch.divergent_at(row[0]) for row in clashes)
                        duplicates += len(batch) - inserted - len(clashes)
                elif events:
                    inserted = _one_row(con.execute(_insert_values(len(events)), list(chain.from_iterable(events))))[0]
                if events is not None:
                    self._record_branches(con, [r for r in batch.first_records
                                                if (r["tenant"], r["conversation"]) not in self._forgotten
                                                and r["tenant"] not in self._forgetting_tenants])
                if rejected:
                    con.executemany(
                        "INSERT INTO rejected_events VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        [[stream, r.stream_seq, r.subject, r.error, r.data, now] for r in rejected],
                    )
                self._store_offset(con, consumer, stream, offset, now, batch.anchor)
                con.commit()
            except BaseException:
                con.rollback()
                raise
        finally:
            if registered:
                con.unregister("ingest_batch")  # after commit or rollback: not in an aborted transaction
        for r in rejected:
            log.error("rejected stream message %s on %s: %s", r.stream_seq, r.subject, r.error)
        return CommitResult(inserted=inserted, duplicates=duplicates, rejected=len(rejected))

    @staticmethod
    def _store_offset(con: duckdb.DuckDBPyConnection, consumer: str, stream: str, offset: int, now: float,
                      anchor: tuple[int, str] | None = None) -> None:
        # A plain UPDATE (the anchor in the same statement), and an INSERT the first time: DuckDB's
        # upsert costs ~3x as much, and this runs once per committed batch.
        anchor_columns = ", anchor_seq = ?, anchor_id = ?" if anchor else ""
        updated = con.execute(f"UPDATE ingest_offsets SET stream = ?, stream_seq = ?, updated_at = ?{anchor_columns} "
                              "WHERE consumer = ?", [stream, offset, now, *(anchor or ()), consumer]).fetchone()
        if not updated or not updated[0]:
            con.execute("INSERT INTO ingest_offsets (consumer, stream, stream_seq, updated_at, anchor_seq, anchor_id) "
                        "VALUES (?, ?, ?, ?, ?, ?)", [consumer, stream, offset, now, *(anchor or (None, None))])

    @staticmethod
    def _record_branches(con: duckdb.DuckDBPyConnection, firsts: Sequence[dict[str, Any]]) -> None:
        """A branch is born with its first event: seq 1, or the ``fork`` event of a forked branch.

        A forked branch inherits its parent's events up to the fork point, so its own events
        (the ``fork`` first) start at ``fork_seq + 1``. One statement for the whole batch.
        """
        rows: dict[tuple[str, str, str], list[Any]] = {}
        for r in firsts:
            key = (r["tenant"], r["conversation"], r["branch"])
            if r["type"] == Fork.TYPE:
                payload = r["payload"]
                rows[key] = [*key, payload.get("parent_branch"), payload.get("fork_seq"), payload.get("prompt_set"), r["ts"]]
            else:
                rows.setdefault(key, [*key, None, None, None, r["ts"]])
        if rows:
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(rows))
            con.execute(f"INSERT INTO branches VALUES {values} ON CONFLICT DO NOTHING",
                        [value for row in rows.values() for value in row])

    # --------------------------------------------------------------------- reads

    async def read(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        check_range(after_seq, until_seq, limit)
        return [decode(data) for data in await self.read_raw(key, after_seq=after_seq, until_seq=until_seq, limit=limit)]

    async def read_raw(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[bytes]:
        check_range(after_seq, until_seq, limit)
        return await self._read(self._range_read, _reads.read_raw, key, after_seq, until_seq, limit)

    async def index(self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None,
                    limit: int | None = None) -> list[IndexEntry]:
        check_range(after_seq, until_seq, limit)
        rows = await self._read(self._range_read, _reads.index_rows, key, after_seq, until_seq, limit)
        return [IndexEntry(int(seq), kind, int(turn), float(ts)) for seq, kind, turn, ts in rows]

    async def find(self, key: StreamKey, *, types: Sequence[str], mentioning: str | None = None, after_seq: int = 0,
                   until_seq: int | None = None) -> list[Event]:
        return [decode(data) for data in await self.find_raw(key, types, mentioning, after_seq, until_seq)]

    async def find_raw(self, key: StreamKey, types: Sequence[str], mentioning: str | None, after_seq: int,
                       until_seq: int | None) -> list[bytes]:
        check_range(after_seq, until_seq, None)
        needle = None if mentioning is None else mentioning.encode()
        return await self._read(self._range_read, _reads.find_raw, key, check_types(types), needle, after_seq, until_seq)

    def _range_read(self, read: Callable[..., T], key: StreamKey, *args: Any) -> T:
        """``read(connection, key, ...)`` on this read thread's connection, a forgotten conversation refused."""
        self._refuse_forgotten(key)
        return read(self._db, key, *args)

    async def last_seq(self, key: StreamKey) -> int:
        return await self._read(self._last_seq, key)

    def _last_seq(self, key: StreamKey) -> int:
        self._refuse_forgotten(key)
        row = self._db.execute(
            "SELECT max(seq) FROM events WHERE tenant = ? AND conversation = ? AND branch = ?",
            [key.tenant, key.conversation, key.branch],
        ).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    async def load(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Loaded:
        snapshot, raw = await self.load_raw(key, projection_version=projection_version, until_seq=until_seq)
        return Loaded(key=key, snapshot=snapshot, events=tuple(decode(data) for data in raw))

    async def load_raw(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> tuple[Snapshot | None, list[bytes]]:
        """:meth:`load`, the records undecoded (as the log service sends them); a branch without
        events (a new conversation) at once, without a query."""
        check_range(0, until_seq, None)
        if _reads.held_key(key.tenant, key.conversation, key.branch) not in self._held:
            self._refuse_forgotten(key)
            return None, []
        return await self._read(self._load, key, projection_version, until_seq)

    async def latest_snapshot(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Snapshot | None:
        """The newest snapshot of ``key`` (at or before ``until_seq``), without the events after it."""
        check_range(0, until_seq, None)
        return await self._read(self._latest_snapshot, key, projection_version, until_seq)

    def _latest_snapshot(self, key: StreamKey, projection_version: int | None, until_seq: int | None) -> Snapshot | None:
        row = _reads.latest_snapshot_row(self._db, key, projection_version, until_seq)
        return None if row is None else Snapshot(key, int(row[0]), int(row[1]), bytes(row[2]))

    def _load(
        self, key: StreamKey, projection_version: int | None, until_seq: int | None
    ) -> tuple[Snapshot | None, list[bytes]]:
        snapshot = self._latest_snapshot(key, projection_version, until_seq)
        return snapshot, self._range_read(_reads.read_raw, key, snapshot.seq if snapshot else 0, until_seq, None)

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        return await self._read(self._seq_at_time, key, check_timestamp(timestamp))

    def _seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        row = self._db.execute(
            "SELECT max(seq) FROM events WHERE tenant = ? AND conversation = ? AND branch = ? AND ts <= ?",
            [key.tenant, key.conversation, key.branch, timestamp],
        ).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        await self._run(self._save_snapshot, snapshot)

    def _save_snapshot(self, snapshot: Snapshot) -> None:
        key = snapshot.key
        last = self._last_seq(key)
        if snapshot.seq > last:
            raise LogError(
                f"snapshot of {key} at seq {snapshot.seq} is ahead of the committed log "
                f"(last seq {last}); snapshot only committed events"
            )
        self._con.execute(
            "INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [key.tenant, key.conversation, key.branch, snapshot.seq, snapshot.projection_version,
             snapshot.state, time.time()],
        )

    async def discard_snapshot(self, snapshot: Snapshot, reason: str) -> None:
        await self._run(self._discard_snapshot, snapshot, reason)

    def _discard_snapshot(self, snapshot: Snapshot, reason: str) -> None:
        """Delete the unusable snapshot and keep a line saying why (what ``stats`` counts)."""
        key = snapshot.key
        where = [key.tenant, key.conversation, key.branch, snapshot.seq, snapshot.projection_version]
        self._con.execute("BEGIN TRANSACTION")
        try:
            deleted = _one_row(self._con.execute(
                "DELETE FROM snapshots WHERE tenant = ? AND conversation = ? AND branch = ? AND seq = ? "
                "AND projection_version = ?", where,
            ))[0]
            if deleted:
                self._con.execute("INSERT INTO discarded_snapshots VALUES (?, ?, ?, ?, ?, ?, ?)",
                                  [*where, reason[:1000], time.time()])
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise

    async def conversations(self, tenant: str, conversation: str | None = None) -> list[ConversationSummary]:
        validate_identifier("tenant", tenant)
        return await self._read(self._conversations, tenant, conversation)

    def _conversations(self, tenant: str, conversation: str | None) -> list[ConversationSummary]:
        rows = self._db.execute(
            "SELECT conversation, list(DISTINCT branch ORDER BY branch), count(*), "
            "max(seq) FILTER (WHERE branch = 'main'), max(ts), "
            "count(*) FILTER (WHERE branch = 'main' AND type = 'turn'), bool_or(type = 'persona' AND branch = 'main') "
            "FROM events WHERE tenant = ? AND (? IS NULL OR conversation = ?) GROUP BY conversation ORDER BY conversation",
            [tenant, conversation, conversation],
        ).fetchall()
        return [
            ConversationSummary(
                conversation=row[0], branches=tuple(row[1]), events=int(row[2]),
                last_seq=int(row[3] or 0), updated_at=float(row[4]), turns=int(row[5]),
                mind="persona" if row[6] else "mirror",
            )
            for row in rows
        ]

    async def stats(self) -> LogStats:
        return await self._read(lambda: _reads.log_stats(self._db))

    async def rejected(self) -> list[tuple[int, str, str]]:
        return await self._read(lambda: self._db.execute(
            "SELECT stream_seq, subject, error FROM rejected_events ORDER BY stream_seq").fetchall())


__all__ = ["CommitResult", "DuckDBEventLog", "READ_THREADS", "SCHEMA", "T"]
