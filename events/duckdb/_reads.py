"""The DuckDB log's range reads, as SQL over one connection: a branch's records, its index (the
envelope's columns only, so DuckDB reads no ``data`` block for it), the records of some types
that mention a text, and the newest snapshot at or before a seq. :class:`~mirror.events.duckdb.log.DuckDBEventLog` runs them on its read
threads, after refusing a forgotten conversation."""

from __future__ import annotations

from typing import Any

import duckdb

from mirror.events.ids import StreamKey

__all__ = ["find_raw", "index_rows", "latest_snapshot_row", "read_raw"]

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
