"""The bus port's contract, run against every adapter (in-memory and real JetStream)."""

from __future__ import annotations

import asyncio

import pytest

from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.payloads import Narrative, Turn

KEY = StreamKey("acme", "conversation-1")


def events(key: StreamKey, first: int, count: int, *, tag: str = "") -> list[Event]:
    return [
        make_event(key, seq, Turn(f"message {seq}{tag}", f"reply {seq}{tag}"), turn=seq, timestamp=1000.0 + seq)
        for seq in range(first, first + count)
    ]


async def fresh_head(bus, key: StreamKey) -> Head:
    head = await bus.head(key)
    return head if head.last_seq is not None else head.with_last_seq(0)


async def test_a_new_stream_has_no_head(bus) -> None:
    head = await bus.head(KEY)
    assert head.last_seq is None
    with pytest.raises(ValueError, match="take the last seq from the log"):
        head.next_seq(KEY)


async def test_appends_advance_the_head(bus) -> None:
    head = await fresh_head(bus, KEY)
    head = await bus.append(KEY, events(KEY, 1, 3), head)
    assert head.last_seq == 3
    head = await bus.append(KEY, events(KEY, 4, 2), head)
    assert head.last_seq == 5
    assert (await bus.head(KEY)) == head


async def test_a_stale_writer_gets_a_conflict_and_appends_nothing(bus) -> None:
    stale = await fresh_head(bus, KEY)
    current = await bus.append(KEY, events(KEY, 1, 2), stale)
    with pytest.raises(AppendConflict) as caught:
        await bus.append(KEY, events(KEY, 1, 2, tag="-other"), stale)
    assert caught.value.conversation == KEY.conversation
    assert caught.value.expected_seq == 1
    assert await bus.head(KEY) == current


async def test_two_concurrent_writers_never_both_win(bus) -> None:
    head = await fresh_head(bus, KEY)
    results = await asyncio.gather(
        bus.append(KEY, events(KEY, 1, 3, tag="-a"), head),
        bus.append(KEY, events(KEY, 1, 3, tag="-b"), head),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, Head)]
    losers = [r for r in results if isinstance(r, AppendConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    assert (await bus.head(KEY)).last_seq == 3


async def test_a_retried_append_is_not_doubled(bus) -> None:
    head = await fresh_head(bus, KEY)
    batch = events(KEY, 1, 3)
    first = await bus.append(KEY, batch, head)
    again = await bus.append(KEY, batch, head)  # e.g. the ack was lost and the writer retries
    assert again == first
    partial = await bus.append(KEY, batch[:1], head)  # a retry of a prefix is recognised too
    assert partial.last_seq == 1
    assert (await bus.head(KEY)) == first


async def test_a_retry_that_landed_in_part_completes_the_rest(bus) -> None:
    head = await fresh_head(bus, KEY)
    batch = events(KEY, 1, 4)
    await bus.append(KEY, batch[:2], head)  # the writer crashed after two of four landed
    done = await bus.append(KEY, batch, head)
    assert done.last_seq == 4
    assert (await bus.head(KEY)) == done


async def test_other_content_at_a_taken_seq_is_a_conflict(bus) -> None:
    head = await fresh_head(bus, KEY)
    await bus.append(KEY, events(KEY, 1, 2), head)
    with pytest.raises(AppendConflict):
        await bus.append(KEY, events(KEY, 1, 2, tag="-divergent"), head)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: events(KEY, 2, 1), "breaks the sequence"),
        (lambda: events(StreamKey("acme", "other"), 1, 1), "does not belong"),
        (lambda: [*events(KEY, 1, 1), *events(KEY, 3, 1)], "breaks the sequence"),
    ],
)
async def test_a_malformed_batch_is_refused_and_changes_nothing(bus, bad, message) -> None:
    head = await fresh_head(bus, KEY)
    with pytest.raises(ValueError, match=message):
        await bus.append(KEY, bad(), head)
    assert (await bus.head(KEY)).last_seq is None


