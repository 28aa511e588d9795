"""Memory in the projection: the properties issue 12 names for beliefs, recalls and reviews.

Each property drives the real fold over generated logs; none re-derives the arithmetic by
calling the function under test on both sides.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Insight, Recall
from mirror.events.vectors import vector_to_bytes
from mirror.projections.beliefs import half_life_days, review_id, strength
from mirror.projections.constants import (
    BELIEF_HALF_LIFE_DAYS,
    BELIEF_STRENGTH_FLOOR,
    CONFIDENCE_CAP,
    RECALLS_TO_EXTEND_HALF_LIFE,
    REINFORCE_STEP,
    SECONDS_PER_DAY,
)
from mirror.projections.conversation import apply, fold
from mirror.projections.snapshot import snapshot_bytes, state_from_snapshot
from mirror.projections.state import ConversationState
from tests.support import event_log
from tests.support.event_log import T0
from tests.support.strategies import BELIEF_POOL, MEMORY_TYPES, belief_payloads, recall_payloads

DAY = SECONDS_PER_DAY
KEY = StreamKey("acme", "memory-1")
PROPERTY = settings(max_examples=150, deadline=None)


log_of = functools.partial(event_log.log_of, key=KEY)


pooled_beliefs = belief_payloads(
    ids=st.sampled_from(BELIEF_POOL), confidence=st.floats(allow_nan=True), text=st.text(max_size=8)
)
pooled_recalls = recall_payloads(ids=st.sampled_from((*BELIEF_POOL, "ghost")), text=st.text(max_size=8))
memory_logs = st.lists(pooled_beliefs | pooled_recalls, min_size=1, max_size=30)
"""Any sequence of belief and recall events over a small pool of ids."""


# ------------------------------------------------------------------------------------ decay


@given(
    memory_type=st.sampled_from(MEMORY_TYPES),
    recalls=st.integers(0, 6),
    ages=st.lists(st.floats(min_value=0, max_value=5_000 * DAY), min_size=2, max_size=6),
)
@PROPERTY
def test_decay_with_recall_extended_half_lives_never_rises_and_keeps_its_floor(
    memory_type: str, recalls: int, ages: list[float]
) -> None:
    # The half-life is extended by Recall events folded from the log, not set by hand.
    log = log_of(Belief("b", "assert", "tea", memory_type, 0.8), *(Recall("q", belief_ids=("b",)) for _ in range(recalls)))  # type: ignore[arg-type]
    belief = fold(log).beliefs["b"]
    assert belief.recall_count == recalls
    extended = recalls >= RECALLS_TO_EXTEND_HALF_LIFE
    assert half_life_days(belief) == BELIEF_HALF_LIFE_DAYS[memory_type] * (2 if extended else 1)
    floor = BELIEF_STRENGTH_FLOOR[memory_type]
    strengths = [strength(belief, belief.last_reinforced + age) for age in sorted(ages)]
    assert all(floor <= value <= 1.0 for value in strengths)
    assert all(later <= earlier for earlier, later in zip(strengths, strengths[1:], strict=False))
    # Recalled often, a belief never decays faster than the same belief never recalled.
    unrecalled = fold(log[:1]).beliefs["b"]
    for age in ages:
        assert strength(belief, belief.last_reinforced + age) >= strength(unrecalled, unrecalled.last_reinforced + age)


def test_the_third_recall_event_doubles_the_half_life() -> None:
    log = log_of(Belief("b", "assert", "tea", "location", 0.8), *(Recall("q", belief_ids=("b", "b")) for _ in range(3)))
    counts = [fold(log[: n + 1]).beliefs["b"].recall_count for n in range(4)]
    assert counts == [0, 1, 2, 3]  # an id named twice in one recall is one recall
    assert half_life_days(fold(log[:3]).beliefs["b"]) == 14
    assert half_life_days(fold(log).beliefs["b"]) == 28


# ---------------------------------------------------------------------------- reinforcement


@given(initial=st.floats(0.0, 1.0), steps=st.integers(0, 40))
@PROPERTY
def test_reinforcement_adds_its_step_and_caps_at_0_99(initial: float, steps: int) -> None:
    log = log_of(Belief("b", "assert", confidence=initial), *(Belief("b", "reinforce") for _ in range(steps)))
    confidences = [state.beliefs["b"].confidence for state in _states(log)]
    assert CONFIDENCE_CAP == 0.99
    for before, after in zip(confidences, confidences[1:], strict=False):
        assert after == pytest.approx(min(CONFIDENCE_CAP, before + REINFORCE_STEP))
        assert after <= CONFIDENCE_CAP
    if initial + steps * REINFORCE_STEP >= CONFIDENCE_CAP + 1e-9:
        assert confidences[-1] == CONFIDENCE_CAP


@given(memory_logs)
@PROPERTY
def test_no_belief_event_takes_confidence_over_the_cap(payloads: list[Any]) -> None:
    for state in _states(log_of(*payloads, step=DAY)):
        assert all(0.0 <= belief.confidence <= CONFIDENCE_CAP for belief in state.beliefs.values())


# ---------------------------------------------------------------------------- contradiction


@given(memory_logs)
@PROPERTY
def test_a_contradiction_never_deletes_a_belief(payloads: list[Any]) -> None:
    log = log_of(*payloads)
    state = fold(log)
    asserted = {p.belief_id for p in payloads if isinstance(p, Belief) and p.operation != "recall"}
    assert set(state.beliefs) == asserted
    # The beliefs a contradiction opposes are left exactly as they were: never overwritten.
    previous: ConversationState | None = None
    for current, event in zip(_states(log), log, strict=True):
        payload = event.payload
        if previous is not None and isinstance(payload, Belief) and payload.operation == "contradict":
            for other in set(payload.related) - {payload.belief_id}:
                assert current.beliefs.get(other) == previous.beliefs.get(other)
        previous = current


# ---------------------------------------------------------------------------------- recalls


def _without_bookkeeping(state: ConversationState) -> ConversationState:
    return replace(state, last_seq=0, last_timestamp=None, counters=replace(state.counters, events_by_type={}))  # type: ignore[arg-type]


@given(memory_logs, recall_payloads(ids=st.sampled_from(("ghost", "nobody", "b9")), text=st.text(max_size=8)))
@PROPERTY
def test_a_recall_of_unknown_ids_changes_nothing_but_counters(payloads: list[Any], recall: Recall) -> None:
    before = fold(log_of(*payloads))
    after = apply(before, make_event(KEY, before.last_seq + 1, recall, timestamp=T0 + 10 * DAY))
    assert _without_bookkeeping(after) == _without_bookkeeping(before)
    assert after.counters.events_by_type["recall"] == before.counters.events_by_type.get("recall", 0) + 1
    assert after.last_seq == before.last_seq + 1


@given(memory_logs, pooled_recalls)
@PROPERTY
def test_a_recall_counts_once_per_known_belief_and_touches_nothing_else(payloads: list[Any], recall: Recall) -> None:
    before = fold(log_of(*payloads))
    event = make_event(KEY, before.last_seq + 1, recall, timestamp=T0 + 10 * DAY)
    after = apply(before, event)
    assert set(after.beliefs) == set(before.beliefs)
    for belief_id, belief in before.beliefs.items():
        bump = 1 if belief_id in recall.belief_ids else 0
        recalled = event.turn if bump else belief.last_recalled_turn  # the turn it was last recalled at
        assert after.beliefs[belief_id] == replace(belief, recall_count=belief.recall_count + bump,
                                                   last_recalled_turn=recalled)
    assert after.review_items == before.review_items and after.edges == before.edges


def test_a_recall_event_survives_a_snapshot() -> None:
    log = log_of(Belief("b", "assert", "tea"), Recall("tea?", belief_ids=("b",)), Recall("tea!", belief_ids=("b",)))
    resumed = fold(log[2:], state_from_snapshot(snapshot_bytes(fold(log[:2]))))
    assert resumed == fold(log)
    assert resumed.beliefs["b"].recall_count == 2


# --------------------------------------------------------------------------- memory fields


def test_a_belief_keeps_what_its_creating_event_said() -> None:
    vector = vector_to_bytes([0.25, -1.0, 3.5])
    log = log_of(
        Belief("b", "assert", "Ann is allergic to nuts", about="Ann", kind="open_loop", source_turn=4,
               embedding=vector, embedding_model="minilm", embedding_fingerprint="ab12"),
        Belief("b", "reinforce", "Ann cannot eat nuts", about="someone else", embedding=b"\x00" * 4, embedding_model="x"),
    )
    belief = fold(log).beliefs["b"]
    assert (belief.statement, belief.about, belief.kind, belief.source_turn) == ("Ann is allergic to nuts", "Ann", "open_loop", 4)
    assert (belief.embedding, belief.embedding_model) == (vector, "minilm")
    assert belief.confidence == pytest.approx(0.65)
    assert state_from_snapshot(snapshot_bytes(fold(log))).beliefs["b"] == belief


@given(st.text(max_size=20), st.text(max_size=20))
@settings(max_examples=100, deadline=None)
def test_review_ids_are_stable_ordered_and_url_safe(belief: str, opposed: str) -> None:
    first = review_id(belief, opposed)
    assert first == review_id(belief, opposed)
    assert re.fullmatch(r"rv-[0-9a-f]{16}", first)
    if belief != opposed:
        assert first != review_id(opposed, belief)  # who contradicted whom is part of the item


@given(st.tuples(st.text(max_size=6), st.text(max_size=6)), st.tuples(st.text(max_size=6), st.text(max_size=6)))
@settings(max_examples=300, deadline=None)
def test_review_ids_of_different_pairs_differ(one: tuple[str, str], other: tuple[str, str]) -> None:
    """No two pairs share an id, NULs in the ids included (the pair ("", NUL) against (NUL, ""))."""
    assert (review_id(*one) == review_id(*other)) == (one == other)


def test_review_ids_of_pairs_with_a_nul_differ_and_mirrors_ids_keep_theirs() -> None:
    assert review_id("", "\x00") != review_id("\x00", "")
    # The ids Mirror writes hash as before (the golden memory log's recalls name these).
    assert review_id("green", "blue") == "rv-" + hashlib.blake2b(b"green\x00blue", digest_size=8).hexdigest()


def test_review_items_carry_the_id_a_recall_names() -> None:
    log = log_of(Belief("blue", "assert", "the sky is blue"), Belief("green", "contradict", "the sky is green", related=("blue",)))
    (item,) = fold(log).review_items.values()
    assert item.review_id == review_id("green", "blue")
    state = fold([*log, make_event(KEY, 3, Recall("sky", belief_ids=("blue",), review_ids=(item.review_id,)), timestamp=T0 + 3)])
    assert state.review_items == fold(log).review_items  # a recall never closes or changes a review


def test_recall_and_insight_only_logs_hold_no_beliefs() -> None:
    state = fold(log_of(Insight("x"), Recall("q", belief_ids=("ghost",)), Belief("ghost", "recall")))
    assert dict(state.beliefs) == {}


def _states(log: list[Event]) -> list[ConversationState]:
    states, state = [], None
    for event in log:
        state = fold([event], state)
        states.append(state)
    return states
