"""Forgetting a conversation against a real nats-server and a real DuckDB file: a canary put in
one conversation is found 0 times in every file under the data directory afterwards, while
another conversation's canary is still there; a late write and a restart cannot bring it back;
a sweep cut short by a crash resumes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import pytest

from mirror.events.bus import Head
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.envelope import Event, make_event
from mirror.events.errors import ConversationForgotten
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Fork, Turn
from mirror.harness.bench.erasure_residue import scan
from tests.support.stack import ingesting as ingesting_into
from tests.support.waits import until_async

GONE, KEPT = StreamKey("acme", "gone"), StreamKey("acme", "kept")
GONE_CANARY, KEPT_CANARY = "canary-7d41-forget-me", "canary-19ab-keep-me"


def turns(key: StreamKey, canary: str, first: int, count: int) -> list[Event]:
    return [make_event(key, seq, Turn(f"{canary} says {seq}", f"{canary} heard {seq}"), turn=seq, timestamp=2000.0 + seq)
            for seq in range(first, first + count)]


def ingesting(url: str, db_path: Path, settings: IngesterSettings) -> contextlib.AbstractAsyncContextManager[Ingester]:
    return ingesting_into(url, db_path, settings, name="test-forget")


async def flushed(ingester: Ingester, bus: JetStreamBus) -> None:
    last = (await bus.js.stream_info(bus.settings.name)).state.last_seq
    assert await ingester.wait_for_offset(last, timeout=30)


async def write_both(bus: JetStreamBus) -> Head:
    """Both conversations, interleaved, and a branch of the one to forget (every branch goes);
    the kept conversation's head."""
    gone, kept = Head(0, 0), Head(0, 0)
    for first in (1, 11, 21):
        gone = await bus.append(GONE, turns(GONE, GONE_CANARY, first, 10), gone)
        kept = await bus.append(KEPT, turns(KEPT, KEPT_CANARY, first, 10), kept)
    branch = StreamKey("acme", "gone", "retry")
    await bus.append(branch, [make_event(branch, 1, Fork(parent_branch="main", fork_seq=10, prompt_set="p"), turn=10,
                                         timestamp=3000.0),
                              *[make_event(branch, seq, Turn(f"{GONE_CANARY} branch {seq}", "b"), turn=seq,
                                           timestamp=3000.0 + seq) for seq in (2, 3)]], Head(0, 0))
    return kept


async def forgotten(client: LogClient) -> None:
    async def done() -> bool:
        tombstone = await client.tombstone("acme", "gone")
        return tombstone is not None and tombstone["status"] == "forgotten"
    await until_async(done, "the sweep to finish", timeout=60)


def found(data: Path, canary: str) -> dict[str, int]:
    return scan(data, canary.encode())


@pytest.fixture
async def data(tmp_path: Path) -> AsyncIterator[tuple[Path, EmbeddedNats]]:
    with EmbeddedNats(tmp_path / "data" / "nats") as server:
        yield tmp_path / "data", server


async def test_forgetting_leaves_no_byte_of_the_conversation_and_keeps_the_other(data: tuple[Path, EmbeddedNats]) -> None:
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-client")
    client = LogClient(nc)
    try:
        async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)) as ingester:
            kept_head = await write_both(bus)
            await flushed(ingester, bus)
            assert found(directory, GONE_CANARY) and found(directory, KEPT_CANARY)

            tombstone = await client.forget("acme", "gone")
            assert tombstone["events"] == 33 and tombstone["conversation"] == "gone"
            await forgotten(client)
            with pytest.raises(ConversationForgotten):
                await client.last_seq(GONE)
            with pytest.raises(ConversationForgotten):
                await client.read(StreamKey("acme", "gone", "retry"))

            # A late write (a host that had not heard) reaches the stream but never the log.
            await bus.append(GONE, turns(GONE, GONE_CANARY, 31, 1), Head(30, 0))
            await bus.append(KEPT, turns(KEPT, KEPT_CANARY, 31, 1), kept_head)
            await flushed(ingester, bus)
            assert await client.last_seq(KEPT) == 31
            assert await client.forget("acme", "gone") == await client.tombstone("acme", "gone")
            await bus.erase("acme", "gone")  # what a second sweep does to a late write's stream copy
        # Closed (checkpointed): every file of both stores, bytewise.
        assert found(directory, GONE_CANARY) == {}
        kept = found(directory, KEPT_CANARY)
        assert any(name.endswith(".blk") for name in kept) and "log.duckdb" in kept
        with duckdb.connect(str(db_path), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM events WHERE conversation = 'gone'").fetchone() == (0,)
            assert con.execute("SELECT count(*) FROM events WHERE conversation = 'kept'").fetchone() == (31,)
            assert con.execute("SELECT events, finished_at IS NOT NULL FROM forgotten").fetchall() == [(33, True)]
        # A restarted ingester still refuses it.
        async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)):
            with pytest.raises(ConversationForgotten):
                await client.last_seq(GONE)
    finally:
        await nc.close()
        await bus.close()


async def test_a_sweep_cut_short_resumes_at_the_next_start(data: tuple[Path, EmbeddedNats]) -> None:
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    try:
        async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)) as ingester:
            await write_both(bus)
            await flushed(ingester, bus)
            # The tombstone written and nothing swept: what a crash right after it leaves.
            await ingester.log.forget("acme", "gone")
        assert found(directory, GONE_CANARY)
        nc = await connect_nats(server.url, name="test-forget-client")
        try:
            async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)):
                await forgotten(LogClient(nc))
        finally:
            await nc.close()
        assert found(directory, GONE_CANARY) == {}
        assert found(directory, KEPT_CANARY)
    finally:
        await bus.close()


async def test_what_compaction_leaves_in_the_stream_block(data: tuple[Path, EmbeddedNats]) -> None:
    """The known gap (docs/operations.md, "Forgetting and retention"): messages the ingester
    compacted away before the forget were purged, not erased; their bytes stay in the stream's
    active block file until nats-server retires that block. The log holds none of them."""
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-client")
    try:
        async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)) as ingester:
            await write_both(bus)
            await flushed(ingester, bus)
            await ingester.compact()
            await LogClient(nc).forget("acme", "gone")
            await forgotten(LogClient(nc))
        left = found(directory, GONE_CANARY)
        assert left and all(name.endswith(".blk") for name in left)
    finally:
        await nc.close()
        await bus.close()
