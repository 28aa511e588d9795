"""The bus port: fenced, ordered appends of events to one conversation's stream.

A writer asks for the :class:`Head` of a stream once, then appends with it; each successful
append returns the next head. The head's ``fence`` is an opaque token the bus uses to refuse an
append from a writer whose view is stale (:class:`AppendConflict`) — so two writers of one
conversation can never both append the same seq.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .codec import encode
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

    async def close(self) -> None: ...


class InMemoryBus:
    """The bus contract in one process's memory: for unit tests and as the reference model."""

    def __init__(self) -> None:
        self.records: dict[StreamKey, list[tuple[int, bytes]]] = {}
        self._lock = asyncio.Lock()

    async def head(self, key: StreamKey) -> Head:
        records = self.records.get(key, [])
        return Head(last_seq=records[-1][0] if records else None, fence=len(records))

    async def append(self, key: StreamKey, events: Sequence[Event], head: Head) -> Head:
        check_batch(key, events, head.next_seq(key))
        encoded = [(event.seq, encode(event)) for event in events]
        async with self._lock:
            records = self.records.setdefault(key, [])
            # A retry of an append that (partly) landed finds its own records after the fence.
            landed = records[head.fence : head.fence + len(encoded)]
            if landed != encoded[: len(landed)]:
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch,
                    expected_seq=head.next_seq(key),
                    detail=f"stream holds {len(records)} events, writer expected {head.fence}",
                )
            if len(landed) < len(encoded) and head.fence + len(landed) != len(records):
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch,
                    expected_seq=head.next_seq(key) + len(landed),
                    detail=f"stream holds {len(records)} events, writer expected {head.fence + len(landed)}",
                )
            records.extend(encoded[len(landed) :])
            fence = head.fence + len(encoded)
            return Head(last_seq=events[-1].seq if events else head.last_seq, fence=fence)

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

    async def close(self) -> None:
        return None
