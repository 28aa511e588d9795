"""The conversation projection: a pure fold whose snapshots are caches, with bounded state.

Properties over generated logs (``event_sequences``): any chunking of a log folds to the same
state as the whole log; a snapshot restored and folded on equals the full fold; ``apply`` never
changes its input; the state agrees with a plain model computed straight from the events. Then
the numbers the design fixes — half-lives, floors, the reinforcement step, the cap, the edge
origins, exemption and pruning windows, the monologue's 90% / 80% marks — at their boundaries.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import replace
from typing import Any, cast

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.envelope import Event, make_event
from mirror.events.payloads import (
    Belief,
    Edge,
    Fork,
    Insight,
    Monologue,
    Narrative,
    Recall,
    Reflection,
    ThinkerFailed,
    Turn,
)
from mirror.projections.constants import (
    CONFIDENCE_CAP,
    EDGE_INITIAL_CONFIDENCE,
    REINFORCE_STEP,
    SECONDS_PER_DAY,
)
from mirror.projections.conversation import apply, fold
from mirror.projections.errors import (
    CorruptSnapshot,
    EmptyFold,
    OutOfOrderEvent,
    SnapshotError,
    StaleSnapshot,
)
from mirror.projections.monologue import (
    MonologueEntry,
    Threads,
    append_bounded,
    estimate_tokens,
    history_tokens,
)
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes, state_from_snapshot
from mirror.projections.state import ConversationState, Limits, PendingInsight, TurnRecord, initial_state
from tests.support.event_log import KEY, T0, log_of
from tests.support.strategies import any_limits, event_sequences, msgpack_values, stream_keys

DAY = SECONDS_PER_DAY
PROPERTY = settings(max_examples=100, deadline=None)


def split_points(size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, size), max_size=4).map(lambda cuts: sorted({0, size, *cuts}))


# ------------------------------------------------------------------------- fold properties


@given(event_sequences(), any_limits, st.data())
@PROPERTY
def test_folding_in_chunks_equals_folding_at_once(log: list[Event], limits: Limits, data: st.DataObject) -> None:
    batch = fold(log, limits=limits)
    cuts = data.draw(split_points(len(log)))
    state = initial_state(log[0].key, limits)
    for start, end in zip(cuts, cuts[1:], strict=False):
        state = fold(log[start:end], state)
    assert state == batch
    assert state.last_seq == len(log)


@given(event_sequences(), any_limits, st.data())
@PROPERTY
def test_prefix_then_rest_equals_the_whole(log: list[Event], limits: Limits, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(log)))
    assert fold(log[cut:], fold(log[:cut], limits=limits)) == fold(log, limits=limits)


@given(event_sequences(), any_limits, st.data())
@PROPERTY
def test_snapshot_plus_tail_equals_full_fold(log: list[Event], limits: Limits, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(log)))
    prefix_state = fold(log[:cut], limits=limits)
    restored = state_from_snapshot(snapshot_bytes(prefix_state))
    assert restored == prefix_state
    assert restored.monologue_tokens == prefix_state.monologue_tokens
    assert fold(log[cut:], restored) == fold(log, limits=limits)
    # A snapshot of a restored state is the same snapshot.
    assert snapshot_bytes(restored) == snapshot_bytes(prefix_state)


@given(event_sequences(max_size=20), any_limits)
@PROPERTY
def test_apply_never_changes_its_input(log: list[Event], limits: Limits) -> None:
    state = initial_state(log[0].key, limits)
    history = []
    for event in log:
        before = copy.deepcopy(state)
        before_bytes = snapshot_bytes(state)
        after = apply(state, event)
        assert state == before
        assert snapshot_bytes(state) == before_bytes
        assert after.last_seq == state.last_seq + 1
        history.append((state, before_bytes))
        state = after
    # Old states (time-travel views) are untouched by everything folded after them.
    for old, old_bytes in history:
        assert snapshot_bytes(old) == old_bytes


def test_fold_needs_events_or_a_state() -> None:
    with pytest.raises(EmptyFold):
        fold([])
    state = initial_state(KEY)
    assert fold([], state) is state


# ------------------------------------------------------------------------------- ordering


@given(event_sequences(min_size=2, max_size=10), st.data())
@settings(max_examples=80, deadline=None)
def test_an_event_that_does_not_continue_the_state_is_refused(log: list[Event], data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(log) - 1))
    state = fold(log[:cut])
    expected = cut + 1
    wrong_seq = data.draw(st.sampled_from([1, cut, cut + 2, cut + 100]).filter(lambda seq: seq != expected))
    stray = replace(log[cut], seq=wrong_seq)
    with pytest.raises(OutOfOrderEvent) as caught:
        apply(state, stray)
    assert (caught.value.expected_seq, caught.value.actual_seq) == (expected, wrong_seq)
    assert f"expected seq {expected}" in str(caught.value)
    # The right seq of another stream is refused too.
    other = data.draw(stream_keys.filter(lambda key: key != log[0].key))
    foreign = make_event(other, expected, log[cut].payload, timestamp=log[cut].timestamp)
    with pytest.raises(OutOfOrderEvent) as caught:
        apply(state, foreign)
    assert caught.value.event_conversation == other.conversation
    assert caught.value.conversation == log[0].conversation
    assert fold(log[cut:], state) == fold(log)  # and the state is still good to continue


def test_first_event_must_be_seq_one() -> None:
    with pytest.raises(OutOfOrderEvent):
        apply(initial_state(KEY), make_event(KEY, 2, Insight("x"), timestamp=T0))
    with pytest.raises(OutOfOrderEvent):
        fold([make_event(KEY, 2, Insight("x"), timestamp=T0)])


# ------------------------------------------------------------------- model of the projection


def _clamp(value: float) -> float:
    return 0.0 if math.isnan(value) else min(CONFIDENCE_CAP, max(0.0, value))


def model(log: list[Event], limits: Limits) -> dict[str, Any]:
    """What the design says the state is, computed directly from the log with plain lists."""
    turns: list[TurnRecord] = []
    insights: list[PendingInsight] = []
    monologue: list[MonologueEntry] = []
    beliefs: dict[str, dict[str, Any]] = {}
    reviews: dict[tuple[str, str], int] = {}
    edges: dict[tuple[str, str, str], dict[str, Any]] = {}
    out: dict[str, Any] = {
        "narrative": None, "narrative_seq": None, "threads": None, "threads_seq": None,
        "portrait": None, "last_reflection_seq": None, "failure_seq": None, "fork_seq": None,
        "turns_since_reflection": 0, "reflection_times": [], "forgotten": 0, "decayed": 0,
    }
    for event in log:
        payload = event.payload
        if isinstance(payload, Turn):
            turns.append(TurnRecord(event.seq, payload.user_message, payload.reply, payload.narrative_seq))
            out["turns_since_reflection"] += 1
        elif isinstance(payload, Monologue):
            threads = Threads(payload.reasoning, payload.memory, payload.goal)
            out["threads"], out["threads_seq"] = threads, event.seq
            monologue.append(MonologueEntry(event.seq, threads))
            budget = limits.monologue_token_budget
            if history_tokens(tuple(monologue)) * 100 > budget * limits.monologue_trim_above_percent:
                while monologue and history_tokens(tuple(monologue)) * 100 > budget * limits.monologue_trim_to_percent:
                    monologue.pop(0)
        elif isinstance(payload, Narrative):
            out["narrative"], out["narrative_seq"] = payload.text, event.seq
        elif isinstance(payload, Insight):
            insights.append(PendingInsight(event.seq, payload.text))
        elif isinstance(payload, Reflection):
            insights.clear()
            out["turns_since_reflection"] = 0
            out["last_reflection_seq"] = event.seq
            out["reflection_times"].append(event.timestamp)
            if payload.accepted:
                out["portrait"] = payload.portrait
            for belief_id, _proposed, applied, _rule in payload.decisions:
                if belief_id in beliefs and applied == "decay":
                    beliefs[belief_id]["confidence"] = _clamp(beliefs[belief_id]["confidence"] * 0.5)
                    out["decayed"] += 1
                elif belief_id in beliefs and applied == "forget":
                    del beliefs[belief_id]
                    out["forgotten"] += 1
        elif isinstance(payload, ThinkerFailed):
            out["failure_seq"] = event.seq
        elif isinstance(payload, Fork):
            out["fork_seq"] = event.seq
        elif isinstance(payload, Recall):
            for belief_id in set(payload.belief_ids):
                if belief_id in beliefs:
                    beliefs[belief_id]["recalls"] += 1
        elif isinstance(payload, Belief):
            belief = beliefs.get(payload.belief_id)
            if payload.operation == "recall":
                if belief is not None:
                    belief["recalls"] += 1
                continue
            if belief is None:
                beliefs[payload.belief_id] = {
                    "confidence": _clamp(payload.confidence), "type": payload.memory_type,
                    "created": event.timestamp, "reinforced": event.timestamp, "recalls": 0,
                    "memory": (payload.about, payload.kind, payload.source_turn, payload.embedding,
                               payload.embedding_model),
                }
            else:
                belief["confidence"] = _clamp(belief["confidence"] + REINFORCE_STEP)
                belief["reinforced"] = event.timestamp
            others = [i for i in dict.fromkeys(payload.related) if i != payload.belief_id]
            if payload.operation == "consistent":
                for other in others:
                    if other in beliefs:
                        beliefs[other]["confidence"] = _clamp(beliefs[other]["confidence"] + 0.02)
            if payload.operation == "contradict":
                for other in others:
                    reviews.setdefault((payload.belief_id, other), event.seq)
        elif isinstance(payload, Edge):
            key = (payload.src, payload.relation, payload.dst)
            edge = edges.get(key)
            if edge is None:
                edge = edges[key] = {
                    "confidence": EDGE_INITIAL_CONFIDENCE[payload.origin], "origin": payload.origin,
                    "reinforced": event.timestamp, "changed": event.timestamp, "flags": set(),
                }
            else:
                edge.update(confidence=_clamp(edge["confidence"] + REINFORCE_STEP), reinforced=event.timestamp,
                            changed=event.timestamp)
            opposed = payload.contradicts
            if payload.operation == "contradict" and opposed is not None and tuple(opposed) != key:
                opposed_key = cast(tuple[str, str, str], tuple(opposed))  # the triple its type says, as a tuple even if a list came in
                edge["flags"].add(opposed_key)
                if opposed_key in edges:
                    edges[opposed_key]["flags"].add(key)
                    edges[opposed_key]["changed"] = event.timestamp
    out.update(
        recent_turns=tuple(turns[max(0, len(turns) - limits.recent_turns):]),
        turn_count=len(turns),
        pending_insights=tuple(insights[max(0, len(insights) - limits.pending_insights):]),
        monologue_history=tuple(monologue),
        beliefs=beliefs,
        reviews=reviews,
        edges=edges,
        events_by_type=Counter(event.type for event in log),
        thinker_failures=sum(isinstance(event.payload, ThinkerFailed) for event in log),
    )
    return out


@given(event_sequences(), any_limits)
@settings(max_examples=150, deadline=None)
def test_state_agrees_with_a_model_of_the_log(log: list[Event], limits: Limits) -> None:
    state = fold(log, limits=limits)
    expected = model(log, limits)
    assert (state.last_seq, state.last_timestamp) == (len(log), log[-1].timestamp)
    assert state.turn_count == expected["turn_count"]
    assert state.recent_turns == expected["recent_turns"]
    assert (state.narrative, state.narrative_seq) == (expected["narrative"], expected["narrative_seq"])
    assert (state.threads, state.threads_seq) == (expected["threads"], expected["threads_seq"])
    assert state.monologue_history == expected["monologue_history"]
    assert state.monologue_tokens == history_tokens(state.monologue_history)
    assert state.pending_insights == expected["pending_insights"]
    assert state.portrait == expected["portrait"]
    times = expected["reflection_times"]
    assert state.reflection_times == tuple(times[max(0, len(times) - limits.reflection_times):])
    assert (state.counters.beliefs_decayed, state.counters.beliefs_forgotten) == (expected["decayed"], expected["forgotten"])
    assert (state.last_reflection.seq if state.last_reflection else None) == expected["last_reflection_seq"]
    assert (state.last_failure.seq if state.last_failure else None) == expected["failure_seq"]
    assert (state.fork.seq if state.fork else None) == expected["fork_seq"]
    assert state.counters.turns_since_reflection == expected["turns_since_reflection"]
    assert state.counters.thinker_failures == expected["thinker_failures"]
    assert dict(state.counters.events_by_type) == dict(expected["events_by_type"])

    assert set(state.beliefs) == set(expected["beliefs"])
    for belief_id, want in expected["beliefs"].items():
        belief = state.beliefs[belief_id]
        assert belief.confidence == pytest.approx(want["confidence"], abs=1e-12)
        assert (belief.memory_type, belief.created, belief.last_reinforced, belief.recall_count) == (
            want["type"], want["created"], want["reinforced"], want["recalls"],
        )
        assert (belief.about, belief.kind, belief.source_turn, belief.embedding, belief.embedding_model) == want["memory"]
    assert {key: item.seq for key, item in state.review_items.items()} == expected["reviews"]
    assert set(state.edges) == set(expected["edges"])
    for key, want in expected["edges"].items():
        edge = state.edges[key]
        assert edge.confidence == pytest.approx(want["confidence"], abs=1e-12)
        assert (edge.origin, edge.last_reinforced, edge.last_changed) == (want["origin"], want["reinforced"], want["changed"])
        assert edge.contradicted_by == tuple(sorted(want["flags"]))


# ---------------------------------------------------------------------------------- bounds


@given(event_sequences(max_size=40), any_limits)
@PROPERTY
def test_windows_never_exceed_their_limits(log: list[Event], limits: Limits) -> None:
    state = initial_state(log[0].key, limits)
    budget = limits.monologue_token_budget
    for event in log:
        state = apply(state, event)
        assert len(state.recent_turns) <= limits.recent_turns
        assert len(state.pending_insights) <= limits.pending_insights
        assert state.monologue_tokens == history_tokens(state.monologue_history)
        assert state.monologue_tokens * 100 <= budget * limits.monologue_trim_above_percent


@pytest.mark.parametrize("count", [0, 1, 19, 20, 21, 45])
def test_recent_turns_keep_the_last_twenty(count: int) -> None:
    state = fold(log_of(*(Turn(f"u{n}", f"r{n}") for n in range(count))), initial_state(KEY))
    assert Limits().recent_turns == 20
    assert state.turn_count == count
    assert [turn.user_message for turn in state.recent_turns] == [f"u{n}" for n in range(max(0, count - 20), count)]


def test_zero_recent_turns_keeps_none() -> None:
    state = fold(log_of(Turn("u", "r"), Turn("u2", "r2")), limits=Limits(recent_turns=0))
    assert state.recent_turns == () and state.turn_count == 2


def test_estimate_tokens_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]
    assert Threads("abcd", "abcde", "").tokens == 3


def thoughts(tokens: int) -> Monologue:
    """A monologue whose threads estimate to exactly ``tokens``."""
    return Monologue("a" * (4 * tokens), "", "")


def history_after(*sizes: int) -> tuple[list[int], int]:
    state = fold(log_of(*(thoughts(size) for size in sizes)))
    return [entry.seq for entry in state.monologue_history], state.monologue_tokens


@pytest.mark.parametrize(
    ("sizes", "kept_seqs", "tokens"),
    [
        ((3000, 3000, 3000), [1, 2, 3], 9000),  # exactly 90% of 10,000: no cut
        ((3000, 3000, 3001), [2, 3], 6001),  # 9,001 > 90%: cut oldest first to <= 80%
        ((3000, 3000, 3000, 3000), [3, 4], 6000),
        ((1000, 1000, 7000), [1, 2, 3], 9000),
        ((1001, 1000, 7000), [2, 3], 8000),  # the cut stops at exactly 80%
        ((1000, 1000, 7001), [3], 7001),
        ((9001,), [], 0),  # one entry over the high-water mark on its own goes too
        ((8000, 1000), [1, 2], 9000),
        ((8000, 1001), [2], 1001),
    ],
)
def test_monologue_history_is_cut_from_90_to_80_percent(sizes: tuple[int, ...], kept_seqs: list[int], tokens: int) -> None:
    assert Limits().monologue_token_budget == 10_000
    assert history_after(*sizes) == (kept_seqs, tokens)


def test_latest_threads_survive_a_cut_of_the_history() -> None:
    state = fold(log_of(thoughts(9500)))
    assert state.monologue_history == ()
    assert state.threads == Threads("a" * 38_000, "", "") and state.threads_seq == 1


def test_append_bounded_matches_the_marks_for_an_odd_budget() -> None:
    # Integer percentages: budget 333 -> high-water 299.7, low-water 266.4.
    history: tuple[MonologueEntry, ...] = ()
    total = 0
    for seq, size in enumerate([100, 100, 99], start=1):
        entry = MonologueEntry(seq, Threads("a" * (4 * size), "", ""))
        history, total = append_bounded(history, total, entry, budget=333, trim_above_percent=90, trim_to_percent=80)
    assert (len(history), total) == (3, 299)
    entry = MonologueEntry(4, Threads("a", "", ""))
    history, total = append_bounded(history, total, entry, budget=333, trim_above_percent=90, trim_to_percent=80)
    assert ([item.seq for item in history], total) == ([2, 3, 4], 200)


# ------------------------------------------------------------------------------- failures


@given(event_sequences(max_size=25), st.data())
@PROPERTY
def test_a_thinker_failure_changes_nothing_but_the_failure_record(log: list[Event], data: st.DataObject) -> None:
    state = fold(log)
    failure = ThinkerFailed(
        stage=data.draw(st.sampled_from(["monologue", "controller", "reflection", "talker"])),
        error_type="TimeoutError",
        message="the model did not answer",
        attempt=data.draw(st.integers(1, 5)),
    )
    after = apply(state, make_event(state.key, state.next_seq, failure, timestamp=log[-1].timestamp + 1))
    assert (after.narrative, after.narrative_seq) == (state.narrative, state.narrative_seq)
    assert (after.threads, after.threads_seq) == (state.threads, state.threads_seq)
    assert after.monologue_history == state.monologue_history
    assert after.portrait == state.portrait
    assert after.last_failure is not None and after.last_failure.seq == state.next_seq
    assert after.last_failure.stage == failure.stage
    assert after.counters.thinker_failures == state.counters.thinker_failures + 1
    assert after.counters.turns_since_reflection == state.counters.turns_since_reflection
    unchanged = replace(
        after,
        last_seq=state.last_seq,
        last_timestamp=state.last_timestamp,
        last_failure=state.last_failure,
        counters=state.counters,
    )
    assert unchanged == state


def test_failure_after_a_narrative_keeps_the_narrative() -> None:
    state = fold(
        log_of(
            Turn("hi", "hello"),
            Monologue("r", "m", "g"),
            Narrative("I am helping a user who greeted me."),
            ThinkerFailed("monologue", "ValueError", "malformed JSON", for_turn=2),
            ThinkerFailed("controller", "ValueError", "malformed JSON", attempt=2, for_turn=2),
        )
    )
    assert state.narrative == "I am helping a user who greeted me." and state.narrative_seq == 3
    assert state.threads == Threads("r", "m", "g")
    assert state.last_failure is not None
    assert state.last_failure.attempt == 2 and state.counters.thinker_failures == 2


# ------------------------------------------------------------------------------ snapshots


def repacked(data: bytes, **changes: Any) -> bytes:
    envelope = msgpack.unpackb(data, raw=False)
    for name, value in changes.items():
        if value is ...:
            del envelope[name]
        else:
            envelope[name] = value
    return msgpack.packb(envelope, use_bin_type=True)


SAMPLE_LOG = log_of(
    Turn("hi", "hello"),
    Monologue("r", "m", "g"),
    Narrative("n"),
    Belief("b", "assert", "s"),
    Edge("a", "causes", "b", operation="contradict", contradicts=("a", "prevents", "b")),
    Insight("i"),
    Reflection("snap", True),
    Fork("main", 3),
    ThinkerFailed("talker", "E", "m"),
)


@pytest.mark.parametrize("version", [PROJECTION_VERSION + 1, PROJECTION_VERSION - 1, "1", None, ...], ids=repr)
def test_a_snapshot_of_another_projection_version_is_stale(version: Any) -> None:
    data = snapshot_bytes(fold(SAMPLE_LOG))
    assert state_from_snapshot(data) == fold(SAMPLE_LOG)
    with pytest.raises(StaleSnapshot) as caught:
        state_from_snapshot(repacked(data, version=version))
    assert caught.value.expected == PROJECTION_VERSION
    assert caught.value.found == (None if version is ... else version)
    assert isinstance(caught.value, SnapshotError)


def test_bytes_that_are_not_a_snapshot_are_corrupt() -> None:
    data = snapshot_bytes(fold(SAMPLE_LOG))
    for bad in (b"", b"\xc1", data[:-1], data[: len(data) // 2], msgpack.packb([1, 2]), repacked(data, projection="beliefs")):
        with pytest.raises(CorruptSnapshot):
            state_from_snapshot(bad)
    envelope = msgpack.unpackb(data, raw=False)
    del envelope["state"]["edges"]
    with pytest.raises(CorruptSnapshot):
        state_from_snapshot(msgpack.packb(envelope))
    envelope = msgpack.unpackb(data, raw=False)
    envelope["state"]["limits"] = envelope["state"]["limits"][:-1]
    with pytest.raises(CorruptSnapshot):
        state_from_snapshot(msgpack.packb(envelope))


@given(st.sampled_from(sorted(msgpack.unpackb(snapshot_bytes(fold(SAMPLE_LOG)), raw=False)["state"])), msgpack_values)
@settings(max_examples=200, deadline=None)
def test_a_mangled_snapshot_loads_or_raises_snapshot_error(field: str, value: Any) -> None:
    envelope = msgpack.unpackb(snapshot_bytes(fold(SAMPLE_LOG)), raw=False)
    envelope["state"][field] = value
    try:
        state = state_from_snapshot(msgpack.packb(envelope, use_bin_type=True))
    except SnapshotError:
        return
    assert isinstance(state, ConversationState)
