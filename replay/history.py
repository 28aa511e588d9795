"""Time travel and rebuilds: any conversation's state exactly as it was after any event, on any branch.

:meth:`History.rebuild` is the one way Mirror turns the log back into a state — for the live
conversation when it activates, for time travel (``state_at``), replay and recompute alike: the
newest usable snapshot at or before the position, then the events after it, or the events from
the start when there is no usable snapshot. The cost is bounded by the snapshot interval rather
than by how deep the position lies. Snapshots are caches, never truth (snapshot + tail == full
fold): the actors write them as they go, and a reader that has to fold further than one interval
writes the ones it passes (``materialize``), so the next look at that region is cheap too.

A snapshot that cannot be used — undecodable, of another projection version, or not the state
its row claims (another key or seq) — is logged, discarded through the
:class:`~mirror.events.log.SnapshotStore` (which counts it: ``mirror log stats``) and skipped:
the rebuild carries on from the next older snapshot, or from the start. A bad cache row never
keeps a conversation from activating.

Branches: a branch forked from ``parent`` after ``fork_seq`` inherits the parent's events
``1..fork_seq``; its own events start with the ``fork`` event at ``fork_seq + 1``. So the same
seq means the same place in the story on both sides of a fork, and a diff between ``main@k``
and ``branch@k`` is meaningful.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from mirror.events.bus import EventBus
from mirror.events.envelope import Event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.log import EventLogReader, IndexEntry, LogAccess, Snapshot, SnapshotStore
from mirror.events.payloads import Fork
from mirror.projections.conversation import apply
from mirror.projections.errors import CorruptSnapshot, StaleSnapshot
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes, state_from_snapshot
from mirror.projections.state import ConversationState, initial_state

from .errors import UnknownBranch, UnknownPosition

log = logging.getLogger(__name__)
T = TypeVar("T")

SNAPSHOT_EVERY = 200
"""Seqs between the snapshots a reader writes while folding (the actors' default too)."""
KEEP_STATES = 16
"""Keys whose last looked-at state the serving reader keeps (:class:`History`'s ``keep_states``):
the conversations people are looking at in the inspector at once, per gateway process."""


@dataclass(frozen=True, slots=True)
class ForkPoint:
    parent: StreamKey
    fork_seq: int
    prompt_set: str
    fork: Fork | None = None
    """The branch's ``fork`` payload (what it recorded of its prompt set among the rest)."""


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A state rebuilt from the log, and how: from which snapshot, folding how many events."""

    state: ConversationState
    snapshot: Snapshot | None
    """The snapshot the fold started from (this branch's, or the parent's for an inherited
    prefix); None when it started from the beginning."""
    events_folded: int
    """Log events folded on top of the snapshot (or from the start), inherited ones included."""
    snapshots_discarded: int = 0
    """Unusable snapshots met and skipped on the way."""


class History:
    """Reads states out of a log (see the module docstring).

    ``snapshots`` is where snapshots are written (``materialize``) and unusable ones discarded;
    without it, nothing is written (a read-only look), and an unusable snapshot is skipped by
    refolding from the start. ``materialize=False`` keeps a store for discards only.
    """

    def __init__(
        self, log: EventLogReader, *, snapshots: SnapshotStore | None = None, snapshot_every: int = SNAPSHOT_EVERY,
        materialize: bool = True, stream_head: Callable[[StreamKey], Awaitable[int | None]] | None = None,
        settle_timeout_s: float = 5.0, keep_states: int = 0,
    ) -> None:
        """``stream_head``, if given, tells the last seq the bus has acknowledged for a key: the
        latest position then waits (up to ``settle_timeout_s``) until the log has committed it,
        so what a writer was told is stored is what a reader sees (read-your-writes).

        ``keep_states``: how many keys' last looked-at state :meth:`state_at` keeps, so a look at
        the same seq again costs no read and a look a little later folds only the events between
        (a timeline stepped through); 0 keeps none. A state at a seq never changes (the log is
        append-only and states are immutable), so a kept one is never stale; whether the
        conversation may still be read at all is the caller's to check first (the gateway's read
        barrier asks the log, which refuses a forgotten one)."""
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.log = log
        self.snapshots = snapshots
        self.stream_head = stream_head
        self.settle_timeout_s = settle_timeout_s
        self.snapshot_every = snapshot_every
        self.materialize = materialize and snapshots is not None
        self._forks: dict[StreamKey, ForkPoint | None] = {}
        self.keep_states = keep_states
        self._kept: OrderedDict[StreamKey, ConversationState] = OrderedDict()
        """The last state :meth:`state_at` gave of each key, least recently looked at first."""

    async def fork_point(self, key: StreamKey) -> ForkPoint | None:
        """Where ``key`` was forked from, or None for a branch that starts at seq 1 (``main``)."""
        if key in self._forks:
            return self._forks[key]
        first = await self.log.read(key, limit=1)
        point = None
        if first and isinstance(first[0].payload, Fork):
            fork: Fork = first[0].payload
            point = ForkPoint(replace(key, branch=fork.parent_branch), fork.fork_seq, fork.prompt_set, fork)
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
        return await self._inheriting(key, after_seq, until_seq,
                                      lambda own, after, until: self.log.read(own, after_seq=after, until_seq=until))

    async def index(self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None) -> list[IndexEntry]:
        """:meth:`events`' seq, type, turn and time, without their payloads (a timeline's index)."""
        return await self._inheriting(key, after_seq, until_seq,
                                      lambda own, after, until: self.log.index(own, after_seq=after, until_seq=until))

    async def find(self, key: StreamKey, *, types: Sequence[str], mentioning: str | None = None, after_seq: int = 0,
                   until_seq: int | None = None) -> list[Event]:
        """:meth:`events` of ``types`` that mention ``mentioning`` (:meth:`~mirror.events.log.EventLogReader.find`)."""
        return await self._inheriting(key, after_seq, until_seq, lambda own, after, until: self.log.find(
            own, types=types, mentioning=mentioning, after_seq=after, until_seq=until))

    async def _inheriting(self, key: StreamKey, after_seq: int, until_seq: int | None,
                          read: Callable[[StreamKey, int, int | None], Awaitable[list[T]]]) -> list[T]:
        """``read(key, after, until)`` over ``(after_seq, until_seq]``: a forked branch's parent up
        to the fork (recursively), then its own; one way to walk inheritance for every kind of read."""
        point = await self.fork_point(key) if key.branch != MAIN_BRANCH else None
        if point is None or after_seq >= point.fork_seq:
            return await read(key, after_seq, until_seq)
        inherited_until = point.fork_seq if until_seq is None else min(until_seq, point.fork_seq)
        inherited = await self._inheriting(point.parent, after_seq, inherited_until, read)
        if until_seq is not None and until_seq <= point.fork_seq:
            return inherited
        return inherited + await read(key, point.fork_seq, until_seq)

    async def state_at(
        self, key: StreamKey, seq: int | None = None, *, at_time: float | None = None, last: int | None = None
    ) -> ConversationState:
        """The state of ``key`` right after event ``seq`` (default: the last), or at ``at_time``.

        ``last``: the last seq, when the caller has just settled it (the gateway's read barrier,
        :meth:`~mirror.gateway.runtime.GatewayRuntime.existing`): not asked of the log and the bus again."""
        if last is None or (last == 0 and key.branch != MAIN_BRANCH):  # an empty branch: last_seq says UnknownBranch
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
        if not self.keep_states:
            return (await self.rebuild(key, seq)).state
        kept = self._kept.get(key)
        if kept is not None and kept.last_seq == seq:
            state = kept
        elif kept is not None and kept.last_seq < seq and seq - kept.last_seq <= seq % self.snapshot_every:
            # No further from the kept state than from the snapshot a fold would start at: fold on from it.
            state = await self._fold(kept, await self.events(key, after_seq=kept.last_seq, until_seq=seq))
        else:
            state = (await self.rebuild(key, seq)).state
        self._kept[key] = state
        self._kept.move_to_end(key)
        while len(self._kept) > self.keep_states:
            self._kept.popitem(last=False)
        return state

    async def rebuild(self, key: StreamKey, until_seq: int | None = None) -> Rebuilt:
        """The state of ``key`` after ``until_seq`` (default: everything the log has committed).

        The one rebuild path (see the module docstring). It does not check ``until_seq`` against
        the log: past the end it is the state at the end (:meth:`state_at` checks positions).
        """
        point = await self.fork_point(key) if key.branch != MAIN_BRANCH else None
        if point is not None and until_seq is not None and until_seq <= point.fork_seq:
            inherited = await self.rebuild(point.parent, until_seq)
            return replace(inherited, state=_rekeyed(inherited.state, key))
        discarded: set[int] = set()
        while True:
            loaded = await self.log.load(key, projection_version=PROJECTION_VERSION, until_seq=until_seq)
            snapshot = loaded.snapshot
            if snapshot is None:
                break
            state, problem = (None, "it was discarded and came back") if snapshot.seq in discarded else _decoded(snapshot)
            if state is not None:
                return Rebuilt(await self._fold(state, loaded.events), snapshot, len(loaded.events), len(discarded))
            discarded.add(snapshot.seq)
            log.warning("skipping the snapshot of %s at seq %d: %s; rebuilding without it", key, snapshot.seq, problem)
            if not await self._discard(snapshot, problem):  # it stays: fold from the start below
                loaded = replace(loaded, events=tuple(await self.log.read(key, until_seq=until_seq)))
                break
        if point is None:
            inherited = Rebuilt(initial_state(key), None, 0)
        else:
            inherited = await self.rebuild(point.parent, point.fork_seq)
        state = await self._fold(_rekeyed(inherited.state, key), loaded.events)
        return Rebuilt(state, inherited.snapshot, inherited.events_folded + len(loaded.events),
                       inherited.snapshots_discarded + len(discarded))

    async def _discard(self, snapshot: Snapshot, problem: str) -> bool:
        """Drop an unusable snapshot through the store (which counts it); False if it could not be."""
        if self.snapshots is None:
            return False
        try:
            await self.snapshots.discard_snapshot(snapshot, problem)
        except Exception as exc:  # the cache row stays; the rebuild goes on without it
            log.warning("could not discard the snapshot of %s at seq %d: %r", snapshot.key, snapshot.seq, exc)
            return False
        return True

    async def _fold(self, state: ConversationState, events: Any) -> ConversationState:
        every = self.snapshot_every
        for event in events:
            state = apply(state, event)
            if self.materialize and state.last_seq % every == 0:
                await self._save(state)
        return state

    async def _save(self, state: ConversationState) -> None:
        assert self.snapshots is not None, "materialize needs a snapshot store"
        try:
            await self.snapshots.save_snapshot(
                Snapshot(state.key, state.last_seq, PROJECTION_VERSION, snapshot_bytes(state))
            )
        except Exception as exc:  # a snapshot is a cache: failing to write one loses nothing
            log.debug("snapshot of %s at %d not written: %s", state.key, state.last_seq, exc)


def serving_history(log: LogAccess, bus: EventBus, *, snapshot_every: int = SNAPSHOT_EVERY) -> History:
    """The reader that answers requests for a shard's states: the gateway's time travel, and any
    benchmark that claims to measure it (so the two cannot drift).

    It discards unusable snapshots through ``log`` and writes the ones it passes while folding
    (``materialize``: a history the actors never snapshotted is cheap from its second look), and
    its latest position waits for what the bus has acknowledged (read-your-writes).
    """
    async def stream_head(key: StreamKey) -> int | None:
        return (await bus.head(key)).last_seq

    return History(log, snapshots=log, snapshot_every=snapshot_every, stream_head=stream_head, keep_states=KEEP_STATES)


def _decoded(snapshot: Snapshot) -> tuple[ConversationState | None, str]:
    """The state ``snapshot`` holds, or None and why it cannot be used (stale, corrupt, or
    another state than its row says)."""
    try:
        state = state_from_snapshot(snapshot.state)
    except (StaleSnapshot, CorruptSnapshot) as exc:
        return None, str(exc)
    except Exception as exc:  # a cache row is never trusted: anything that does not decode is corrupt
        return None, f"the snapshot does not decode ({type(exc).__name__}: {exc})"
    if state.key != snapshot.key or state.last_seq != snapshot.seq:
        return None, f"it holds {state.key} at seq {state.last_seq}, not {snapshot.key} at seq {snapshot.seq}"
    return state, ""


def _rekeyed(state: ConversationState, key: StreamKey) -> ConversationState:
    return state if state.key == key else replace(state, key=key)


__all__ = ["ForkPoint", "History", "KEEP_STATES", "Rebuilt", "SNAPSHOT_EVERY", "serving_history"]
