"""The publisher's logic in-process: the bulk path's chains, the ack reader, the window.

:class:`ChainedAppends` talks to its publisher through :class:`AckSender` (Mirror's own small
port), so these tests give it :class:`InMemoryStream`, which answers each send as JetStream
would (a fenced subject sequence, one stream sequence) or as a test scripts it. The real
publisher against nats-server is covered by the bus contract (``tests/contract/test_bus.py``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import nats.js.errors
import pytest

from mirror.events.errors import BusError
from mirror.events.nats._publisher import (
    HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HEADER_MSG_ID,
    Ack,
    AckHandler,
    AckResult,
    Chain,
    ChainedAppends,
    Fallback,
    Window,
    _ack_of,
)


@dataclass(slots=True)
class Sent:
    subject: str
    data: bytes
    headers: dict[str, str]
    handler: AckHandler


@dataclass
class InMemoryStream:
    """An :class:`AckSender` that answers its sends in order, one at a time, as a JetStream stream would.

    A send whose expected subject sequence is not the subject's last is refused; ``faults``
    answers a given payload once with what the test chose instead; ``unsendable`` payloads make
    ``send`` itself raise (the connection gone before the publish left).
    """

    max_in_flight: int
    faults: dict[bytes, AckResult] = field(default_factory=dict)
    unsendable: set[bytes] = field(default_factory=set)
    sent: list[Sent] = field(default_factory=list)
    stored: list[tuple[str, bytes]] = field(default_factory=list)
    most_in_flight: int = 0
    stream_seq: int = 0
    last: dict[str, int] = field(default_factory=dict)
    """Each subject's last stream seq."""
    _unanswered: asyncio.Queue[Sent] = field(default_factory=asyncio.Queue)

    async def send(self, subject: str, data: bytes, headers: dict[str, str], timeout: float,
                   handler: AckHandler) -> None:
        if data in self.unsendable:
            raise ConnectionError("not connected")
        sent = Sent(subject, data, dict(headers), handler)
        self.sent.append(sent)
        self._unanswered.put_nowait(sent)
        self.most_in_flight = max(self.most_in_flight, self._unanswered.qsize())

    def answer(self, sent: Sent) -> AckResult:
        if sent.data in self.faults:
            return self.faults.pop(sent.data)
        if int(sent.headers[HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE]) != self.last.get(sent.subject, 0):
            return BusError(f"wrong last sequence for {sent.subject}")
        self.stream_seq += 1
        self.last[sent.subject] = self.stream_seq
        self.stored.append((sent.subject, sent.data))
        return Ack(self.stream_seq, False)

    async def serve(self) -> None:
        while True:
            sent = await self._unanswered.get()
            await sent.handler(self.answer(sent))


def chain(name: str, events: int, fence: int = 0) -> Chain:
    return Chain(f"subject.{name}", [f"{name}-{index}".encode() for index in range(events)],
                 [f"id-{name}-{index}" for index in range(events)], fence)


async def run(stream: InMemoryStream, chains: list[Chain], fallback: Fallback | None = None) -> list[int | BaseException]:
    async def no_fallback(position: int, chain: Chain) -> int:
        raise AssertionError(f"chain {position} fell back at event {chain.index}")

    server = asyncio.create_task(stream.serve())
    try:
        appends = ChainedAppends(stream, timeout=1.0, fallback=fallback or no_fallback)
        return await asyncio.wait_for(appends.run(chains), timeout=30)  # a guard against a hang, not a clock to assert on
    finally:
        server.cancel()


async def test_clean_acks_carry_every_chain_to_its_last_event_in_order_within_the_window() -> None:
    stream = InMemoryStream(max_in_flight=2)
    chains = [chain(f"c{index}", 3) for index in range(5)]
    results = await run(stream, chains)
    for position, (result, appended) in enumerate(zip(results, chains, strict=True)):
        subject = f"subject.c{position}"
        assert [data for stored_subject, data in stream.stored if stored_subject == subject] == list(appended.encoded)
        assert result == appended.fence == max(seq for seq, (stored_subject, _) in enumerate(stream.stored, 1)
                                               if stored_subject == subject)
        ids = [sent.headers[HEADER_MSG_ID] for sent in stream.sent if sent.subject == subject]
        assert ids == list(appended.message_ids)
    assert len(stream.stored) == 15 and stream.most_in_flight == 2


async def test_each_event_is_fenced_on_the_stream_seq_of_the_one_before() -> None:
    stream = InMemoryStream(max_in_flight=4, stream_seq=1, last={"subject.other": 1})  # seq 1: another subject's
    results = await run(stream, [chain("a", 3)])
    fences = [sent.headers[HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE] for sent in stream.sent if sent.subject == "subject.a"]
    assert fences == ["0", "2", "3"] and results == [4]