async def test_append_many_keeps_order_per_conversation_and_reports_conflicts(bus) -> None:
    keys = [StreamKey("acme", f"c{index}") for index in range(20)]
    heads = [await fresh_head(bus, key) for key in keys]
    results = await bus.append_many([(key, events(key, 1, 5), head) for key, head in zip(keys, heads, strict=True)])
    assert len(results) == 20 and all(isinstance(result, Head) and result.last_seq == 5 for result in results)
    # Same stale heads again, other content: every one conflicts, nothing changes.
    stale = await bus.append_many([(key, events(key, 1, 1, tag="-x"), head) for key, head in zip(keys, heads, strict=True)])
    assert len(stale) == 20 and all(isinstance(result, AppendConflict) for result in stale)
    assert [await bus.head(key) for key in keys] == results


async def test_streams_are_independent(bus) -> None:
    other = StreamKey("acme", KEY.conversation, "experiment")
    tenant = StreamKey("globex", KEY.conversation)
    for key in (KEY, other, tenant):
        await bus.append(key, events(key, 1, 2), await fresh_head(bus, key))
    assert {(await bus.head(key)).last_seq for key in (KEY, other, tenant)} == {2}


async def test_any_payload_type_appends_and_is_retried_by_its_bytes(bus) -> None:
    head = await fresh_head(bus, KEY)
    narrative = make_event(KEY, 1, Narrative("I hold that the user avoids peanuts.", monologue_seq=None))
    appended = await bus.append(KEY, [narrative], head)
    assert appended.last_seq == 1 and await bus.head(KEY) == appended
    assert await bus.append(KEY, [narrative], head) == appended  # same bytes: a retry, not a conflict
    with pytest.raises(AppendConflict):
        await bus.append(KEY, [make_event(KEY, 1, Narrative("I hold something else."))], head)


async def test_tail_yields_what_the_bus_holds_after_a_position(bus) -> None:
    other = StreamKey("acme", "interleaved")
    head, other_head = await fresh_head(bus, KEY), await fresh_head(bus, other)
    for first in (1, 3):  # two streams written in turns: positions of one skip the other's (JetStream)
        head = await bus.append(KEY, events(KEY, first, 2), head)
        other_head = await bus.append(other, events(other, first, 2), other_head)
    everything = [item async for item in bus.tail(KEY, 0)]
    assert [event for _, event in everything] == events(KEY, 1, 4)
    positions = [position for position, _ in everything]
    assert positions == sorted(set(positions)) and positions[-1] == head.fence
    after_second = [event async for _, event in bus.tail(KEY, positions[1])]
    assert after_second == events(KEY, 3, 2)
    assert [item async for item in bus.tail(KEY, head.fence)] == []
    assert [item async for item in bus.tail(StreamKey("acme", "never-written"), 0)] == []


async def test_a_subscription_delivers_each_stored_event_once_in_order(bus) -> None:
    head = await bus.append(KEY, events(KEY, 1, 2), await fresh_head(bus, KEY))  # before: not delivered
    other = StreamKey("acme", "elsewhere")
    async with await bus.subscribe(KEY) as subscription:
        stale = head
        head = await bus.append(KEY, events(KEY, 3, 2), head)
        assert await bus.append(KEY, events(KEY, 3, 2), stale) == head  # a retry: stored once
        with pytest.raises(AppendConflict):
            await bus.append(KEY, events(KEY, 3, 1, tag="-refused"), stale)  # refused: never shown
        await bus.append(other, events(other, 1, 1), await fresh_head(bus, other))  # another stream
        head = await bus.append(KEY, events(KEY, 5, 1), head)
        received = [await asyncio.wait_for(anext(subscription), 10) for _ in range(3)]
        assert received == events(KEY, 3, 3)
        # A wait cancelled (as by a keep-alive timeout) loses nothing.
        waiting = asyncio.ensure_future(anext(subscription))
        await asyncio.sleep(0)  # the wait has begun
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):  # cancelled while waiting: nothing had come
            await waiting
        await bus.append(KEY, events(KEY, 6, 1), head)
        # The next event delivered is the one appended last: nothing else came in between, no
        # duplicate and no refused event (a subscription delivers in stream order).
        assert await asyncio.wait_for(anext(subscription), 10) == events(KEY, 6, 1)[0]
    assert [event async for event in subscription] == []  # closed: iteration ends


