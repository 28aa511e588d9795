"""Several events appended as one JetStream atomic batch (events/nats/_atomic.py), on a real
nats-server: the batch lands whole or not at all, a stale or racing writer is refused for the
whole batch, a retry after a lost ack does not double it, and the stream holds the very
messages one-at-a-time appends would have written (so every reader works unchanged).

A single server uses batches only when asked (``atomic_appends=True``, here); a replicated
stream uses them by default (the cluster test at the end)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import nats.js.errors
import pytest
from nats.js.api import StorageType, StreamConfig

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats._atomic import HEADER_BATCH_ID, publish_batch
from mirror.events.nats.cluster import EmbeddedNatsCluster
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, subject_for
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from tests.support.stack import reset_stream

KEY = StreamKey("atomic", "conversation-1")
ATOMIC = StreamSettings(atomic_appends=True, seal=False)
"""Unsealed, so a test can compare the stored bytes with the codec's."""


def events(first: int, count: int, *, tag: str = "") -> list[Event]:
    return [make_event(KEY, seq, Turn(f"message {seq}{tag}", f"reply {seq}{tag}"), turn=seq, timestamp=1000.0 + seq)
            for seq in range(first, first + count)]


async def stored(bus: JetStreamBus) -> list[tuple[bytes, str | None]]:
    """Every message of KEY's subject: (data, its batch id)."""
    found: list[tuple[bytes, str | None]] = []
    seq = 0
    while True:
        try:
            message = await bus.js.get_msg(bus.settings.name, seq=seq + 1, subject=subject_for(KEY), next=True)
        except nats.js.errors.NotFoundError:  # past the last
            return found
        assert message.seq is not None and message.data is not None
        found.append((message.data, (message.headers or {}).get(HEADER_BATCH_ID)))
        seq = message.seq


@pytest.fixture
async def atomic_bus(nats_server: EmbeddedNats):
    await reset_stream(nats_server.url)
    bus = await JetStreamBus.connect(nats_server.url, ATOMIC)
    assert bus.atomic_batches
    yield bus
    await bus.close()


async def test_a_step_lands_as_one_batch_of_the_same_messages(atomic_bus: JetStreamBus) -> None:
    step = events(1, 4)
    head = await atomic_bus.append(KEY, step, Head(last_seq=0, fence=0))
    assert head.last_seq == 4
    messages = await stored(atomic_bus)
    assert [data for data, _ in messages] == [encode(event) for event in step]
    batch_ids = {batch for _, batch in messages}
    assert len(batch_ids) == 1 and None not in batch_ids, "one batch carried the whole step"
    assert (await atomic_bus.head(KEY)) == head
    single = await atomic_bus.append(KEY, events(5, 1), head)  # one event: a plain fenced publish
    assert (await stored(atomic_bus))[-1][1] is None and single.last_seq == 5


async def test_a_stale_writer_is_refused_for_the_whole_batch(atomic_bus: JetStreamBus) -> None:
    stale = Head(last_seq=0, fence=0)
    current = await atomic_bus.append(KEY, events(1, 2), stale)
    with pytest.raises(AppendConflict) as caught:
        await atomic_bus.append(KEY, events(1, 3, tag="-stale"), stale)
    assert caught.value.expected_seq == 1
    assert len(await stored(atomic_bus)) == 2, "nothing of the refused batch landed"
    assert await atomic_bus.head(KEY) == current


async def test_a_retry_after_a_lost_ack_is_not_doubled(atomic_bus: JetStreamBus) -> None:
    step = events(1, 3)
    # The batch reaches the stream but its writer never hears back: published here, by hand.
    landed = await publish_batch(atomic_bus.nc, atomic_bus._publisher, subject_for(KEY), [e.id for e in step],
                                 [encode(e) for e in step], 0, 5.0)
    head = await atomic_bus.append(KEY, step, Head(last_seq=0, fence=0))  # the writer's retry
    assert head == Head(last_seq=3, fence=landed)
    assert len(await stored(atomic_bus)) == 3
    later = await atomic_bus.append(KEY, events(4, 2), head)  # and the writer goes on from it
    assert later.last_seq == 5 and len(await stored(atomic_bus)) == 5


async def test_racing_writers_one_batch_wins_whole(atomic_bus: JetStreamBus) -> None:
    head = Head(last_seq=0, fence=0)
    results = await asyncio.gather(*(atomic_bus.append(KEY, events(1, 3, tag=f"-{writer}"), head)
                                     for writer in "abcd"), return_exceptions=True)
    winners = [result for result in results if isinstance(result, Head)]
    assert len(winners) == 1 and sum(isinstance(r, AppendConflict) for r in results) == 3, results
    winner = "abcd"[results.index(winners[0])]
    assert [data for data, _ in await stored(atomic_bus)] == [encode(e) for e in events(1, 3, tag=f"-{winner}")]


async def test_a_stream_that_stops_allowing_batches_is_appended_one_at_a_time(atomic_bus: JetStreamBus) -> None:
    info = await atomic_bus.js.stream_info(atomic_bus.settings.name)
    await atomic_bus.js.update_stream(dataclasses.replace(info.config, allow_atomic=False))
    head = await atomic_bus.append(KEY, events(1, 3), Head(last_seq=0, fence=0))
    assert head.last_seq == 3 and not atomic_bus.atomic_batches
    assert [batch for _, batch in await stored(atomic_bus)] == [None, None, None]


async def test_connecting_turns_batches_on_for_an_existing_stream(nats_server: EmbeddedNats) -> None:
    await reset_stream(nats_server.url)
    nc = await connect_nats(nats_server.url)
    try:
        await nc.jetstream().add_stream(StreamConfig(name="MIRROR", subjects=["mirror.*.*.*"], storage=StorageType.FILE))
        bus = await JetStreamBus.connect(nats_server.url)
        try:
            assert (await nc.jetstream().stream_info("MIRROR")).config.allow_atomic
            assert not bus.atomic_batches, "a single server keeps one publish per event by default"
        finally:
            await bus.close()
    finally:
        await nc.close()


async def test_a_replicated_stream_appends_steps_as_batches(tmp_path: Path) -> None:
    with EmbeddedNatsCluster(tmp_path, 3).start() as cluster:
        bus = await JetStreamBus.connect(cluster.url, dataclasses.replace(StreamSettings(), seal=False))
        try:
            assert bus.atomic_batches, "the default on a replicated stream"
            head = await bus.append(KEY, events(1, 3), Head(last_seq=0, fence=0))
            assert head.last_seq == 3
            messages = await stored(bus)
            assert len({batch for _, batch in messages}) == 1 and messages[0][1] is not None
            with pytest.raises(AppendConflict):
                await bus.append(KEY, events(1, 3, tag="-stale"), Head(last_seq=0, fence=0))
            again = await bus.append(KEY, events(1, 3), Head(last_seq=0, fence=0))  # a retry: recognised
            assert again == head and len(await stored(bus)) == 3
        finally:
            await bus.close()
