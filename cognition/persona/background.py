"""The persona cycle's steps after the reply: emotion, relationship, goals, importance.

Each runs in the background once the turn is acknowledged (the writer's think loop,
:class:`~mirror.cognition.writer.ConversationWriter`), one schema-constrained call each, in this
order, for the newest turn: :func:`persona_step_behind` says whether one is still to do (the
stages table, :mod:`mirror.cognition.stages`, runs them in this order). The exchange,
the think step's interpretation and the appraisal travel as one JSON user message.

- **emotion**: every named emotion's new intensity in [0, 1] (clamped) and why;
- **relationship**: every dimension's new value in [0, 1] (clamped) and why;
- **goal**: whether the *active* hard goal is now met (the projection then activates the next:
  strictly one after another) and each soft goal's progress in [0, 1];
- **importance**: how much the exchange will matter, 1–10, stored as an ``episode`` (importance
  / 10) with the exchange's vector from the embedder, for later retrievals.

A failed step is one ``thinker_failed`` of its stage: the previous emotion, relationship and goals
stay in force (the projection only ever replaces them with a successful step's values), and the
writer tries the step again, on its own, up to its attempts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mirror.cognition.embeddings import Embedder
from mirror.cognition.errors import CognitionError, LLMError
from mirror.cognition.llm import LLM, ChatResponse, JsonSchema
from mirror.cognition.pipeline import MirrorConfig, Thinking, Thought, UnusableOutput, failure_thought
from mirror.cognition.prompts import PromptSet
from mirror.cognition.structured import parse_json_object
from mirror.events.payloads import EmotionUpdate, Episode, GoalUpdate, Payload, RelationshipUpdate
from mirror.projections.persona import PersonaState, clamp
from mirror.projections.state import ConversationState

from .prompting import character_block, data_message, request
from .turn_path import EMBED_TIMEOUT_S, NotAPersona

PERSONA_STAGES = ("emotion", "relationship", "goal", "importance")
MAX_REASON_CHARS = 400


class EmbeddingFailed(LLMError):
    """The episode's vector could not be made (the importance step is tried again)."""


def _done(persona: PersonaState, stage: str) -> int | None:
    return {"emotion": persona.emotion_turn, "relationship": persona.relationship_turn, "goal": persona.goal_turn,
            "importance": persona.episode_turn}[stage]


def persona_step_behind(state: ConversationState, stage: str) -> bool:
    """Does the newest turn of a persona conversation still need background step ``stage``?"""
    persona = state.persona
    if persona is None or state.turn_count == 0:
        return False
    done = _done(persona, stage)
    return done is None or done < state.turn_count - 1


def _scores_schema(name: str, key: str, names: tuple[str, ...]) -> JsonSchema:
    score = {"type": "number", "minimum": 0, "maximum": 1}
    return JsonSchema(name, {
        "type": "object",
        "properties": {
            key: {"type": "object", "properties": dict.fromkeys(names, score), "required": list(names),
                  "additionalProperties": False},
            "reason": {"type": "string"},
        },
        "required": [key, "reason"],
        "additionalProperties": False,
    })


def goal_schema(soft_goals: int) -> JsonSchema:
    return JsonSchema("persona_goal", {
        "type": "object",
        "properties": {
            "active_goal_met": {"type": "boolean"},
            "soft_progress": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1},
                              "minItems": soft_goals, "maxItems": soft_goals},
            "reason": {"type": "string"},
        },
        "required": ["active_goal_met", "soft_progress", "reason"],
        "additionalProperties": False,
    })


IMPORTANCE_SCHEMA = JsonSchema("persona_importance", {
    "type": "object",
    "properties": {"importance": {"type": "integer", "minimum": 1, "maximum": 10}},
    "required": ["importance"],
    "additionalProperties": False,
})


def exchange(state: ConversationState) -> dict[str, Any]:
    """The newest exchange, with the interpretation and appraisal the turn's path recorded for it."""
    persona = state.persona
    assert persona is not None  # the callers checked
    latest = state.recent_turns[-1]
    newest = state.turn_count - 1
    interpretation = persona.interpretation.text if persona.interpretation and persona.interpretation.for_turn == newest else ""
    appraisal = persona.appraisal.text if persona.appraisal and persona.appraisal.for_turn == newest else ""
    return {"user_message": latest.user_message, "reply": latest.reply, "interpretation": interpretation,
            "appraisal": appraisal}


def episode_text(state: ConversationState) -> str:
    latest = state.recent_turns[-1]
    return f"They said: {latest.user_message}\nI said: {latest.reply}"


def _reason(fields: dict[str, Any]) -> str:
    return " ".join(str(fields.get("reason", "")).split())[:MAX_REASON_CHARS]


