"""Properties of the persona cycle's state and retrieval (Hypothesis):

- hard goals never activate out of order, whatever goal events a log holds;
- emotion intensities and relationship values stay in [0, 1], and the named sets never change;
- a model's update answer, however far out of range, records values in range;
- the retrieval weights (episodes 0.5 similarity + 0.3 recency + 0.2 importance, biography 0.7
  similarity + 0.3 importance) give the documented ranking on constructed examples.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.embeddings.port import pack_vector
from mirror.cognition.persona.background import parse_update
from mirror.cognition.persona.retrieval import (
    biographical_score,
    episodic_score,
    rank_biography,
    rank_episodes,
    recency,
)
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import EmotionUpdate, GoalUpdate, PersonaChosen, RelationshipUpdate
from mirror.projections.conversation import apply
from mirror.projections.persona import EpisodeRecord
from mirror.projections.state import initial_state

KEY = StreamKey("acme", "props")
EMOTIONS = ("joy", "fear", "trust")
DIMENSIONS = ("closeness", "trust")
wide = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9)


def chosen(hard_goals: int = 3, soft_goals: tuple[str, ...] = ("be kind",)) -> PersonaChosen:
    return PersonaChosen(name="P", version="v", card="{}", emotions=EMOTIONS, relationship={"closeness": 0.2, "trust": 0.5},
                         hard_goals=tuple(f"goal {index}" for index in range(hard_goals)), soft_goals=soft_goals)


def fold(payloads: list) -> list:
    """The state after each payload, the ``persona`` event first."""
    state = apply(initial_state(KEY), make_event(KEY, 1, payloads[0], turn=0))
    states = [state]
    for seq, payload in enumerate(payloads[1:], start=2):
        state = apply(state, make_event(KEY, seq, payload, turn=0))
        states.append(state)
    return states


goal_events = st.builds(GoalUpdate, for_turn=st.integers(0, 50), active_hard_goal=st.integers(-2, 6),
                        hard_goal_met=st.booleans(), soft_goals=st.dictionaries(st.sampled_from(("be kind", "x")), wide))


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(hard=st.integers(0, 5), updates=st.lists(goal_events, max_size=30))
def test_hard_goals_never_activate_out_of_order(hard: int, updates: list[GoalUpdate]) -> None:
    states = fold([chosen(hard), *updates])
    for before, after, update in zip(states[:-1], states[1:], updates, strict=True):
        old, new = before.persona.hard_met, after.persona.hard_met
        assert new in (old, old + 1) and new <= hard
        if new == old + 1:  # only the active goal, met, moves on to the next one
            assert update.hard_goal_met and update.active_hard_goal == old
        assert len(after.persona.hard_met_turns) == new
        assert after.persona.active_hard_goal == (f"goal {new}" if new < hard else None)
        assert all(0.0 <= value <= 1.0 for value in after.persona.soft_goals.values())


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(updates=st.lists(st.one_of(
    st.builds(EmotionUpdate, for_turn=st.integers(0, 9), intensities=st.dictionaries(st.sampled_from((*EMOTIONS, "rage")), wide)),
    st.builds(RelationshipUpdate, for_turn=st.integers(0, 9),
              dimensions=st.dictionaries(st.sampled_from((*DIMENSIONS, "awe")), wide)),
), max_size=30))
def test_intensities_stay_in_range_and_the_named_sets_never_change(updates: list) -> None:
    for state in fold([chosen(), *updates]):
        persona = state.persona
        assert tuple(persona.emotions) == EMOTIONS and tuple(persona.relationship) == DIMENSIONS
        assert all(0.0 <= value <= 1.0 for value in (*persona.emotions.values(), *persona.relationship.values()))


@settings(deadline=None)  # a loaded CI machine must not turn a slow example into a failure
@given(values=st.lists(wide, min_size=3, max_size=3), dims=st.lists(wide, min_size=2, max_size=2),
       progress=wide, met=st.booleans())
def test_a_model_answer_out_of_range_is_recorded_in_range(values: list[float], dims: list[float], progress: float,
                                                          met: bool) -> None:
    persona = fold([chosen(hard_goals=0)])[0].persona
    emotion = parse_update("emotion", json.dumps({"intensities": dict(zip(EMOTIONS, values, strict=True)), "reason": "r"}),
                           persona, 0)
    relationship = parse_update("relationship", json.dumps({"dimensions": dict(zip(DIMENSIONS, dims, strict=True)),
                                                            "reason": "r"}), persona, 0)
    goal = parse_update("goal", json.dumps({"active_goal_met": met, "soft_progress": [progress], "reason": "r"}), persona, 0)
    assert isinstance(emotion, EmotionUpdate) and isinstance(relationship, RelationshipUpdate)
    assert isinstance(goal, GoalUpdate)
    assert all(0.0 <= value <= 1.0 for value in (*emotion.intensities.values(), *relationship.dimensions.values(),
                                                 *goal.soft_goals.values()))
    assert goal.hard_goal_met is False  # no hard goal is active: nothing can be met


def unit(angle: float) -> np.ndarray:
    return np.array([np.cos(angle), np.sin(angle)], dtype=np.float32)


def episode(turn: int, angle: float, importance: float) -> EpisodeRecord:
    return EpisodeRecord(seq=turn + 1, turn=turn, text=f"turn {turn}", importance=importance, embedding=pack_vector(unit(angle)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, np.pi), st.floats(0, 1)), min_size=1, max_size=12), st.integers(0, 40))
def test_episodes_rank_by_half_similarity_three_tenths_recency_one_fifth_importance(items: list, extra_turns: int) -> None:
    episodes = [episode(turn, angle, importance) for turn, (angle, importance) in enumerate(items)]
    now = len(items) + extra_turns
    ranked = rank_episodes(unit(0.0), episodes, now, limit=len(episodes))
    # cosine with the query at angle 0 is cos(angle), floored at 0
    expected = {turn: 0.5 * max(0.0, float(np.cos(angle))) + 0.3 * 0.9 ** (now - 1 - turn) + 0.2 * importance
                for turn, (angle, importance) in enumerate(items)}
    assert [turn for turn, _ in ranked] == sorted(expected, key=lambda turn: (-round(expected[turn], 6), -turn))
    for turn, score in ranked:
        assert abs(score - expected[turn]) < 1e-5
        assert abs(score - episodic_score(max(0.0, float(np.cos(items[turn][0]))), recency(now - 1 - turn),
                                          items[turn][1])) < 1e-5


def test_the_weights_decide_the_documented_cases() -> None:
    query = unit(0.0)
    # Nearly the same recency, same importance: the more similar first; same similarity and importance: the newer first.
    assert [turn for turn, _ in rank_episodes(query, [episode(4, 1.4, 0.5), episode(3, 0.1, 0.5)], 9)] == [3, 4]
    assert [turn for turn, _ in rank_episodes(query, [episode(2, 0.3, 0.5), episode(7, 0.3, 0.5)], 9)] == [7, 2]
    # Similarity outweighs recency: an exact match 10 turns old beats an unrelated episode from the last turn
    # (0.5 + 0.3·0.9^10 + 0.1 = 0.70 against 0 + 0.3 + 0.1 = 0.40) ...
    old_match, fresh = episode(0, 0.0, 0.5), episode(10, np.pi / 2, 0.5)
    assert [turn for turn, _ in rank_episodes(query, [fresh, old_match], 11)] == [0, 10]
    # ... but not importance and recency together against a weak match far back.
    weak, vivid = episode(0, 1.2, 0.0), episode(10, np.pi / 2, 1.0)
    assert [turn for turn, _ in rank_episodes(query, [weak, vivid], 11)] == [10, 0]
    # Biography: 0.7 similarity beats 0.3 importance; with no query, importance alone decides.
    persona = fold([PersonaChosen(name="P", version="v", card="{}", biography=("near", "vital"),
                                  biography_importance=(0.0, 1.0),
                                  biography_embeddings=(pack_vector(unit(0.0)), pack_vector(unit(np.pi / 2))))])[0].persona
    assert rank_biography(query, persona) == ((0, biographical_score(1.0, 0.0)), (1, biographical_score(0.0, 1.0)))
    assert [index for index, _ in rank_biography(None, persona)] == [1, 0]
