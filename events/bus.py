"""The bus port: fenced, ordered appends of events to one conversation's stream.

A writer asks for the :class:`Head` of a stream once, then appends with it; each successful
append returns the next head. The head's ``fence`` is an opaque token the bus uses to refuse an
append from a writer whose view is stale (:class:`AppendConflict`) — so two writers of one
conversation can never both append the same seq.

Readers get two things from the bus and nothing else (so no caller outside ``events/`` needs the
broker's own API): :meth:`EventBus.tail`, the events the bus still holds after a *position*
(what a rebuilding conversation folds beyond the log), and :meth:`EventBus.subscribe`, the events
appended from now on (what the gateway relays as server-sent events).

Positions: every message the bus stores has one, increasing with each append to a stream (a
head's ``fence`` is the position of the stream's newest event). The log records the position of
the newest event it has committed (its committed offset), so ``tail(key, committed)`` is exactly
what the log does not hold yet. In JetStream a position is the stream sequence; in memory, a
counter over every stream, kept the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, runtime_checkable

from .codec import decode, encode
from .envelope import Event
from .errors import AppendConflict
from .ids import StreamKey


@dataclass(frozen=True, slots=True)
class Head:
    """What a writer knows about a stream: the last seq and the token that fences its next append.

    ``last_seq`` is None when the bus holds nothing for the stream; the writer then takes the
    last seq from the log (which is 0 for a new conversation) with :meth:`with_last_seq`.
    """

    last_seq: int | None
    fence: int

    def with_last_seq(self, last_seq: int) -> Head:
        return Head(last_seq=last_seq, fence=self.fence)

    def next_seq(self, key: StreamKey) -> int:
        if self.last_seq is None:
            raise ValueError(
                f"head of {key} has no last seq: the bus holds nothing for it, so take the "
                "last seq from the log (Head.with_last_seq) before appending"
            )
        return self.last_seq + 1


def check_batch(key: StreamKey, events: Sequence[Event], next_seq: int) -> None:
    """Events of one append must belong to ``key`` and continue its sequence without gaps."""
    tenant, conversation, branch = key.tenant, key.conversation, key.branch
    for offset, event in enumerate(events):
        # Field by field: ``event.key`` would build (and validate) a StreamKey per event.
        if event.tenant != tenant or event.conversation != conversation or event.branch != branch:
            raise ValueError(f"event {event.key}#{event.seq} does not belong to stream {key}")
        if event.seq != next_seq + offset:
            raise ValueError(
                f"event seq {event.seq} in {key} breaks the sequence: expected {next_seq + offset}"
            )


DEFAULT_SUBSCRIPTION_BUFFER = 1000
"""Events a subscriber may fall behind by before the newest are dropped (see :class:`Subscription`)."""


class Subscription:
    """The events appended to one stream after :meth:`EventBus.subscribe` returned, in order.

    An async iterator of :class:`Event`; ``aclose()`` (or leaving ``async with``) unsubscribes,
    after which iteration ends. Waiting for the next event may be cancelled (e.g. by
    ``asyncio.wait_for`` for a keep-alive) without losing the subscription. A subscriber more
    than ``buffer`` events behind loses the newer ones (``dropped`` counts them; the gap shows in
    the seqs, and the log has them): a slow reader must never hold up the writers.
    """

    def __init__(self, key: StreamKey, buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> None:
        if buffer < 1:
            raise ValueError("a subscription buffers at least one event")
        self.key = key
        self.dropped = 0
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=buffer + 1)  # + the end marker
        self._buffer = buffer
        self._unsubscribe: Callable[[], Awaitable[None]] | None = None
        self._closed = False

    def deliver(self, data: bytes) -> None:
        """(Adapters) one encoded event, appended to the stream; never blocks."""
        if self._closed:
            return
        if self._queue.qsize() >= self._buffer:
            self.dropped += 1
            return
        self._queue.put_nowait(data)

    def on_close(self, unsubscribe: Callable[[], Awaitable[None]]) -> None:
        """(Adapters) what ``aclose`` runs to stop the delivery."""
        self._unsubscribe = unsubscribe

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        data = await self._queue.get()
        if data is None:
            raise StopAsyncIteration
        return decode(data)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)  # wakes a reader waiting for the next event
        if self._unsubscribe is not None:
            await self._unsubscribe()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()


@runtime_checkable
class EventBus(Protocol):
    async def head(self, key: StreamKey) -> Head:
        """The current head of ``key``'s stream."""
        ...

    async def append(self, key: StreamKey, events: Sequence[Event], head: Head) -> Head:
        """Append ``events`` (seq ``head.last_seq + 1`` onwards) if ``head`` is still current.

        Raises :class:`AppendConflict` when another writer appended since ``head``.
        """
        ...

    async def append_many(
        self, batches: Sequence[tuple[StreamKey, Sequence[Event], Head]]
    ) -> list[Head | AppendConflict]:
        """Append to many streams at once, pipelined; per stream, order is kept.

        Returns, per batch, the new head or the conflict that stopped it.
        """
        ...

    def prepare_append(self, key: StreamKey, head: Head) -> None:
        """Start, in the background, what an append after ``head`` would first wait for (JetStream:
        the conversation's data key, made for a new one), so the append does not; returns at once.
        A writer calls it before the work that precedes its append (a turn: before the Talker)."""
        ...

    def tail(self, key: StreamKey, after_position: int) -> AsyncIterator[tuple[int, Event]]:
        """The events of ``key`` the bus still holds after ``after_position``, oldest first.

        Yields ``(position, event)``. Reads as it goes, so the cost is what is yielded (for a
        rebuild after the log's committed offset: the ingester's lag, not the stream's length).
        """
        ...

    async def subscribe(self, key: StreamKey, *, buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        """Every event appended to ``key`` after this returns, once each, in seq order.

        Only what the bus stored is delivered: a refused (fenced-off) append never shows.
        Close the subscription when done (``aclose`` or ``async with``).
        """
        ...

    async def close(self) -> None: ...


class InMemoryBus:
    """The bus contract in one process's memory: for unit tests and as the reference model.

    Positions are global, as JetStream's stream sequences are: one counter over every stream, so
    a position also orders appends across conversations (what an in-memory log's committed offset
    compares with). ``on_stored`` listeners get ``(position, event)`` for each stored event, in
    order, inside the append (the in-memory infrastructure ingests into its log this way).
    """

    def __init__(self) -> None:
        self.records: dict[StreamKey, list[tuple[int, bytes]]] = {}
        """Per stream, ``(position, encoded event)`` in append order."""
        self.position = 0
        """The position of the newest event stored in any stream (0: none)."""
        self.on_stored: list[Callable[[int, Event], None]] = []
        self._subscriptions: dict[StreamKey, set[Subscription]] = {}
        self._lock = asyncio.Lock()

    def prepare_append(self, key: StreamKey, head: Head) -> None:
        """Nothing to prepare: an append here waits for nothing."""

    async def head(self, key: StreamKey) -> Head:
        records = self.records.get(key, [])
        if not records:
            return Head(last_seq=None, fence=0)
        return Head(last_seq=decode(records[-1][1]).seq, fence=records[-1][0])

    async def append(self, key: StreamKey, events: Sequence[Event], head: Head) -> Head:
        check_batch(key, events, head.next_seq(key))
        encoded = [encode(event) for event in events]
        async with self._lock:
            records = self.records.setdefault(key, [])
            after = [(position, data) for position, data in records if position > head.fence]
            # A retry of an append that (partly) landed finds its own records after the fence.
            landed = after[: len(encoded)]
            matches = [data for _, data in landed] == encoded[: len(landed)]
            if not matches or (len(landed) < len(encoded) and len(after) > len(landed)):
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch,
                    expected_seq=head.next_seq(key) + (len(landed) if matches else 0),
                    detail=f"stream ends at position {records[-1][0] if records else 0}, writer expected {head.fence}",
                )
            if events and len(landed) == len(encoded):  # all of it landed before: answered, not repeated
                return Head(last_seq=events[-1].seq, fence=landed[-1][0])
            for event, data in zip(events[len(landed):], encoded[len(landed):], strict=True):
                self.position += 1
                records.append((self.position, data))
                for listener in self.on_stored:
                    listener(self.position, event)
                for subscription in self._subscriptions.get(key, ()):
                    subscription.deliver(data)
            return Head(last_seq=events[-1].seq if events else head.last_seq, fence=records[-1][0] if records else 0)

    async def append_many(
        self, batches: Sequence[tuple[StreamKey, Sequence[Event], Head]]
    ) -> list[Head | AppendConflict]:
        results: list[Head | AppendConflict] = []
        for key, events, head in batches:
            try:
                results.append(await self.append(key, events, head))
            except AppendConflict as conflict:
                results.append(conflict)
        return results

    async def tail(self, key: StreamKey, after_position: int) -> AsyncIterator[tuple[int, Event]]:
        for position, data in list(self.records.get(key, [])):
            if position > after_position:
                yield position, decode(data)

    async def subscribe(self, key: StreamKey, *, buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        subscription = Subscription(key, buffer)
        subscribers = self._subscriptions.setdefault(key, set())
        subscribers.add(subscription)

        async def unsubscribe() -> None:
            subscribers.discard(subscription)

        subscription.on_close(unsubscribe)
        return subscription

    async def close(self) -> None:
        return None


__all__ = [
    "DEFAULT_SUBSCRIPTION_BUFFER", "EventBus", "Head", "InMemoryBus", "Subscription", "check_batch",
]
