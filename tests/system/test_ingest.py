"""The ingester against a real nats-server and real DuckDB files: exactly once, whatever arrives."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any, cast

import duckdb
import nats.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js.api import AckPolicy, ConsumerConfig

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict, LogUnavailable
from mirror.events.ids import StreamKey
from mirror.events.nats._pull import STATUS_REQUEST_EXPIRED, PullFeed
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, subject_for
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Fork, Turn
from tests.support.stack import ingesting as ingesting_into
from tests.support.stack import reset_stream
from tests.support.waits import until_async

NO_COMPACTION = IngesterSettings(compact_interval_s=3600)


def turns(key: StreamKey, first: int, count: int, tag: str = "") -> list[Event]:
    return [
        make_event(key, seq, Turn(f"hello {seq}{tag}", f"hi {seq}{tag}"), turn=seq, timestamp=2000.0 + seq)
        for seq in range(first, first + count)
    ]


def ingesting(url: str, db_path: Path, settings: IngesterSettings = NO_COMPACTION) -> contextlib.AbstractAsyncContextManager[Ingester]:
    return ingesting_into(url, db_path, settings)


async def stream_last_seq(bus: JetStreamBus) -> int:
    return (await bus.js.stream_info(bus.settings.name)).state.last_seq


async def flushed(ingester: Ingester, bus: JetStreamBus) -> None:
    assert await ingester.wait_for_offset(await stream_last_seq(bus), timeout=30)


def log_rows(db_path: Path) -> list[tuple[str, str, str, int, bytes]]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        return con.execute(
            "SELECT tenant, conversation, branch, seq, data FROM events ORDER BY tenant, conversation, branch, seq"
        ).fetchall()


def expected_rows(batches: dict[StreamKey, list[Event]]) -> list[tuple[str, str, str, int, bytes]]:
    return sorted(
        (key.tenant, key.conversation, key.branch, event.seq, encode(event))
        for key, events in batches.items()
        for event in events
    )


async def test_every_acknowledged_event_is_committed_once(nats_url: str, db_path: Path) -> None:
    bus = await JetStreamBus.connect(nats_url)
    batches = {StreamKey("acme", f"c{index}"): turns(StreamKey("acme", f"c{index}"), 1, 7) for index in range(12)}
    async with ingesting(nats_url, db_path) as ingester:
        results = await bus.append_many([(key, events, Head(0, 0)) for key, events in batches.items()])
        assert all(isinstance(result, Head) for result in results)
        await flushed(ingester, bus)
    await bus.close()
    assert log_rows(db_path) == expected_rows(batches)


async def test_reads_are_served_by_the_owner_of_the_file(nats_url: str, db_path: Path) -> None:
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "reader")
    fork_key = StreamKey("acme", "reader", "experiment")
    fork = make_event(fork_key, 1, Fork(parent_branch="main", fork_seq=3, prompt_set="v2", reason="test"))
    async with ingesting(nats_url, db_path) as ingester:
        await bus.append(key, turns(key, 1, 10), Head(0, 0))
        await bus.append(fork_key, [fork], Head(0, 0))
        await flushed(ingester, bus)
        client = LogClient(bus.nc)
        assert [event.seq for event in await client.read(key, after_seq=3, until_seq=6)] == [4, 5, 6]
        assert await client.last_seq(key) == 10
        loaded = await client.load(key)
        assert loaded.snapshot is None and [event.seq for event in loaded.events] == list(range(1, 11))
        (summary,) = await client.conversations("acme")
        assert summary.conversation == "reader" and set(summary.branches) == {"main", "experiment"}
        assert await client.conversations("globex") == []
        with pytest.raises(ValueError, match="tenant"):
            await client.conversations("bad.tenant")
    await bus.close()


async def test_a_read_waits_out_a_brief_absence_of_its_ingester_and_no_longer(nats_url: str, db_path: Path) -> None:
    """No responders for under the grace (an ingester re-subscribing) is waited out; a missing
    ingester is a LogUnavailable after the grace, well inside the 2 s a 503 must take."""
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "absent")
    nc = NoResponders(bus.nc)
    client = LogClient(cast(Any, nc), no_responder_grace_s=30.0)
    answered = asyncio.Event()

    async def start_late() -> None:
        await nc.refused.wait()  # the read found nobody: only now does its ingester come
        async with ingesting(nats_url, db_path):
            await answered.wait()

    starter = asyncio.create_task(start_late())
    assert await client.last_seq(key) == 0  # answered by the ingester that came after it was refused
    answered.set()
    assert nc.refused.is_set()
    await starter
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LogUnavailable, match="no ingester serves shard '0'"):
        await LogClient(bus.nc).last_seq(key)
    assert 0.45 <= loop.time() - started < 2.0
    await bus.close()


class NoResponders:
    """A connection that notes when a request found no responder (the ingester not there yet)."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.refused = asyncio.Event()

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.nc.request(*args, **kwargs)
        except nats.errors.NoRespondersError:
            self.refused.set()
            raise