async def test_a_slow_subscriber_loses_the_newest_events_not_the_writers_time(bus) -> None:
    subscription = await bus.subscribe(KEY, buffer=2)
    try:
        await bus.append(KEY, events(KEY, 1, 5), await fresh_head(bus, KEY))
        for _ in range(250):  # nothing is read yet: two are buffered, three dropped as they arrive
            if subscription.dropped == 3:
                break
            await asyncio.sleep(0.02)
        assert subscription.dropped == 3
        assert [(await asyncio.wait_for(anext(subscription), 10)).seq for _ in range(2)] == [1, 2]
        head = await bus.head(KEY)
        await bus.append(KEY, events(KEY, 6, 1), head)  # room again: delivered
        assert (await asyncio.wait_for(anext(subscription), 10)).seq == 6
    finally:
        await subscription.aclose()


def batch_of(key: StreamKey, count: int):
    """A writer's build step: ``count`` turns after whatever the state holds."""
    return lambda state: events(key, state.last_seq + 1, count)


async def test_the_pipelined_writer_sends_behind_the_previous_append_and_stops_at_the_first_failure(bus) -> None:
    """Recompute's way to write: each append is sent behind the previous one without waiting for
    it; all land in order, and once one fails nothing after it is written and the failure is raised."""
    from mirror.cognition.writer import ConversationWriter
    from mirror.projections.state import initial_state

    key = StreamKey("acme", "pipelined")
    writer = ConversationWriter(bus, key, initial_state(key), await fresh_head(bus, key), pipelined=True)
    for _ in range(3):
        await writer.append(batch_of(key, 2))
    assert writer.state.last_seq == 6 and writer.written == 6  # folded at once, before any acknowledgement
    await writer.flush()
    assert writer.head.last_seq == 6 and (await bus.head(key)).last_seq == 6

    other = StreamKey("acme", "raced")
    stale = await fresh_head(bus, other)
    await bus.append(other, events(other, 1, 1, tag=" by another writer"), stale)
    loser = ConversationWriter(bus, other, initial_state(other), stale, pipelined=True)
    with pytest.raises(AppendConflict):
        for _ in range(10):  # the first send fails; a later append or the flush says so
            await loser.append(batch_of(other, 2))
            await asyncio.sleep(0)
        await loser.flush()
    assert (await bus.head(other)).last_seq == 1  # nothing was written past the failure


async def test_the_serial_writer_folds_only_what_landed_and_a_conflict_stops_it_for_good(bus) -> None:
    """The live conversation's way to write: the state moves once the bus acknowledged; losing
    the fence refuses every later append without sending it."""
    from mirror.cognition.writer import ConversationWriter
    from mirror.projections.state import initial_state

    key = StreamKey("acme", "serial")
    appended: list[int] = []
    writer = ConversationWriter(bus, key, initial_state(key), await fresh_head(bus, key),
                                on_appended=lambda batch: appended.extend(event.seq for event in batch))
    await asyncio.gather(*(writer.append(batch_of(key, 2)) for _ in range(3)))  # concurrent: serialised
    assert writer.state.last_seq == 6 and appended == [1, 2, 3, 4, 5, 6]
    assert writer.head == await bus.head(key)

    rival = await bus.append(key, events(key, 7, 1, tag=" by another writer"), writer.head)
    with pytest.raises(AppendConflict):
        await writer.append(batch_of(key, 1))
    assert writer.state.last_seq == 6 and writer.failure is not None
    await bus.append(key, events(key, 8, 1), rival)  # the stream moves on; the writer stays stopped
    with pytest.raises(AppendConflict):
        await writer.append(batch_of(key, 1))
    assert (await bus.head(key)).last_seq == 8 and appended == [1, 2, 3, 4, 5, 6]
