"""The persona mind's state: who the character is, how it feels, where its goals stand.

Folded from the persona events (:mod:`mirror.events.payloads`: ``persona``, ``interpretation``,
``retrieval``, ``plan``, ``appraisal``, ``emotion``, ``relationship``, ``goal``, ``episode``,
``greeting``) by
the handlers here, which :mod:`mirror.projections.conversation` registers. A conversation of the
MIRROR mind has ``persona = None`` and never meets these events.

Invariants, whatever the events say (a hand-made or foreign log included):

- every emotion intensity and relationship value is in [0, 1] (clamped), and only the names the
  ``persona`` event declared exist (others are ignored, missing ones keep their value);
- hard goals are met strictly one after another: a ``goal`` event advances ``hard_met`` by one
  only when it names the goal active in the state, so the next goal never activates before the
  current one is met;
- a ``thinker_failed`` of a persona stage changes none of this (the previous state stays in force);
- the episodes kept are the newest :data:`MAX_EPISODES` (state stays bounded).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mirror.events.envelope import Event
from mirror.events.payloads import (
    Appraisal,
    EmotionUpdate,
    Episode,
    GoalUpdate,
    Greeting,
    Interpretation,
    PersonaChosen,
    Plan,
    RelationshipUpdate,
    Retrieval,
)

from ._frozen import FrozenMap
from .state import ConversationState, keep_last

MAX_EPISODES = 500
"""Episodic memories kept for retrieval (the newest): 500 × a 384-float vector is ~0.8 MB."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """The latest output of one step on the turn's path (think, plan, appraisal)."""

    seq: int
    for_turn: int
    text: str


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """What was said at ``turn`` (its ``episode`` event at ``seq``), with its importance and vector."""

    seq: int
    turn: int
    text: str
    importance: float
    embedding: bytes


@dataclass(frozen=True, slots=True)
class PersonaState:
    """The character of a ``persona`` conversation, as of the state's ``last_seq``.

    ``hard_met`` counts the hard goals met (the active one is ``hard_goals[hard_met]``, none once
    all are met). ``*_turn`` are the latest turns whose background step completed (``None``: none
    yet), and ``*_seq`` the events that set the current values (``None``: the start values).
    """

    seq: int
    name: str
    version: str
    card: str
    order: str
    emotions: FrozenMap[str, float]
    relationship: FrozenMap[str, float]
    hard_goals: tuple[str, ...]
    soft_goals: FrozenMap[str, float]
    biography: tuple[str, ...]
    biography_importance: tuple[float, ...]
    biography_embeddings: tuple[bytes, ...]
    embedding_model: str
    user_name: str = ""
    """Who the character talks to: what ``{{user}}`` becomes in the card's text ("" for a
    conversation recorded before macros were substituted: the text as it ran)."""
    interpretation: StepRecord | None = None
    plan: StepRecord | None = None
    appraisal: StepRecord | None = None
    retrieval_seq: int | None = None
    episodes: tuple[EpisodeRecord, ...] = ()
    emotion_turn: int | None = None
    relationship_turn: int | None = None
    goal_turn: int | None = None
    episode_turn: int | None = None
    emotion_seq: int | None = None
    relationship_seq: int | None = None
    goal_seq: int | None = None
    goal_reason: str = ""
    emotion_reason: str = ""
    relationship_reason: str = ""
    hard_met_turns: tuple[int, ...] = field(default=())
    """The turn at which each met hard goal was met, in order."""

    @property
    def hard_met(self) -> int:
        """How many hard goals are met (the first ``hard_met`` of them)."""
        return len(self.hard_met_turns)

    @property
    def active_hard_goal(self) -> str | None:
        return self.hard_goals[self.hard_met] if self.hard_met < len(self.hard_goals) else None

    def view(self) -> dict[str, Any]:
        """The character's state as plain JSON values (the gateway's ``/persona``, time travel)."""

        def step(record: StepRecord | None) -> dict[str, Any] | None:
            return None if record is None else {"seq": record.seq, "for_turn": record.for_turn, "text": record.text}

        return {
            "name": self.name, "version": self.version, "order": self.order, "user_name": self.user_name,
            "emotions": dict(self.emotions), "emotion_reason": self.emotion_reason,
            "relationship": dict(self.relationship), "relationship_reason": self.relationship_reason,
            "goals": {
                "hard": list(self.hard_goals), "hard_met": self.hard_met, "met_at_turns": list(self.hard_met_turns),
                "active_hard_goal": self.active_hard_goal, "soft": dict(self.soft_goals), "reason": self.goal_reason,
            },
            "interpretation": step(self.interpretation), "appraisal": step(self.appraisal), "plan": step(self.plan),
            "episodes": len(self.episodes),
            "updated_turns": {"emotion": self.emotion_turn, "relationship": self.relationship_turn,
                              "goal": self.goal_turn, "episode": self.episode_turn},
        }


def clamp(value: float) -> float:
    """``value`` within [0, 1]."""
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else float(value)