async def test_caught_up_waits_until_the_log_holds_what_the_stream_held(nats_url: str, db_path: Path) -> None:
    """The barrier a tenant's list waits on: right after appends, the list may not show them;
    after ``wait_caught_up`` it shows every conversation the bus acknowledged."""
    bus = await JetStreamBus.connect(nats_url)
    linger = IngesterSettings(compact_interval_s=3600, linger_s=0.4)  # commits lag the acks visibly
    async with ingesting(nats_url, db_path, linger):
        client = LogClient(bus.nc)
        assert await client.wait_caught_up(1.0)  # nothing published: caught up at once
        keys = [StreamKey("acme", f"fresh-{index}") for index in range(5)]
        for key in keys:
            await bus.append(key, turns(key, 1, 2), Head(0, 0))
        assert await client.wait_caught_up(5.0)
        listed = {summary.conversation: summary.last_seq for summary in await client.conversations("acme")}
        assert listed == {key.conversation: 2 for key in keys}
        with pytest.raises(ValueError, match="timeout"):
            await client.wait_caught_up(60.0)
    await bus.close()


async def test_a_reader_waiting_for_the_log_ends_the_ingesters_linger(nats_url: str, db_path: Path) -> None:
    """A small batch lingers for more, but not while a reader waits: with a linger far longer
    than the reader's patience, the read-your-writes barrier (one conversation's position, and
    a tenant's catch-up) still gets the events committed within it."""
    bus = await JetStreamBus.connect(nats_url)
    hour = IngesterSettings(compact_interval_s=3600, linger_s=3600, linger_below=10_000)
    async with ingesting(nats_url, db_path, hour) as ingester:
        client = LogClient(bus.nc)
        key = StreamKey("acme", "waited-for")
        head = await bus.append(key, turns(key, 1, 3), Head(0, 0))
        assert await client.wait_committed(head.fence, 20.0)
        assert await client.last_seq(key) == 3
        other = StreamKey("acme", "caught-up")
        await bus.append(other, turns(other, 1, 2), Head(0, 0))
        assert await client.wait_caught_up(5.0)
        assert await client.last_seq(other) == 2
        later = await bus.append(key, turns(key, 4, 1), head)
        assert await ingester.wait_for_offset(later.fence, timeout=20)
        assert await client.last_seq(key) == 4
    await bus.close()


async def test_a_reader_polls_an_ingester_of_an_earlier_release(nats_url: str, db_path: Path) -> None:
    """An ingester that does not know the ``committed`` request (an earlier release, in a rolling
    upgrade) answers it as an unknown field: the reader polls its progress instead."""
    bus = await JetStreamBus.connect(nats_url)
    async with ingesting(nats_url, db_path, IngesterSettings(compact_interval_s=3600, linger_s=0.05)) as ingester:
        del ingester.service._handlers["committed"]  # as an earlier release's service
        client = LogClient(bus.nc)
        key = StreamKey("acme", "older-ingester")
        head = await bus.append(key, turns(key, 1, 2), Head(0, 0))
        assert await client.wait_committed(head.fence, 20.0)
        assert await client.last_seq(key) == 2
    await bus.close()


