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
from mirror.events.errors import ConversationForgotten, DataKeyErased
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, subject_for
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.sealing import is_sealed, key_id_of
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Fork, Turn
from mirror.harness.bench.erasure_residue import occurrences, scan
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
        assert "log.duckdb" in kept and not any(name.endswith(".blk") for name in kept)  # the stream: sealed
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


async def sealed_copy(bus: JetStreamBus, key: StreamKey) -> bytes:
    """The stream's bytes of ``key``'s newest message, as nats-server stores them."""
    message = await bus.js.get_last_msg(bus.settings.name, subject_for(key))
    assert message.data is not None
    return message.data


async def test_what_compaction_left_in_the_stream_block_is_ciphertext_whose_key_is_gone(
        data: tuple[Path, EmbeddedNats]) -> None:
    """The gap crypto-shredding closes (docs/operations.md, "Forgetting and retention"): messages
    the ingester compacted away before the forget were purged, not erased, so their bytes stay in
    the stream's block file until nats-server retires that block. They are sealed with the
    conversation's data key, which the forget erases first: the canary's plaintext is in no file,
    before or after more traffic, and the key's own bytes are in none either."""
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-client")
    try:
        async with ingesting(server.url, db_path, IngesterSettings(compact_interval_s=3600)) as ingester:
            kept_head = await write_both(bus)
            compacted = await sealed_copy(bus, GONE)  # purged by the compaction below, never erased
            await flushed(ingester, bus)
            assert is_sealed(compacted) and GONE_CANARY.encode() not in compacted
            secret = (await bus.keys.for_writing("acme", "gone")).key.secret
            kept_secret = (await bus.keys.for_writing("acme", "kept")).key.secret
            assert occurrences(directory, secret) > 0  # its one message in the key stream
            kept_head = await bus.append(KEPT, turns(KEPT, KEPT_CANARY, 31, 1), kept_head)
            await bus.append(GONE, turns(GONE, GONE_CANARY, 31, 1), await bus.head(GONE))
            await flushed(ingester, bus)
            await ingester.compact()  # seq 30 of "gone" (the copy above) is purged now
            assert occurrences(directory, compacted) > 0  # ... and its bytes are still in the block

            await LogClient(nc).forget("acme", "gone")
            await forgotten(LogClient(nc))
            assert occurrences(directory, compacted) > 0  # still there: ciphertext ...
            assert occurrences(directory, secret) == 0  # ... whose key is in no file
            assert occurrences(directory, kept_secret) > 0
            with pytest.raises(DataKeyErased):
                await JetStreamBus(nc).keys.for_reading("acme", "gone", key_id_of(compacted))
            assert found(directory, GONE_CANARY) == {}

            # More traffic (new blocks written, old ones perhaps retired): still nothing readable.
            for first in range(32, 232, 25):
                kept_head = await bus.append(KEPT, turns(KEPT, KEPT_CANARY, first, 25), kept_head)
            await flushed(ingester, bus)
            await ingester.compact()
        assert found(directory, GONE_CANARY) == {}
        assert occurrences(directory, secret) == 0
        assert found(directory, KEPT_CANARY)
    finally:
        await nc.close()
        await bus.close()


async def test_a_process_without_the_key_in_its_cache_reads_it_from_the_key_stream(
        data: tuple[Path, EmbeddedNats]) -> None:
    """A restarted process (an empty cache) reads a conversation another process wrote: the key
    comes from the key stream; the event stream holds only sealed bytes."""
    directory, server = data
    writer = await JetStreamBus.connect(server.url)
    try:
        events = turns(KEPT, KEPT_CANARY, 1, 5)
        await writer.append(KEPT, events, Head(0, 0))
        assert is_sealed(await sealed_copy(writer, KEPT))
        assert KEPT_CANARY.encode() not in await sealed_copy(writer, KEPT)
    finally:
        await writer.close()
    reader = await JetStreamBus.connect(server.url)
    try:
        assert reader.keys.cached("acme", "kept") is None
        assert [event async for _, event in reader.tail(KEPT, 0)] == events
        assert reader.keys.cached("acme", "kept") is not None
        head = await reader.head(KEPT)
        assert head.last_seq == 5
        more = turns(KEPT, KEPT_CANARY, 6, 1)  # sealed with the same key: one key per conversation
        await reader.append(KEPT, more, head)
        assert [event async for _, event in reader.tail(KEPT, 0)] == events + more
        assert (await reader.js.stream_info("MIRROR_KEYS")).state.messages == 1
        assert found(directory, KEPT_CANARY) == {}  # nothing but ciphertext in the store (no log here)
    finally:
        await reader.close()


async def test_messages_written_before_sealing_are_securely_erased_not_only_purged(
        data: tuple[Path, EmbeddedNats]) -> None:
    """A forget purges sealed messages (their key is erased first: what a purge leaves is ciphertext
    nobody can open), but a message from before sealing is plaintext: it is overwritten first."""
    directory, server = data
    plain_canary = "canary-3e8a-written-before-sealing"
    plain_bus = await JetStreamBus.connect(server.url, StreamSettings(seal=False))  # an earlier release's writer
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-plain")
    client = LogClient(nc)
    try:
        async with ingesting(server.url, directory / "log.duckdb", IngesterSettings(compact_interval_s=3600)) as ingester:
            head, kept = Head(0, 0), Head(0, 0)
            for first in (1, 6):  # interleaved with a kept conversation: the block file stays
                head = await plain_bus.append(GONE, turns(GONE, plain_canary, first, 5), head)
                kept = await bus.append(KEPT, turns(KEPT, KEPT_CANARY, first, 5), kept)
            await bus.append(GONE, turns(GONE, GONE_CANARY, 11, 10), head)
            await bus.append(KEPT, turns(KEPT, KEPT_CANARY, 11, 10), kept)
            await flushed(ingester, bus)
            blocks = {name for name in found(directory, plain_canary) if name.endswith(".blk")}
            assert blocks, "the plain messages are in the stream's block file as they were written"
            assert not any(name.endswith(".blk") for name in found(directory, GONE_CANARY))  # sealed

            await client.forget("acme", "gone")
            await forgotten(client)
        assert found(directory, plain_canary) == {}
        assert found(directory, GONE_CANARY) == {}
    finally:
        await nc.close()
        await plain_bus.close()
        await bus.close()