def _later(current: int | None, turn: int) -> int:
    return turn if current is None else max(current, turn)


def _merged(current: FrozenMap[str, float], update: dict[str, float]) -> FrozenMap[str, float]:
    """``current`` with the known names of ``update`` set (clamped); unknown names are ignored."""
    known = {name: clamp(value) for name, value in update.items() if name in current}
    return current.set_many(known.items()) if known else current


def _persona(state: ConversationState) -> PersonaState | None:
    return state.persona


def on_persona_chosen(payload: PersonaChosen, state: ConversationState, event: Event) -> ConversationState:
    if state.persona is not None:  # fixed for the conversation's life: a second one changes nothing
        return state
    persona = PersonaState(
        seq=event.seq, name=payload.name, version=payload.version, card=payload.card, order=payload.order,
        emotions=FrozenMap((name, 0.0) for name in payload.emotions),
        relationship=FrozenMap((name, clamp(value)) for name, value in payload.relationship.items()),
        hard_goals=payload.hard_goals,
        soft_goals=FrozenMap((goal, 0.0) for goal in payload.soft_goals),
        biography=payload.biography,
        biography_importance=tuple(clamp(value) for value in payload.biography_importance),
        biography_embeddings=payload.biography_embeddings,
        embedding_model=payload.embedding_model, user_name=payload.user_name,
    )
    return replace(state, persona=persona)


def on_greeting(payload: Greeting, state: ConversationState, event: Event) -> ConversationState:
    """The greeting opens the conversation: only before its first turn, once, and in a persona one."""
    if state.persona is None or state.turn_count or state.greeting is not None:
        return state
    return replace(state, greeting=payload.text)


def _with(state: ConversationState, **changes: object) -> ConversationState:
    persona = state.persona
    return state if persona is None else replace(state, persona=replace(persona, **changes))  # type: ignore[arg-type]  # field names checked by replace at run time


def on_interpretation(payload: Interpretation, state: ConversationState, event: Event) -> ConversationState:
    return _with(state, interpretation=StepRecord(event.seq, payload.for_turn, payload.text))


def on_retrieval(payload: Retrieval, state: ConversationState, event: Event) -> ConversationState:
    return _with(state, retrieval_seq=event.seq)


def on_plan(payload: Plan, state: ConversationState, event: Event) -> ConversationState:
    return _with(state, plan=StepRecord(event.seq, payload.for_turn, payload.text))


def on_appraisal(payload: Appraisal, state: ConversationState, event: Event) -> ConversationState:
    return _with(state, appraisal=StepRecord(event.seq, payload.for_turn, payload.text))


def on_emotion(payload: EmotionUpdate, state: ConversationState, event: Event) -> ConversationState:
    persona = state.persona
    if persona is None:
        return state
    return _with(state, emotions=_merged(persona.emotions, payload.intensities), emotion_seq=event.seq,
                 emotion_turn=_later(persona.emotion_turn, payload.for_turn), emotion_reason=payload.reason)


def on_relationship(payload: RelationshipUpdate, state: ConversationState, event: Event) -> ConversationState:
    persona = state.persona
    if persona is None:
        return state
    return _with(state, relationship=_merged(persona.relationship, payload.dimensions), relationship_seq=event.seq,
                 relationship_turn=_later(persona.relationship_turn, payload.for_turn),
                 relationship_reason=payload.reason)


def on_goal(payload: GoalUpdate, state: ConversationState, event: Event) -> ConversationState:
    persona = state.persona
    if persona is None:
        return state
    met_turns, active = persona.hard_met_turns, persona.hard_met
    if payload.hard_goal_met and payload.active_hard_goal == active and active < len(persona.hard_goals):
        met_turns = (*met_turns, payload.for_turn)
    return _with(state, hard_met_turns=met_turns, soft_goals=_merged(persona.soft_goals, payload.soft_goals),
                 goal_seq=event.seq, goal_turn=_later(persona.goal_turn, payload.for_turn), goal_reason=payload.reason)


def on_episode(payload: Episode, state: ConversationState, event: Event) -> ConversationState:
    persona = state.persona
    if persona is None:
        return state
    record = EpisodeRecord(event.seq, payload.for_turn, payload.text, clamp(payload.importance), payload.embedding)
    return _with(state, episodes=keep_last((*persona.episodes, record), MAX_EPISODES),
                 episode_turn=_later(persona.episode_turn, payload.for_turn))


HANDLERS = (
    (PersonaChosen, on_persona_chosen),
    (Interpretation, on_interpretation),
    (Retrieval, on_retrieval),
    (Plan, on_plan),
    (Appraisal, on_appraisal),
    (EmotionUpdate, on_emotion),
    (RelationshipUpdate, on_relationship),
    (GoalUpdate, on_goal),
    (Episode, on_episode),
    (Greeting, on_greeting),
)
"""(payload type, handler) for :mod:`mirror.projections.conversation` to register."""

__all__ = ["HANDLERS", "MAX_EPISODES", "EpisodeRecord", "PersonaState", "StepRecord", "clamp"]
