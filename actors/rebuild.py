"""Rebuilding a conversation's state on activation: the log's state, then what only the bus holds.

The log's part is the one rebuild path (:meth:`~mirror.replay.history.History.rebuild`: a
snapshot and the events after it); then the part of the bus the log has not committed yet is
folded, so a restarted or re-activated conversation continues exactly where the last one
stopped. The log is trusted over the stream: a stream that ends behind the log (a broker's store
came back older) is re-fenced on what it holds now, and appending goes on after the log's last
seq, without a gap; a stream ahead of what could be folded is :class:`~mirror.actors.errors.Fenced`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from mirror.events.bus import EventBus, Head
from mirror.events.errors import LogError
from mirror.events.ids import StreamKey
from mirror.events.log import LogAccess
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState
from mirror.replay.history import History

from .errors import Fenced

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """How the last (re)activation rebuilt the state: what it cost, and from where.

    A conversation passivated cleanly comes back from its snapshot alone: ``snapshot_seq ==
    last_seq``, no log tail and no stream messages, whatever the length of its history.
    """

    last_seq: int
    snapshot_seq: int | None
    snapshot_bytes: int
    log_tail_events: int
    stream_messages_read: int
    stream_events_folded: int
    scanned_after_stream_seq: int
    rebuild_ms: float
    snapshots_discarded: int = 0
    """Unusable (stale or corrupt) snapshots the rebuild skipped and discarded."""
    phases_ms: Mapping[str, float] = field(default_factory=dict)
    """Where ``rebuild_ms`` went, phase by phase (the host sums them: ``mirror bench actors --hold``)."""


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A rebuilt state, the bus head to append after it (fenced), and how it was rebuilt."""

    state: ConversationState
    head: Head
    report: RebuildReport


async def rebuild(key: StreamKey, event_log: LogAccess, bus: EventBus, *, snapshot_every: int) -> Rebuilt:
    """The log's state (the one rebuild path: :meth:`History.rebuild`), then what only the bus holds.

    The log and the bus's head are asked at once. A conversation whose stream holds nothing the
    log lacks (a new one, or one passivated cleanly) is rebuilt from those two answers: one
    round trip to the log's owner and one to the broker, side by side. The stream's uncommitted
    part is read only when the head is ahead of the log.
    """
    started = time.perf_counter()
    phases: dict[str, float] = {}
    lap = _Laps(phases)
    history = History(event_log, snapshots=event_log, materialize=False, snapshot_every=snapshot_every)
    head, rebuilt = await asyncio.gather(_timed(phases, "head", bus.head(key)), _timed(phases, "log", history.rebuild(key)))
    lap("log_and_head")
    state, read, folded, committed = rebuilt.state, 0, 0, 0
    if (head.last_seq or 0) < state.last_seq:
        # Asked beside the log, the head may predate events that another writer appended and
        # the ingester committed meanwhile; the checks below need one read after the log.
        head = await bus.head(key)
        lap("stream_head")
    if head.last_seq is not None and head.last_seq > state.last_seq:
        # The newest events are not committed yet: they are in the stream after the offset the
        # log has committed. Read after the log, the offset may have passed events the log's
        # answer did not hold yet; then, or when the offset belongs to a stream that has since
        # gone backwards (its new messages carry sequences below it), the whole subject is read
        # (compaction keeps it short).
        committed = await _committed_offset(event_log)
        state, read, folded = await _fold_uncommitted(bus, key, state, after_stream_seq=committed, until=head.fence)
        if head.last_seq > state.last_seq and committed:
            state, more_read, more_folded = await _fold_uncommitted(bus, key, state, after_stream_seq=0, until=head.fence)
            read, folded = read + more_read, folded + more_folded
        lap("stream_tail")
    if head.last_seq is not None and head.last_seq > state.last_seq:
        raise Fenced(key, f"stream ends at seq {head.last_seq} but the rebuilt state at {state.last_seq}")
    if head.last_seq is not None and head.last_seq < state.last_seq:
        # The log is the record: the stream came back older than it (a broker's disk restored
        # or lost). Append after the log's last seq, fenced on what the stream holds now.
        log.warning("%s: the stream ends at seq %d, behind the log's %d (the broker's store went backwards); "
                    "re-fenced on stream seq %d from the log, appending from seq %d",
                    key, head.last_seq, state.last_seq, head.fence, state.last_seq + 1)
    snapshot = rebuilt.snapshot if rebuilt.snapshot is not None and rebuilt.snapshot.key == key else None
    report = RebuildReport(
        last_seq=state.last_seq, snapshot_seq=snapshot.seq if snapshot else None,
        snapshot_bytes=len(snapshot.state) if snapshot else 0, log_tail_events=rebuilt.events_folded,
        stream_messages_read=read, stream_events_folded=folded, scanned_after_stream_seq=committed,
        rebuild_ms=round((time.perf_counter() - started) * 1000, 3),
        snapshots_discarded=rebuilt.snapshots_discarded, phases_ms=phases,
    )
    log.info("%s rebuilt: %s", key, report)
    return Rebuilt(state, Head(state.last_seq, head.fence), report)


class _Laps:
    """Milliseconds since the previous lap, recorded under each lap's name."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.last = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = round(self.into.get(name, 0.0) + (now - self.last) * 1000, 3)
        self.last = now


async def _timed(phases: dict[str, float], name: str, step: Awaitable[T]) -> T:
    """``await step``, its milliseconds recorded under ``name`` (steps that run side by side)."""
    started = time.perf_counter()
    try:
        return await step
    finally:
        phases[name] = round((time.perf_counter() - started) * 1000, 3)


async def _committed_offset(event_log: LogAccess) -> int:
    try:
        return await event_log.committed_offset()
    except LogError:
        return 0  # a log service that does not track progress: scan the whole subject


async def _fold_uncommitted(
    bus: EventBus, key: StreamKey, state: ConversationState, *, after_stream_seq: int, until: int
) -> tuple[ConversationState, int, int]:
    """Events still only in the stream: the ingester keeps them there until committed.

    Only messages after ``after_stream_seq`` (the log's committed offset) and up to ``until``
    (the head's: later ones are another writer's, which the fence turns away) are read, so the
    cost is the ingester's lag, not the conversation's length. Returns the state, the messages
    read and the events folded.
    """
    read = folded = 0
    messages = bus.tail(key, after_stream_seq)
    try:
        async for position, event in messages:
            if position > until:
                break
            read += 1
            if event.seq == state.last_seq + 1:
                state = apply(state, event)
                folded += 1
            if position == until:
                break
    finally:
        if isinstance(messages, AsyncGenerator):  # left early: closed now, not when collected
            await messages.aclose()
    return state, read, folded


__all__ = ["RebuildReport", "Rebuilt", "rebuild"]
