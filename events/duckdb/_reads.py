"""The DuckDB log's range reads, as SQL over one connection: a branch's records, its index (the
envelope's columns only, so DuckDB reads no ``data`` block for it), the records of some types
that mention a text, and the newest snapshot at or before a seq. :class:`~mirror.events.duckdb.log.DuckDBEventLog` runs them on its read
threads, after refusing a forgotten conversation."""

from __future__ import annotations

import time
from typing import Any

import duckdb

from mirror.events.ids import StreamKey
from mirror.events.log import LogStats, StreamRegression

__all__ = ["find_raw", "held_branches", "held_key", "index_rows", "latest_snapshot_row", "log_stats", "read_raw"]

_BRANCH_RANGE = "WHERE tenant = ? AND conversation = ? AND branch = ? AND seq > ? AND seq <= ?"
_NO_END = 2**62


def _range(key: StreamKey, after_seq: int, until_seq: int | None) -> list[Any]:
    return [key.tenant, key.conversation, key.branch, after_seq, until_seq if until_seq is not None else _NO_END]


def _limited(sql: str, params: list[Any], limit: int | None) -> tuple[str, list[Any]]:
    return (sql, params) if limit is None else (sql + " LIMIT ?", [*params, limit])


def read_raw(con: duckdb.DuckDBPyConnection, key: StreamKey, after_seq: int, until_seq: int | None,
             limit: int | None) -> list[bytes]:
    sql, params = _limited(f"SELECT data FROM events {_BRANCH_RANGE} ORDER BY seq", _range(key, after_seq, until_seq), limit)
    return [row[0] for row in con.execute(sql, params).fetchall()]


def index_rows(con: duckdb.DuckDBPyConnection, key: StreamKey, after_seq: int, until_seq: int | None,
               limit: int | None) -> list[tuple[Any, ...]]:
    sql, params = _limited(f"SELECT seq, type, turn, ts FROM events {_BRANCH_RANGE} ORDER BY seq",
                           _range(key, after_seq, until_seq), limit)
    return con.execute(sql, params).fetchall()


def find_raw(con: duckdb.DuckDBPyConnection, key: StreamKey, types: tuple[str, ...], needle: bytes | None,
             after_seq: int, until_seq: int | None) -> list[bytes]:
    """The type is a column; the mention is a byte search in each record of those types (a msgpack
    string is its UTF-8 bytes), done here so only what matches is decoded or sent."""
    rows = con.execute(f"SELECT data FROM events {_BRANCH_RANGE} AND type IN ({', '.join('?' * len(types))}) ORDER BY seq",
                       [*_range(key, after_seq, until_seq), *types]).fetchall()
    return [row[0] for row in rows if needle is None or needle in row[0]]


def latest_snapshot_row(con: duckdb.DuckDBPyConnection, key: StreamKey, projection_version: int | None,
                        until_seq: int | None) -> tuple[Any, ...] | None:
    """(seq, projection_version, state) of the newest snapshot of ``key`` (of that version, at or before ``until_seq``)."""
    sql = "SELECT seq, projection_version, state FROM snapshots WHERE tenant = ? AND conversation = ? AND branch = ?"
    params: list[Any] = [key.tenant, key.conversation, key.branch]
    if projection_version is not None:
        sql += " AND projection_version = ?"
        params.append(projection_version)
    if until_seq is not None:
        sql += " AND seq <= ?"
        params.append(until_seq)
    return con.execute(sql + " ORDER BY seq DESC LIMIT 1", params).fetchone()


def held_key(tenant: str, conversation: str, branch: str) -> int:
    return hash((tenant, conversation, branch))


def held_branches(con: duckdb.DuckDBPyConnection) -> set[int]:
    """:func:`held_key` of every branch with events: one scan when the log opens.

    The log keeps this set (adding a batch's branches before it commits), so a branch not in it
    has no events and no snapshot, and loading it (a new conversation's activation) needs no
    query: a range read here is a scan of the table, which grows with the log. A superset is
    harmless (a hash collision, a rolled-back batch, a forgotten conversation: a query, as before)."""
    rows = con.execute("SELECT DISTINCT tenant, conversation, branch FROM events").fetchall()
    return {held_key(*row) for row in rows}


def log_stats(con: duckdb.DuckDBPyConnection) -> LogStats:
    """What ``mirror log stats`` shows: events, conversations, rejected records, offsets, discarded
    snapshots and the stream regressions met (the newest described)."""
    events, conversations = con.execute("SELECT count(*), count(DISTINCT (tenant, conversation)) FROM events").fetchall()[0]
    rejected = con.execute("SELECT count(*) FROM rejected_events").fetchall()[0][0]
    offsets = dict(con.execute("SELECT consumer, stream_seq FROM ingest_offsets").fetchall())
    discarded = con.execute("SELECT count(*) FROM discarded_snapshots").fetchall()[0][0]
    regressions = con.execute(
        "SELECT kind, detail, committed_offset, stream_last_seq, reread_from, detected_at "
        "FROM stream_regressions ORDER BY detected_at"
    ).fetchall()
    last = None
    if regressions:
        *fields, detected_at = regressions[-1]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(detected_at))
        last = f"{when} UTC: {StreamRegression(*fields).describe()}"
    return LogStats(events=int(events), conversations=int(conversations), rejected=int(rejected), offsets=offsets,
                    snapshots_discarded=int(discarded), stream_regressions=len(regressions),
                    last_stream_regression=last)
