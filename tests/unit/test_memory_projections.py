"""Beliefs and causal edges in the projection: the design's numbers at their boundaries.

Confidence stays within [0, cap]; belief decay is monotone and floored, by memory type, with
recalls extending the half-life; reinforcement steps and caps; a contradiction keeps both beliefs
and opens a review; edges start by origin, decay unless recently reinforced, and become pruning
candidates only after 180 days below 0.10.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.envelope import Event
from mirror.events.payloads import (
    Belief,
    Edge,
    Insight,
    Reflection,
)
from mirror.projections.beliefs import (
    BeliefState,
    ReviewItem,
    effective_confidence,
    half_life_days,
    strength,
)
from mirror.projections.constants import (
    BELIEF_HALF_LIFE_DAYS,
    BELIEF_STRENGTH_FLOOR,
    CONFIDENCE_CAP,
    EDGE_CONFIDENCE_FLOOR,
    EDGE_DECAY_EXEMPT_DAYS,
    EDGE_HALF_LIFE_DAYS,
    EDGE_INITIAL_CONFIDENCE,
    EDGE_PRUNE_AFTER_DAYS,
    EDGE_PRUNE_BELOW,
    REINFORCE_STEP,
    SECONDS_PER_DAY,
)
from mirror.projections.conversation import apply, fold
from mirror.projections.edges import EdgeState, edge_confidence, prune_candidates
from mirror.projections.state import initial_state
from tests.support.event_log import T0, log_of
from tests.support.strategies import BELIEF_POOL, MEMORY_TYPES, event_sequences

DAY = SECONDS_PER_DAY
PROPERTY = settings(max_examples=100, deadline=None)



# ------------------------------------------------------------------------ confidence bounds

nows = st.one_of(
    st.floats(min_value=-1e11, max_value=1e11, allow_nan=False),
    st.sampled_from([0.0, T0]),
)


@given(event_sequences(max_size=40), st.lists(nows, min_size=1, max_size=3))
@PROPERTY
def test_confidence_stays_within_zero_and_the_cap(log: list[Event], times: list[float]) -> None:
    state = initial_state(log[0].key)
    for event in log:
        state = apply(state, event)
        for belief in state.beliefs.values():
            assert 0.0 <= belief.confidence <= CONFIDENCE_CAP
        for edge in state.edges.values():
            assert 0.0 <= edge.confidence <= CONFIDENCE_CAP
    for now in (*times, log[-1].timestamp, log[-1].timestamp + 365 * DAY):
        for belief in state.beliefs.values():
            assert 0.0 <= effective_confidence(belief, now) <= belief.confidence
        for edge in state.edges.values():
            assert min(EDGE_CONFIDENCE_FLOOR, edge.confidence) <= edge_confidence(edge, now) <= edge.confidence


# ------------------------------------------------------------------------------ belief decay

belief_states = st.builds(
    BeliefState,
    belief_id=st.just("b"),
    statement=st.just(""),
    memory_type=st.sampled_from(MEMORY_TYPES),
    confidence=st.floats(0.0, CONFIDENCE_CAP),
    created=st.just(T0),
    last_reinforced=st.floats(min_value=0.0, max_value=4e9),
    recall_count=st.integers(0, 6),
)
instants = st.floats(min_value=-1e10, max_value=1e11, allow_nan=False)


@given(belief_states, instants, instants)
@settings(max_examples=300, deadline=None)
def test_belief_decay_is_monotone_and_floored(belief: BeliefState, first: float, second: float) -> None:
    early, late = sorted((first, second))
    floor = BELIEF_STRENGTH_FLOOR[belief.memory_type]
    assert floor <= strength(belief, late) <= strength(belief, early) <= 1.0
    assert effective_confidence(belief, late) <= effective_confidence(belief, early)
    assert effective_confidence(belief, late) >= belief.confidence * floor


def test_belief_decay_constants_are_the_designs() -> None:
    assert dict(BELIEF_HALF_LIFE_DAYS) == {"standard": 56, "emotional": 168, "operational": 28, "location": 14}
    assert dict(BELIEF_STRENGTH_FLOOR) == {"standard": 0.10, "emotional": 0.10, "operational": 0.02, "location": 0.01}


@pytest.mark.parametrize(
    ("memory_type", "half_life", "floor"),
    [("standard", 56, 0.10), ("emotional", 168, 0.10), ("operational", 28, 0.02), ("location", 14, 0.01)],
)
def test_belief_half_life_and_floor_by_type(memory_type: str, half_life: float, floor: float) -> None:
    belief = BeliefState("b", "s", memory_type, 0.8, created=T0, last_reinforced=T0)  # type: ignore[arg-type]  # parametrised with the memory types' literals as plain str
    assert half_life_days(belief) == half_life
    assert strength(belief, T0) == 1.0
    assert strength(belief, T0 - DAY) == 1.0  # a clock behind never makes a belief stronger than fresh
    assert strength(belief, T0 + half_life * DAY) == pytest.approx(0.5)
    assert strength(belief, T0 + 2 * half_life * DAY) == pytest.approx(0.25)
    assert effective_confidence(belief, T0 + half_life * DAY) == pytest.approx(0.4)
    assert strength(belief, T0 + 50 * half_life * DAY) == floor
    # Recalled three times or more, the half-life doubles; twice is not enough.
    assert half_life_days(replace(belief, recall_count=2)) == half_life
    recalled = replace(belief, recall_count=3)
    assert half_life_days(recalled) == 2 * half_life
    assert strength(recalled, T0 + half_life * DAY) == pytest.approx(0.5**0.5)
    assert strength(recalled, T0 + 2 * half_life * DAY) == pytest.approx(0.5)
    assert half_life_days(replace(belief, recall_count=9)) == 2 * half_life


def test_recall_events_extend_the_half_life_without_resetting_decay() -> None:
    log = log_of(
        Belief("b", "assert", "tea is hot", "operational", 0.7),
        *(Belief("b", "recall") for _ in range(3)),
        step=DAY,
    )
    after_two = fold(log[:3]).beliefs["b"]
    after_three = fold(log).beliefs["b"]
    assert (after_two.recall_count, half_life_days(after_two)) == (2, 28)
    assert (after_three.recall_count, half_life_days(after_three)) == (3, 56)
    assert after_three.last_reinforced == T0 and after_three.confidence == 0.7


def test_recalling_an_unknown_belief_changes_nothing() -> None:
    state = fold(log_of(Insight("x"), Belief("ghost", "recall")))
    assert "ghost" not in state.beliefs


# --------------------------------------------------------------------------- reinforcement


def test_belief_reinforcement_adds_a_step_and_caps() -> None:
    log = log_of(Belief("b", "assert", confidence=0.6), Belief("b", "reinforce"), Belief("b", "assert"), step=DAY)
    states = [fold(log[:n]) for n in (1, 2, 3)]
    assert [state.beliefs["b"].confidence for state in states] == pytest.approx([0.6, 0.65, 0.70])
    assert states[1].beliefs["b"].last_reinforced == T0 + DAY
    assert states[1].beliefs["b"].created == T0
    near_cap = fold(log_of(Belief("b", "assert", confidence=0.97), Belief("b", "reinforce")))
    assert near_cap.beliefs["b"].confidence == CONFIDENCE_CAP
    many = fold(log_of(Belief("b", "assert", confidence=0.5), *(Belief("b", "reinforce") for _ in range(30))))
    assert many.beliefs["b"].confidence == CONFIDENCE_CAP


@pytest.mark.parametrize("confidence", [1.5, float("inf"), -0.3, float("-inf"), float("nan")])
def test_asserted_confidence_is_clamped(confidence: float) -> None:
    belief = fold(log_of(Belief("b", "assert", confidence=confidence))).beliefs["b"]
    assert 0.0 <= belief.confidence <= CONFIDENCE_CAP


def test_reinforcing_an_unknown_belief_creates_it() -> None:
    state = fold(log_of(Belief("b", "reinforce", "new to this branch", confidence=0.6)))
    assert state.beliefs["b"].confidence == 0.6


def test_consistent_boosts_related_beliefs_without_resetting_their_clocks() -> None:
    log = log_of(Belief("a", "assert", confidence=0.5), Belief("b", "consistent", confidence=0.6, related=("a", "a", "b", "zz")), step=DAY)
    state = fold(log)
    assert state.beliefs["a"].confidence == pytest.approx(0.52)  # boosted once, not per repeat
    assert state.beliefs["a"].last_reinforced == T0
    assert state.beliefs["b"].confidence == 0.6
    assert "zz" not in state.beliefs


# ---------------------------------------------------------------------------- contradiction


def test_contradiction_keeps_both_beliefs_and_opens_a_review() -> None:
    first = fold(log_of(Belief("sky-blue", "assert", "the sky is blue", confidence=0.8)))
    log = log_of(
        Belief("sky-blue", "assert", "the sky is blue", confidence=0.8),
        Belief("sky-green", "contradict", "the sky is green", confidence=0.6, related=("sky-blue",)),
        Belief("sky-green", "contradict", related=("sky-blue",)),
    )
    opened = fold(log[:2])
    assert opened.beliefs["sky-blue"] == first.beliefs["sky-blue"]  # untouched, not overwritten
    assert opened.beliefs["sky-green"].statement == "the sky is green"
    assert dict(opened.review_items) == {("sky-green", "sky-blue"): ReviewItem("sky-green", "sky-blue", 2)}
    again = fold(log)
    assert dict(again.review_items) == dict(opened.review_items)  # the first item stays, not a second one
    assert again.beliefs["sky-blue"] == first.beliefs["sky-blue"]
    assert again.beliefs["sky-green"].confidence == pytest.approx(0.65)


@given(event_sequences(max_size=40))
@PROPERTY
def test_beliefs_leave_only_by_a_reflections_forget_and_reviews_never(log: list[Event]) -> None:
    state = initial_state(log[0].key)
    for event in log:
        after = apply(state, event)
        payload = event.payload
        forgotten = {decision[0] for decision in payload.decisions if decision[2] == "forget"} \
            if isinstance(payload, Reflection) else set()
        assert set(state.beliefs) - forgotten <= set(after.beliefs)
        assert not forgotten & set(after.beliefs)  # an applied forget drops the belief from the state (not the log)
        assert all(after.review_items[key] == item for key, item in state.review_items.items())
        assert set(state.edges) <= set(after.edges)
        state = after
    contradictions = {
        (event.payload.belief_id, other)
        for event in log
        if isinstance(event.payload, Belief) and event.payload.operation == "contradict"
        for other in event.payload.related
        if other != event.payload.belief_id
    }
    assert set(state.review_items) == contradictions
    assert set(state.beliefs) <= set(BELIEF_POOL)


def test_contradictory_edges_are_flagged_not_merged() -> None:
    rain_wet = ("rain", "causes", "wet")
    rain_dry = ("rain", "prevents", "wet")
    state = fold(
        log_of(
            Edge(*rain_wet, origin="world"),
            Edge(*rain_dry, operation="contradict", origin="conversation", contradicts=rain_wet),
        )
    )
    assert set(state.edges) == {rain_wet, rain_dry}
    assert state.edges[rain_wet].confidence == 0.75 and state.edges[rain_dry].confidence == 0.6
    assert state.edges[rain_wet].contradicted_by == (rain_dry,)
    assert state.edges[rain_dry].contradicted_by == (rain_wet,)
    assert state.edges[rain_wet].last_reinforced == T0  # flagging is not reinforcing
    assert state.edges[rain_wet].last_changed == T0 + 1


# ------------------------------------------------------------------------------------ edges


@pytest.mark.parametrize(("origin", "expected"), [("conversation", 0.6), ("world", 0.75), ("data", 0.6), ("user_confirmed", 0.9)])
def test_edge_initial_confidence_by_origin(origin: str, expected: float) -> None:
    assert EDGE_INITIAL_CONFIDENCE[origin] == expected
    state = fold(log_of(Edge("a", "causes", "b", origin=origin)))  # type: ignore[arg-type]  # parametrised with the origins' literals as plain str
    assert state.edges[("a", "causes", "b")].confidence == expected
    assert state.edges[("a", "causes", "b")].origin == origin


def test_edge_reinforcement_adds_a_step_caps_and_keeps_origin() -> None:
    log = log_of(
        Edge("a", "causes", "b", origin="user_confirmed"),
        Edge("a", "causes", "b", operation="reinforce", origin="data"),
        Edge("a", "causes", "b", operation="reinforce"),
        Edge("a", "causes", "b"),
    )
    confidences = [fold(log[:n]).edges[("a", "causes", "b")].confidence for n in (1, 2, 3, 4)]
    assert confidences == pytest.approx([0.9, 0.95, 0.99, 0.99])
    assert fold(log).edges[("a", "causes", "b")].origin == "user_confirmed"
    assert REINFORCE_STEP == 0.05 and CONFIDENCE_CAP == 0.99


def test_edge_decay_exemption_half_life_and_floor() -> None:
    edge = fold(log_of(Edge("a", "causes", "b"))).edges[("a", "causes", "b")]
    assert (EDGE_DECAY_EXEMPT_DAYS, EDGE_HALF_LIFE_DAYS, EDGE_CONFIDENCE_FLOOR) == (7, 90, 0.15)
    assert edge_confidence(edge, T0) == 0.6
    assert edge_confidence(edge, T0 + 7 * DAY) == 0.6  # exempt for the first seven days
    assert edge_confidence(edge, T0 + 7 * DAY + 1) < 0.6
    assert edge_confidence(edge, T0 + 7 * DAY + 1) == pytest.approx(0.6, abs=1e-6)  # no step on day 7
    assert edge_confidence(edge, T0 + 97 * DAY) == pytest.approx(0.3)  # one half-life after the exemption
    assert edge_confidence(edge, T0 + 187 * DAY) == pytest.approx(0.15)
    assert edge_confidence(edge, T0 + 1_000 * DAY) == EDGE_CONFIDENCE_FLOOR


def test_reinforcing_an_edge_restarts_its_exemption() -> None:
    log = log_of(Edge("a", "causes", "b"), (Edge("a", "causes", "b", operation="reinforce"), T0 + 100 * DAY))
    before = fold(log[:1]).edges[("a", "causes", "b")]
    after = fold(log).edges[("a", "causes", "b")]
    assert edge_confidence(before, T0 + 106 * DAY) < 0.3
    assert after.confidence == pytest.approx(0.65)
    assert edge_confidence(after, T0 + 106 * DAY) == after.confidence
    assert edge_confidence(after, T0 + 108 * DAY) < after.confidence


edge_states = st.builds(
    EdgeState,
    src=st.just("a"),
    relation=st.just("causes"),
    dst=st.just("b"),
    origin=st.just("conversation"),
    confidence=st.floats(0.0, CONFIDENCE_CAP),
    created=st.just(0.0),
    last_reinforced=st.floats(min_value=0.0, max_value=4e9),
    last_changed=st.floats(min_value=0.0, max_value=4e9),
)


@given(edge_states, instants, instants)
@settings(max_examples=300, deadline=None)
def test_edge_decay_is_monotone_exempt_and_floored(edge: EdgeState, first: float, second: float) -> None:
    early, late = sorted((first, second))
    assert min(EDGE_CONFIDENCE_FLOOR, edge.confidence) <= edge_confidence(edge, late)
    assert edge_confidence(edge, late) <= edge_confidence(edge, early) <= edge.confidence
    if late <= edge.last_reinforced + EDGE_DECAY_EXEMPT_DAYS * DAY:
        assert edge_confidence(edge, late) == edge.confidence


def test_prune_candidates_need_low_confidence_for_180_days() -> None:
    low = EdgeState("a", "r", "b", "data", 0.05, created=T0, last_reinforced=T0, last_changed=T0)
    high = EdgeState("c", "r", "d", "data", 0.6, created=T0, last_reinforced=T0, last_changed=T0)
    assert (EDGE_PRUNE_BELOW, EDGE_PRUNE_AFTER_DAYS) == (0.10, 180)
    edges = {low.key: low, high.key: high}
    assert prune_candidates(edges, T0 + 179 * DAY) == ()
    assert prune_candidates(edges, T0 + 180 * DAY) == (low,)
    assert prune_candidates(edges, T0 + 5_000 * DAY) == (low,)  # the floor keeps `high` above 0.10
    touched = replace(low, last_changed=T0 + 100 * DAY)
    assert prune_candidates([touched], T0 + 200 * DAY) == ()
    assert prune_candidates([touched], T0 + 280 * DAY) == (touched,)


@given(st.lists(edge_states, max_size=6), instants)
@settings(max_examples=150, deadline=None)
def test_prune_candidates_are_exactly_the_rule(edge_list: list[EdgeState], now: float) -> None:
    edges = [replace(edge, src=f"n{index}") for index, edge in enumerate(edge_list)]
    chosen = prune_candidates(edges, now)
    for edge in edges:
        rule = edge_confidence(edge, now) < EDGE_PRUNE_BELOW and now - edge.last_changed >= EDGE_PRUNE_AFTER_DAYS * DAY
        assert (edge in chosen) == rule
    assert [edge.key for edge in chosen] == sorted(edge.key for edge in chosen)