async def test_a_shard_waits_for_its_own_tenants_messages_not_for_newer_ones_of_another_shard(
        nats_url: str, tmp_path: Path) -> None:
    """With messages pending, a listed shard's end of stream is the newest on its own subjects:
    the stream's newest belongs to another shard, which it will never commit."""
    await reset_stream(nats_url)
    bus = await JetStreamBus.connect(nats_url)
    mine, theirs = StreamKey("acme", "mine"), StreamKey("globex", "theirs")
    own = await bus.append(mine, turns(mine, 1, 3), Head(0, 0))
    await bus.append(theirs, turns(theirs, 1, 4), Head(0, 0))
    assert isinstance(own, Head) and own.fence < await stream_last_seq(bus)
    nc = await connect_nats(nats_url, name="test-shard-end")
    event_log = DuckDBEventLog(tmp_path / "shard.duckdb")
    shard = Ingester(nc, event_log, IngesterSettings(shard="acme-shard", filter_subjects=("mirror.acme.*.*",)))
    await shard._recreate_consumer()  # its consumer, nothing delivered yet: three messages pending
    try:
        assert await shard._stream_end() == own.fence
        await shard.js.delete_consumer(shard.stream.name, shard.settings.consumer)
        shard.settings = IngesterSettings(shard="acme-shard", filter_subjects=("mirror.initech.*.*",))
        await shard._recreate_consumer()  # nothing on its subjects at all
        assert await shard._stream_end() == 0
    finally:
        await shard.js.delete_consumer(shard.stream.name, shard.settings.consumer)
        await event_log.close()
        await nc.close()
        await bus.close()


async def test_concurrent_reads_during_commits_see_gapless_growing_prefixes(nats_url: str, db_path: Path) -> None:
    """Reads are answered concurrently, on their own DuckDB connections, while batches commit:
    every answer is a gapless prefix of the conversation, and it never goes backwards."""
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "busy")
    async with ingesting(nats_url, db_path) as ingester:
        client = LogClient(bus.nc)
        writing = True

        async def write() -> None:
            nonlocal writing
            head = Head(0, 0)
            for first in range(1, 200, 8):  # 25 appends of 8 events
                head = await bus.append(key, turns(key, first, 8), head)
            await flushed(ingester, bus)
            writing = False

        async def read() -> tuple[list[int], list[int]]:
            lengths, lasts = [], []
            while writing:
                events, last = await asyncio.gather(client.read(key), client.last_seq(key))
                seqs = [event.seq for event in events]
                assert seqs == list(range(1, len(seqs) + 1))
                lengths.append(len(seqs))
                lasts.append(last)
            return lengths, lasts

        gathered: list[Any] = await asyncio.gather(write(), *(read() for _ in range(6)))  # the writer's None, then each reader's
        readers: list[tuple[list[int], list[int]]] = gathered[1:]
        for lengths, lasts in readers:
            assert lengths == sorted(lengths) and lasts == sorted(lasts)
            assert all(0 <= last <= 200 for last in lasts)
        assert await client.last_seq(key) == 200
        assert sum(len(lengths) for lengths, _ in readers) > 6  # the readers really overlapped the writes
    await bus.close()


