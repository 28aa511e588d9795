"""Time travel: any conversation's state exactly as it was after any event, on any branch.

``state_at`` folds the prefix of the log up to the asked position, starting from the newest
snapshot at or before it, so the cost is bounded by the snapshot interval rather than by how
deep the position lies. Snapshots are caches, never truth (snapshot + tail == full fold): the
actors write them as they go, and a reader that has to fold further than one interval writes
the ones it passes (``materialize``), so the next look at that region is cheap too.

Branches: a branch forked from ``parent`` after ``fork_seq`` inherits the parent's events
``1..fork_seq``; its own events start with the ``fork`` event at ``fork_seq + 1``. So the same
seq means the same place in the story on both sides of a fork, and a diff between ``main@k``
and ``branch@k`` is meaningful.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from mirror.events.envelope import Event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.log import Loaded, Snapshot
from mirror.events.payloads import Fork
from mirror.projections.conversation import apply
from mirror.projections.errors import CorruptSnapshot, StaleSnapshot
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes, state_from_snapshot
from mirror.projections.state import ConversationState, initial_state

from .errors import UnknownBranch, UnknownPosition

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 200
"""Seqs between the snapshots a reader writes while folding (the actors' default too)."""


class HistoryLog(Protocol):
    """What time travel needs of the log port (the DuckDB log or its NATS client)."""

    async def read(self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None,
                   limit: int | None = None) -> list[Event]: ...

    async def last_seq(self, key: StreamKey) -> int: ...

    async def load(self, key: StreamKey, *, projection_version: int | None = None,
                   until_seq: int | None = None) -> Loaded: ...

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int: ...

    async def save_snapshot(self, snapshot: Snapshot) -> None: ...


@dataclass(frozen=True, slots=True)
class ForkPoint:
    parent: StreamKey
    fork_seq: int
    prompt_set: str


class History:
    """Reads states out of a log. ``materialize=False`` for a read-only look (no snapshot writes)."""

    def __init__(
        self, log: HistoryLog, *, snapshot_every: int = SNAPSHOT_EVERY, materialize: bool = True,
        stream_head: Callable[[StreamKey], Awaitable[int | None]] | None = None, settle_timeout_s: float = 5.0,
    ) -> None:
        """``stream_head``, if given, tells the last seq the bus has acknowledged for a key: the
        latest position then waits (up to ``settle_timeout_s``) until the log has committed it,
        so what a writer was told is stored is what a reader sees (read-your-writes)."""
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.log = log
        self.stream_head = stream_head
        self.settle_timeout_s = settle_timeout_s
        self.snapshot_every = snapshot_every
        self.materialize = materialize
        self._forks: dict[StreamKey, ForkPoint | None] = {}

    async def fork_point(self, key: StreamKey) -> ForkPoint | None:
        """Where ``key`` was forked from, or None for a branch that starts at seq 1 (``main``)."""
        if key in self._forks:
            return self._forks[key]
        first = await self.log.read(key, limit=1)
        point = None
        if first and isinstance(first[0].payload, Fork):
            fork: Fork = first[0].payload
            point = ForkPoint(replace(key, branch=fork.parent_branch), fork.fork_seq, fork.prompt_set)
        if first:  # a branch's first event never changes; an empty branch may still be born
            self._forks[key] = point
        return point

    async def last_seq(self, key: StreamKey) -> int:
        """The last seq of ``key``, counting what a forked branch inherited."""
        if self.stream_head is None:
            last = await self.log.last_seq(key)
        else:  # two round trips to two servers (the log, the bus): asked at once
            last, acknowledged = await asyncio.gather(self.log.last_seq(key), self.stream_head(key))
            if acknowledged is not None and acknowledged > last:
                last = await self.wait_for_log(key, acknowledged, self.settle_timeout_s, committed=last)
                if last < acknowledged:
                    log.warning("%s: the log is at seq %d, the stream at %d after %ss; reading what is committed",
                                key, last, acknowledged, self.settle_timeout_s)
        if last == 0 and key.branch != MAIN_BRANCH:
            raise UnknownBranch(key, "this branch has no events")
        return last

    async def wait_for_log(self, key: StreamKey, seq: int, timeout_s: float, *, committed: int | None = None) -> int:
        """Poll until the log holds ``key`` up to ``seq`` (the ingester commits in batches, ~50 ms
        late at a trickle) or ``timeout_s`` passes; returns the log's last seq of ``key``."""
        if committed is None:
            committed = await self.log.last_seq(key)
        deadline = time.monotonic() + timeout_s
        while committed < seq and time.monotonic() <= deadline:
            await asyncio.sleep(0.01)
            committed = await self.log.last_seq(key)
        return committed

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        """The last seq of ``key`` at ``timestamp``; before a fork's first event, the parent's."""
        seq = await self.log.seq_at_time(key, timestamp)
        if seq:
            return seq
        point = await self.fork_point(key) if key.branch != MAIN_BRANCH else None
        if point is None:
            return 0
        return min(await self.seq_at_time(point.parent, timestamp), point.fork_seq)

    async def events(self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None) -> list[Event]:
        """Events of ``key`` in ``(after_seq, until_seq]``, a forked branch's inherited ones included."""
        point = await self.fork_point(key) if key.branch != MAIN_BRANCH else None
        if point is None or after_seq >= point.fork_seq:
            return await self.log.read(key, after_seq=after_seq, until_seq=until_seq)
        inherited_until = point.fork_seq if until_seq is None else min(until_seq, point.fork_seq)
        inherited = await self.events(point.parent, after_seq=after_seq, until_seq=inherited_until)
        if until_seq is not None and until_seq <= point.fork_seq:
            return inherited
        return inherited + await self.log.read(key, after_seq=point.fork_seq, until_seq=until_seq)

    async def state_at(
        self, key: StreamKey, seq: int | None = None, *, at_time: float | None = None
    ) -> ConversationState:
        """The state of ``key`` right after event ``seq`` (default: the last), or at ``at_time``."""
        last = await self.last_seq(key)
        if at_time is not None:
            if seq is not None:
                raise ValueError("ask for a seq or a time, not both")
            seq = await self.seq_at_time(key, at_time)
        elif seq is None:
            seq = last
        if type(seq) is not int or not 0 <= seq <= last:
            raise UnknownPosition(key, seq, last)
        return await self._state_at(key, seq)

    async def _state_at(self, key: StreamKey, seq: int) -> ConversationState:
        point = await self.fork_point(key) if key.branch != MAIN_BRANCH else None
        if point is not None and seq <= point.fork_seq:
            return _rekeyed(await self._state_at(point.parent, seq), key)
        loaded = await self.log.load(key, projection_version=PROJECTION_VERSION, until_seq=seq)
        state = _from_snapshot(loaded.snapshot)
        events: tuple[Event, ...] | list[Event] = loaded.events
        if state is None:
            if loaded.snapshot is not None:  # unusable snapshot: refold this branch's own events
                events = await self.log.read(key, until_seq=seq)
            state = (
                _rekeyed(await self._state_at(point.parent, point.fork_seq), key) if point is not None
                else initial_state(key)
            )
        return await self._fold(state, events)

    async def _fold(self, state: ConversationState, events: Any) -> ConversationState:
        every = self.snapshot_every
        for event in events:
            state = apply(state, event)
            if self.materialize and state.last_seq % every == 0:
                await self._save(state)
        return state

    async def _save(self, state: ConversationState) -> None:
        try:
            await self.log.save_snapshot(
                Snapshot(state.key, state.last_seq, PROJECTION_VERSION, snapshot_bytes(state))
            )
        except Exception as exc:  # a snapshot is a cache: failing to write one loses nothing
            log.debug("snapshot of %s at %d not written: %s", state.key, state.last_seq, exc)


def _from_snapshot(snapshot: Snapshot | None) -> ConversationState | None:
    if snapshot is None:
        return None
    try:
        return state_from_snapshot(snapshot.state)
    except (StaleSnapshot, CorruptSnapshot) as exc:
        log.warning("ignoring snapshot of %s at %d: %s", snapshot.key, snapshot.seq, exc)
        return None


def _rekeyed(state: ConversationState, key: StreamKey) -> ConversationState:
    return state if state.key == key else replace(state, key=key)


__all__ = ["History", "ForkPoint", "HistoryLog", "SNAPSHOT_EVERY"]
