"""A stream that comes back older than the log: detected, re-read, every event stored once.

A real nats-server whose JetStream store is copied while it is paused (the disk as of T1),
written past, then killed with -9 and started on the T1 copy — what a broker's machine shows
after a power failure when acknowledged writes had not reached its disk. The ingester must not
trust its committed offset over such a stream, and a writer must re-fence from the log.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import duckdb
import pytest

from mirror.events.bus import Head
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.log import LogStats
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, ensure_stream
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from tests.support.waits import until_async

KEYS = [StreamKey("acme", f"c{index}", "main") for index in range(3)]
SETTINGS = IngesterSettings(check_interval_s=0.5, compact_interval_s=0.5)


def turns(key: StreamKey, first: int, count: int) -> list[Event]:
    return [make_event(key, seq, Turn(f"hello {seq}", f"hi {seq}"), turn=seq, timestamp=3000.0 + seq)
            for seq in range(first, first + count)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    nats = EmbeddedNats(tmp_path / "nats")
    nats.start()
    yield nats
    nats.stop()


@pytest.fixture
async def bus(server: EmbeddedNats) -> AsyncIterator[JetStreamBus]:
    """A writer of the stream (a conversation's appends, without the conversation)."""
    writer = await JetStreamBus.connect(server.url, StreamSettings())
    yield writer
    await writer.close()


@contextlib.asynccontextmanager
async def ingesting(url: str, db_path: Path) -> AsyncIterator[Ingester]:
    nc = await connect_nats(url, name="test-ingester")
    ingester = Ingester(nc, DuckDBEventLog(db_path), SETTINGS)
    await ingester.start()
    try:
        yield ingester
    finally:
        await ingester.stop()
        await ingester.log.close()
        await nc.close()


def disk_as_of_now(server: EmbeddedNats, copy: Path) -> None:
    """Copy the JetStream store while the server is paused: what its disk held at this moment."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        shutil.copytree(server.store_dir / "jetstream", copy)
    finally:
        os.kill(server.pid, signal.SIGCONT)


def power_failure(server: EmbeddedNats, copy: Path) -> None:
    """Kill -9 the server with the older copy put in its store's place, and start it again on it."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)  # nothing more reaches the store being swapped
    store = server.store_dir / "jetstream"
    store.rename(server.store_dir / "jetstream.lost")
    shutil.copytree(copy, store)
    server.kill()
    server.start()


async def append_all(bus: JetStreamBus, heads: dict[StreamKey, Head], first: int, count: int) -> None:
    for key in KEYS:
        heads[key] = await bus.append(key, turns(key, first, count), heads[key])


async def refenced(bus: JetStreamBus, key: StreamKey, log_last_seq: int) -> Head:
    """What a conversation does on activation: the log's last seq, fenced on the stream's head."""
    head = await bus.head(key)
    assert head.last_seq is None or head.last_seq <= log_last_seq
    return Head(log_last_seq, head.fence)


def log_seqs(db_path: Path) -> dict[str, list[int]]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute("SELECT conversation, list(seq ORDER BY seq) FROM events GROUP BY conversation").fetchall()
    return {conversation: list(seqs) for conversation, seqs in rows}


async def all_committed(ingester: Ingester, upto: int) -> LogStats | None:
    stats = await ingester.log.stats()
    return stats if stats.events == upto * len(KEYS) else None


async def test_a_stream_restored_older_is_reread_and_every_event_stored_once(server: EmbeddedNats, bus: JetStreamBus,
                                                                              tmp_path: Path) -> None:
    db_path = tmp_path / "log.duckdb"
    heads = {key: Head(0, 0) for key in KEYS}
    async with ingesting(server.url, db_path) as ingester:
        await append_all(bus, heads, 1, 4)
        await until_async(lambda: all_committed(ingester, 4), "the first 4 events of each committed")
        disk_as_of_now(server, tmp_path / "t1")
        await append_all(bus, heads, 5, 4)
        await until_async(lambda: all_committed(ingester, 8), "8 events of each committed")
        power_failure(server, tmp_path / "t1")

        # The stale fence is refused: the stream no longer ends where this writer left it.
        with pytest.raises(AppendConflict):
            await bus.append(KEYS[0], turns(KEYS[0], 9, 1), heads[KEYS[0]])
        for key in KEYS:  # re-fenced from the log, as a conversation's rebuild does
            heads[key] = await refenced(bus, key, 8)
        await append_all(bus, heads, 9, 4)
        # Enough new messages that the stream's last seq passes the log's old offset: the
        # ingester must still tell that these are new, not redeliveries.
        await append_all(bus, heads, 13, 8)
        await until_async(lambda: all_committed(ingester, 20), "all 20 events of each committed", timeout=60)
        stats = await ingester.log.stats()
        assert ingester.regressions >= 1
        assert stats.stream_regressions == ingester.regressions
        assert stats.last_stream_regression is not None and "went backwards" in stats.last_stream_regression
        assert stats.rejected == 0
    assert log_seqs(db_path) == {key.conversation: list(range(1, 21)) for key in KEYS}


async def test_an_ingester_started_after_the_stream_was_written_past_its_offset_still_sees_it(
        server: EmbeddedNats, bus: JetStreamBus, tmp_path: Path) -> None:
    """The ingester was down through the failure and the writes after it: on start, the stream's
    last seq is beyond its offset, and only the message where its newest one stood tells."""
    db_path = tmp_path / "log.duckdb"
    heads = {key: Head(0, 0) for key in KEYS}
    async with ingesting(server.url, db_path) as ingester:
        await append_all(bus, heads, 1, 2)
        await until_async(lambda: all_committed(ingester, 2), "2 events of each committed")
        disk_as_of_now(server, tmp_path / "t1")
        await append_all(bus, heads, 3, 4)
        await until_async(lambda: all_committed(ingester, 6), "6 events of each committed")
    power_failure(server, tmp_path / "t1")
    for key in KEYS:
        heads[key] = await refenced(bus, key, 6)
    await append_all(bus, heads, 7, 10)  # far past the old offset
    async with ingesting(server.url, db_path) as ingester:
        await until_async(lambda: all_committed(ingester, 16), "16 events of each committed", timeout=60)
        stats = await ingester.log.stats()
        assert stats.stream_regressions == 1 and stats.rejected == 0
    assert log_seqs(db_path) == {key.conversation: list(range(1, 17)) for key in KEYS}


async def test_a_recreated_stream_is_detected_and_its_new_events_stored(server: EmbeddedNats, bus: JetStreamBus, tmp_path: Path) -> None:
    db_path = tmp_path / "log.duckdb"
    heads = {key: Head(0, 0) for key in KEYS}
    async with ingesting(server.url, db_path) as ingester:
        await append_all(bus, heads, 1, 3)
        await until_async(lambda: all_committed(ingester, 3), "3 events of each committed")
        await bus.js.delete_stream("MIRROR")
        await ensure_stream(bus.js, StreamSettings())
        for key in KEYS:
            heads[key] = await refenced(bus, key, 3)
            assert heads[key].fence == 0  # the new stream holds nothing of it
        await append_all(bus, heads, 4, 3)
        await until_async(lambda: all_committed(ingester, 6), "6 events of each committed", timeout=60)
        stats = await ingester.log.stats()
        assert stats.stream_regressions >= 1 and stats.rejected == 0
        assert stats.last_stream_regression is not None
    assert log_seqs(db_path) == {key.conversation: list(range(1, 7)) for key in KEYS}


async def test_compaction_after_a_restart_is_not_taken_for_a_stream_gone_backwards(server: EmbeddedNats, bus: JetStreamBus,
                                                                                  tmp_path: Path) -> None:
    """The newest message stored before a restart is compacted away once newer ones of its
    subject are committed: the ingester must check the stream against the newest it has stored
    since, not against the one it started with."""
    db_path = tmp_path / "log.duckdb"
    heads = {key: Head(0, 0) for key in KEYS}
    async with ingesting(server.url, db_path) as ingester:
        await append_all(bus, heads, 1, 2)
        await until_async(lambda: all_committed(ingester, 2), "2 events of each committed")
    async with ingesting(server.url, db_path) as ingester:
        for first in range(3, 9):  # one round at a time, compaction (every 0.5 s) in between
            await append_all(bus, heads, first, 1)
            await until_async(functools.partial(all_committed, ingester, first), f"{first} events of each committed")
        started_anchor = (await ingester.log.stream_mark(SETTINGS.consumer)).anchor_seq
        await ingester.compact()  # whatever is left to purge, checked first
        target = ingester.checks + 2
        await until_async(lambda: ingester.checks >= target, "two more checks of the stream")
        stats = await ingester.log.stats()
        assert stats.stream_regressions == 0 and ingester.regressions == 0, stats.last_stream_regression
        assert started_anchor > 0
    assert log_seqs(db_path) == {key.conversation: list(range(1, 9)) for key in KEYS}