async def test_duplicated_and_divergent_messages(nats_url: str, db_path: Path) -> None:
    """Copies of a message are ignored; other bytes at a taken seq are kept aside, not merged."""
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "dupes")
    events = turns(key, 1, 3)
    async with ingesting(nats_url, db_path) as ingester:
        await bus.append(key, events, Head(0, 0))
        # Raw publishes without message id or fence: the stream stores them as new messages.
        await bus.js.publish(subject_for(key), encode(events[1]))
        await bus.js.publish(subject_for(key), encode(turns(key, 2, 1, tag="-divergent")[0]))
        await bus.js.publish(subject_for(key), b"\x93not an event")
        await flushed(ingester, bus)
        rejected = await ingester.log.rejected()
    await bus.close()
    assert log_rows(db_path) == expected_rows({key: events})
    # Stream messages 1-3 are the appended events, 4 the copy (dropped), 5 and 6 are kept aside.
    assert [(stream_seq, subject) for stream_seq, subject, _ in rejected] == [(5, subject_for(key)), (6, subject_for(key))]
    assert rejected[0][2].startswith("divergent duplicate of acme/dupes/main#2: ")
    assert rejected[1][2].startswith("event record is not valid msgpack")


async def test_a_batch_clashing_with_the_log_keeps_its_new_events(nats_url: str, db_path: Path) -> None:
    """A batch holding a copy and a divergent version of committed events plus new ones: the
    plain insert fails on the primary key, and the redone transaction skips the copy, rejects
    the divergent one and still commits the new events."""
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "clash")
    events = turns(key, 1, 4)
    async with ingesting(nats_url, db_path) as ingester:
        await bus.append(key, events[:2], Head(0, 0))
        await flushed(ingester, bus)
        for data in (encode(events[0]), encode(turns(key, 2, 1, tag="-divergent")[0]), encode(events[2]), encode(events[3])):
            await bus.js.publish(subject_for(key), data)  # unfenced, as a buggy or replayed writer would
        await flushed(ingester, bus)
        rejected = await ingester.log.rejected()
        assert ingester.committed_events == 4
    await bus.close()
    assert log_rows(db_path) == expected_rows({key: events})
    (reason,) = [reason for _, _, reason in rejected]
    assert "divergent duplicate of acme/clash/main#2" in reason


async def test_redelivery_after_a_crash_between_commit_and_ack(nats_url: str, db_path: Path) -> None:
    bus = await JetStreamBus.connect(nats_url)
    keys = [StreamKey("acme", f"r{index}") for index in range(4)]
    batches = {key: turns(key, 1, 5) for key in keys}
    async with ingesting(nats_url, db_path) as ingester:
        await bus.append_many([(key, events, Head(0, 0)) for key, events in batches.items()])
        await flushed(ingester, bus)
    # Forget the committed offset: the restarted ingester is handed everything again.
    with duckdb.connect(str(db_path)) as con:
        con.execute("DELETE FROM ingest_offsets")
    async with ingesting(nats_url, db_path) as ingester:
        await flushed(ingester, bus)
        assert ingester.committed_events == 0  # every redelivered event was already there
    await bus.close()
    assert log_rows(db_path) == expected_rows(batches)


async def test_the_fence_holds_after_compaction_and_ingestion(nats_url: str, db_path: Path) -> None:
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "fenced")
    async with ingesting(nats_url, db_path) as ingester:
        stale = Head(0, 0)
        head = await bus.append(key, turns(key, 1, 6), stale)
        await flushed(ingester, bus)
        await ingester.compact()
        info = await bus.js.stream_info(bus.settings.name)
        assert info.state.messages == 1  # only the newest message of the subject is kept
        assert await bus.head(key) == head  # the head is still read from the stream alone
        older = Head(3, head.fence - 3)
        for writer in (stale, older):
            with pytest.raises(AppendConflict):
                await bus.append(key, turns(key, writer.next_seq(key), 1, tag="-stale"), writer)
        head = await bus.append(key, turns(key, 7, 2), head)
        await flushed(ingester, bus)
    await bus.close()
    assert [row[3] for row in log_rows(db_path)] == list(range(1, 9))


