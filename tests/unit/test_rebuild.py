"""The one rebuild path (``History.rebuild``), in memory: snapshot + tail equals the full fold, and
a snapshot that cannot be used is skipped, discarded and counted — never trusted, never fatal."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.codec import decode
from mirror.events.envelope import Event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.log import Snapshot
from mirror.events.memory_log import InMemoryEventLog
from mirror.projections.conversation import fold
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes
from mirror.projections.state import initial_state
from mirror.replay.history import History
from tests.support.golden import read_log

EVENTS: list[Event] = [decode(record) for record in read_log("conversation")]
MAIN = next(event.key for event in EVENTS if event.branch == MAIN_BRANCH)
MAIN_EVENTS = [event for event in EVENTS if event.key == MAIN]


def _log() -> InMemoryEventLog:
    log = InMemoryEventLog()
    log.add(EVENTS)
    return log


def _snapshot_at(seq: int, data: bytes | None = None) -> Snapshot:
    state = fold(MAIN_EVENTS[:seq])
    return Snapshot(MAIN, seq, PROJECTION_VERSION, snapshot_bytes(state) if data is None else data)


def _stale(seq: int) -> bytes:
    envelope = msgpack.unpackb(snapshot_bytes(fold(MAIN_EVENTS[:seq])), raw=False)
    envelope["version"] = PROJECTION_VERSION + 1
    return msgpack.packb(envelope, use_bin_type=True)


SPOILED = {
    "undecodable": lambda seq: b"\x93garbage",
    "stale": _stale,
    "another seq": lambda seq: snapshot_bytes(fold(MAIN_EVENTS[: seq - 1])),
    "another key": lambda seq: snapshot_bytes(initial_state(StreamKey("acme", "someone-else"))),
}


@pytest.mark.parametrize("spoiler", sorted(SPOILED))
async def test_an_unusable_snapshot_is_discarded_and_the_rebuild_uses_the_next_older_one(spoiler: str) -> None:
    log = _log()
    log.put_snapshot(_snapshot_at(2))
    log.put_snapshot(_snapshot_at(len(MAIN_EVENTS) - 1, SPOILED[spoiler](len(MAIN_EVENTS) - 1)))
    rebuilt = await History(log, snapshots=log, materialize=False).rebuild(MAIN)
    assert rebuilt.state == fold(MAIN_EVENTS)
    assert rebuilt.snapshots_discarded == 1 and rebuilt.snapshot is not None and rebuilt.snapshot.seq == 2
    assert rebuilt.events_folded == len(MAIN_EVENTS) - 2
    assert (await log.stats()).snapshots_discarded == 1
    assert (await log.load(MAIN, projection_version=PROJECTION_VERSION)).snapshot == _snapshot_at(2)  # the bad one is gone


async def test_without_a_store_an_unusable_snapshot_is_skipped_by_folding_from_the_start() -> None:
    log = _log()
    log.put_snapshot(_snapshot_at(3, b"\x00"))
    rebuilt = await History(log).rebuild(MAIN)  # a read-only look: nothing to discard through
    assert rebuilt.state == fold(MAIN_EVENTS) and rebuilt.snapshot is None
    assert rebuilt.snapshots_discarded == 1 and rebuilt.events_folded == len(MAIN_EVENTS)
    assert (await log.stats()).snapshots_discarded == 0  # still there, for a writer to replace


@settings(max_examples=60, deadline=None)
@given(st.data())
async def test_snapshot_plus_tail_is_the_full_fold_at_every_seq_on_every_branch(data: st.DataObject) -> None:
    log = _log()
    for seq in data.draw(st.sets(st.integers(1, len(MAIN_EVENTS)), max_size=4), label="snapshots"):
        good = data.draw(st.booleans(), label=f"snapshot {seq} usable")
        log.put_snapshot(_snapshot_at(seq, None if good else b"\xc1"))
    key = data.draw(st.sampled_from(sorted({event.key for event in EVENTS}, key=str)), label="branch")
    history = History(log, snapshots=log, materialize=data.draw(st.booleans(), label="materialize"), snapshot_every=2)
    last = await history.last_seq(key)
    seq = data.draw(st.integers(0, last), label="seq")
    expected = (await History(_log()).rebuild(key, seq)).state  # no snapshots at all: the events alone
    assert expected.last_seq == seq
    assert (await history.rebuild(key, seq)).state == expected
    assert await history.state_at(key, seq) == expected


class _CountingLog(InMemoryEventLog):
    """The log, counting the loads (snapshot + tail) and reads asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.reads = 0

    async def load(self, *args: Any, **kwargs: Any) -> Any:
        self.loads += 1
        return await super().load(*args, **kwargs)

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await super().read(*args, **kwargs)


async def test_a_kept_state_answers_the_same_look_and_folds_on_to_a_later_one() -> None:
    log = _CountingLog()
    log.add(EVENTS)
    history = History(log, snapshot_every=len(MAIN_EVENTS) + 1, keep_states=1)  # no snapshot nearer than the kept state
    last = len(MAIN_EVENTS)
    assert await history.state_at(MAIN, last - 3) == fold(MAIN_EVENTS[:last - 3])
    asked = log.loads + log.reads
    assert await history.state_at(MAIN, last - 3) == fold(MAIN_EVENTS[:last - 3])  # the same look: nothing read
    assert log.loads + log.reads == asked
    assert await history.state_at(MAIN, last) == fold(MAIN_EVENTS)  # three events on: those alone read, no load
    assert log.loads == 1 and log.loads + log.reads == asked + 1
    assert await history.state_at(MAIN, 2) == fold(MAIN_EVENTS[:2])  # an earlier look: rebuilt as ever
    assert log.loads == 2