def _scores(fields: dict[str, Any], key: str, names: tuple[str, ...]) -> dict[str, float]:
    values = fields[key]
    return {name: round(clamp(float(values[name])), 4) for name in names}


def parse_update(stage: str, content: str, persona: PersonaState, turn: int) -> Payload:
    """The payload a step's answer records; an ``LLMError`` when it is unusable."""
    if stage == "emotion":
        names = tuple(persona.emotions)
        fields = parse_json_object(content, _scores_schema("persona_emotion", "intensities", names).schema,
                                   schema_name="persona_emotion")
        return EmotionUpdate(turn, _scores(fields, "intensities", names), _reason(fields))
    if stage == "relationship":
        names = tuple(persona.relationship)
        fields = parse_json_object(content, _scores_schema("persona_relationship", "dimensions", names).schema,
                                   schema_name="persona_relationship")
        return RelationshipUpdate(turn, _scores(fields, "dimensions", names), _reason(fields))
    if stage == "goal":
        soft = tuple(persona.soft_goals)
        fields = parse_json_object(content, goal_schema(len(soft)).schema, schema_name="persona_goal")
        progress = fields["soft_progress"]
        if len(progress) != len(soft):
            raise UnusableOutput(f"the goal step gave {len(progress)} soft goals' progress, not {len(soft)}")
        met = bool(fields["active_goal_met"]) and persona.active_hard_goal is not None
        return GoalUpdate(turn, persona.hard_met, met, {goal: round(clamp(float(value)), 4) for goal, value in zip(soft, progress, strict=True)},
                          _reason(fields))
    raise ValueError(f"no update stage {stage!r}")


def update_request(stage: str, state: ConversationState, prompts: PromptSet, config: MirrorConfig) -> tuple[Any, JsonSchema]:
    persona = state.persona
    assert persona is not None  # the callers checked
    character = character_block(persona, prompts)
    if stage == "emotion":
        schema = _scores_schema("persona_emotion", "intensities", tuple(persona.emotions))
    elif stage == "relationship":
        schema = _scores_schema("persona_relationship", "dimensions", tuple(persona.relationship))
    elif stage == "goal":
        schema = goal_schema(len(persona.soft_goals))
    else:
        schema = IMPORTANCE_SCHEMA
    system = prompts.render(f"{stage}.md", character=character,
                            active_goal=persona.active_hard_goal or "(every hard goal is met)")
    data = exchange(state)
    if stage == "goal":
        data = {**data, "soft_goals": list(persona.soft_goals)}
    return request(system, [data_message(data)], prompts, config, schema=schema), schema


async def persona_step(state: ConversationState, stage: str, llm: LLM, embedder: Embedder | None, prompts: PromptSet,
                       config: MirrorConfig, *, attempt: int = 1) -> Thinking:
    """One background step (``stage``) for the newest turn of ``state``, or its failure."""
    persona = state.persona
    if persona is None:
        raise NotAPersona(f"{state.key} is not a persona conversation")
    if not state.recent_turns:
        raise ValueError("there is no turn to update from")
    turn = state.turn_count - 1
    chat, _schema = update_request(stage, state, prompts, config)
    response: ChatResponse | None = None
    try:
        response = await llm.chat(chat)
        if stage != "importance":
            return Thinking(turn, (Thought(parse_update(stage, response.content, persona, turn), response.provenance),))
        fields = parse_json_object(response.content, IMPORTANCE_SCHEMA.schema, schema_name=IMPORTANCE_SCHEMA.name)
        text = episode_text(state)
        vector, model, fingerprint = b"", "", ""
        if embedder is not None:
            try:
                embedded = await asyncio.wait_for(embedder.embed([text]), EMBED_TIMEOUT_S)
            except (CognitionError, TimeoutError, OSError) as exc:
                raise EmbeddingFailed(f"the episode could not be embedded: {exc!r}") from exc
            vector, model, fingerprint = embedded.packed(0), embedded.model, embedded.request_fingerprint
        episode = Episode(turn, text, round(int(fields["importance"]) / 10, 4), vector, model, fingerprint)
        return Thinking(turn, (Thought(episode, response.provenance),))
    except LLMError as exc:
        return Thinking(turn, (failure_thought(stage, exc, attempt, turn, chat, response),))  # type: ignore[arg-type]  # stage is one of PERSONA_STAGES, all ThinkerStages


__all__ = ["IMPORTANCE_SCHEMA", "PERSONA_STAGES", "EmbeddingFailed", "exchange", "goal_schema", "parse_update",
           "persona_step", "persona_step_behind", "update_request"]