async def test_restart_resumes_from_the_committed_offset(nats_url: str, db_path: Path) -> None:
    bus = await JetStreamBus.connect(nats_url)
    key = StreamKey("acme", "resume")
    async with ingesting(nats_url, db_path) as ingester:
        head = await bus.append(key, turns(key, 1, 5), Head(0, 0))
        await flushed(ingester, bus)
    head = await bus.append(key, turns(key, 6, 5), head)  # written while no ingester runs
    async with ingesting(nats_url, db_path) as ingester:
        assert ingester.committed_offset == 5
        await flushed(ingester, bus)
        assert ingester.committed_events == 5
    await bus.close()
    assert [row[3] for row in log_rows(db_path)] == list(range(1, 11))


async def test_the_feed_keeps_flowing_after_its_requests_expire(nats_url: str) -> None:
    """Expired pull requests end with a 408 status: what they did not deliver is no longer
    owed, the feed asks again, and messages published later arrive in stream order."""
    bus = await JetStreamBus.connect(nats_url)
    await bus.js.add_consumer(bus.settings.name, ConsumerConfig(durable_name="feed-test", ack_policy=AckPolicy.ALL))
    feed = ExpiryCountingFeed(bus.nc, bus.settings.name, "feed-test", batch=10, expires_s=0.2, max_buffered=40)
    await feed.start()
    try:
        await until_async(lambda: feed.expired >= 3, "three rounds of requests expired unanswered")
        assert await feed.take(10, timeout=0) == []  # nothing was published: nothing arrived
        key = StreamKey("acme", "feed")
        await bus.append(key, turns(key, 1, 3), Head(0, 0))
        taken: list = []
        deadline = asyncio.get_running_loop().time() + 60
        while len(taken) < 3 and asyncio.get_running_loop().time() < deadline:
            taken += await feed.take(10, timeout=0.1)
        opened = [await bus.keys.open("acme", "feed", data) for _, _, data, _ in taken]  # the stream's copy is sealed
        assert opened == [encode(event) for event in turns(key, 1, 3)]
        assert [int(reply.split(b".")[5]) for _, reply, _, _ in taken] == [1, 2, 3]
    finally:
        await feed.stop()
        await bus.close()


class ExpiryCountingFeed(PullFeed):
    """The feed, counting the requests that expired (408) before delivering anything."""

    expired = 0

    async def _on_status(self, code: bytes, rest: bytes) -> None:
        if code == STATUS_REQUEST_EXPIRED:
            self.expired += 1
        await super()._on_status(code, rest)


# --------------------------------------------------------------------------------- property

appends = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=12
)  # (conversation index, events in the append)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=appends,
    duplicates=st.lists(st.integers(0, 10_000), max_size=6),
    forget_offset=st.booleans(),
)
def test_ingest_is_idempotent_under_duplicates_and_redelivery(nats_server, plan, duplicates, forget_offset) -> None:
    asyncio.run(_idempotence_scenario(nats_server.url, plan, duplicates, forget_offset))


async def _idempotence_scenario(url: str, plan, duplicates, forget_offset) -> None:
    await reset_stream(url)
    db_path = Path(tempfile.mkdtemp(prefix="mirror-idem-")) / "log.duckdb"
    bus = await JetStreamBus.connect(url, StreamSettings())
    keys = [StreamKey("prop", f"c{index}") for index in range(4)]
    heads = {key: Head(0, 0) for key in keys}
    written: dict[StreamKey, list[Event]] = {key: [] for key in keys}
    async with ingesting(url, db_path) as ingester:
        for index, count in plan:
            key = keys[index]
            events = turns(key, heads[key].next_seq(key), count)
            heads[key] = await bus.append(key, events, heads[key])
            written[key].extend(events)
        every = [event for events in written.values() for event in events]
        for pick in duplicates:  # the same bytes arrive again as separate stream messages
            event = every[pick % len(every)]
            await bus.js.publish(subject_for(event.key), encode(event))
        await flushed(ingester, bus)
    if forget_offset:
        with duckdb.connect(str(db_path)) as con:
            con.execute("DELETE FROM ingest_offsets")
        async with ingesting(url, db_path) as ingester:
            await flushed(ingester, bus)
    await bus.close()
    assert log_rows(db_path) == expected_rows(written)