async def test_a_chain_without_events_is_done_at_its_fence_and_sends_nothing() -> None:
    stream = InMemoryStream(max_in_flight=1)
    assert await run(stream, []) == []
    results = await run(stream, [chain("empty", 0, fence=7), chain("a", 1), chain("also-empty", 0, fence=9)])
    assert results == [7, 1, 9] and [sent.subject for sent in stream.sent] == ["subject.a"]


@pytest.mark.parametrize("answer", [Ack(99, True), BusError("wrong last sequence"), TimeoutError()],
                         ids=["duplicate", "error", "timeout"])
async def test_any_other_answer_hands_the_chain_to_the_fallback_from_the_event_it_reached(answer: AckResult) -> None:
    stream = InMemoryStream(max_in_flight=2, faults={b"b-1": answer})
    handed: list[tuple[int, int, int]] = []

    async def fallback(position: int, reached: Chain) -> int:
        handed.append((position, reached.index, reached.fence))
        return 1000 + position

    results = await run(stream, [chain("a", 2), chain("b", 3), chain("c", 2)], fallback)
    b_first_seq = stream.stored.index(("subject.b", b"b-0")) + 1
    assert handed == [(1, 1, b_first_seq)]
    assert results[1] == 1001 and isinstance(results[0], int) and isinstance(results[2], int)
    assert b"b-2" not in [sent.data for sent in stream.sent]  # the chain went on in its fallback, not here


async def test_a_send_that_raises_goes_to_the_fallback_and_a_fallback_that_raises_is_that_chains_result() -> None:
    stream = InMemoryStream(max_in_flight=2, unsendable={b"a-1"})
    conflict = BusError("conflict")

    async def fallback(position: int, reached: Chain) -> int:
        assert (position, reached.index) == (0, 1)
        raise conflict

    results = await run(stream, [chain("a", 2), chain("b", 2)], fallback)
    assert results[0] is conflict and results[1] == stream.last["subject.b"]


async def test_the_next_waiting_chain_starts_only_when_a_fallback_has_settled() -> None:
    stream = InMemoryStream(max_in_flight=1, faults={b"a-0": BusError("refused")})
    fell_back, release = asyncio.Event(), asyncio.Event()

    async def fallback(position: int, reached: Chain) -> int:
        fell_back.set()
        await release.wait()
        return 5

    running = asyncio.create_task(run(stream, [chain("a", 1), chain("b", 1)], fallback))
    await fell_back.wait()
    assert [sent.data for sent in stream.sent] == [b"a-0"]  # the window's one place is still the fallback's
    release.set()
    assert await running == [5, 1]
    assert [sent.data for sent in stream.sent] == [b"a-0", b"b-0"]


def test_acks_are_read_by_the_fast_path_and_by_json_alike() -> None:
    assert _ack_of(b'{"stream":"MIRROR","seq":42}', None) == Ack(42, False)
    assert _ack_of(b'{"stream":"MIRROR","seq":7,"domain":"hub"}', None) == Ack(7, False)
    assert _ack_of(b'{"stream":"MIRROR", "seq": 8}', None) == Ack(8, False)  # not the fast path's shape: json
    assert _ack_of(b'{"stream":"MIRROR","seq":5,"duplicate":true}', None) == Ack(5, True)
    error = _ack_of(b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}', None)
    assert isinstance(error, nats.js.errors.APIError) and error.err_code == 10071
    assert isinstance(_ack_of(b"", b"NATS/1.0 503\r\n\r\n"), nats.js.errors.NoStreamResponseError)
    assert isinstance(_ack_of(b"not json", None), BusError)
    assert isinstance(_ack_of(b'{"stream":"MIRROR"}', None), BusError)


async def test_the_window_admits_its_size_then_wakes_waiters_in_order() -> None:
    window = Window(2)
    await window.acquire()
    await window.acquire()
    woken: deque[int] = deque()

    async def wait(index: int) -> None:
        await window.acquire()
        woken.append(index)

    waiters = [asyncio.create_task(wait(index)) for index in range(3)]
    await asyncio.sleep(0)  # let every waiter queue up (a yield, not a wait on the clock)
    assert not woken
    for expected in ([0], [0, 1], [0, 1, 2]):
        window.release()
        await asyncio.wait({waiters[len(expected) - 1]})
        assert list(woken) == expected


async def test_a_waiter_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    window = Window(1)
    await window.acquire()
    first = asyncio.create_task(window.acquire())
    second = asyncio.create_task(window.acquire())
    await asyncio.sleep(0)  # both queued
    window.release()  # the slot goes to the first waiter …
    first.cancel()  # … which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, timeout=5)  # the second got the slot the first passed on
    assert second.done() and not second.cancelled()
