"""The memory eval's reflection column: does a reflection's decay step lose the facts a later question needs?

Each dialogue becomes a conversation's log: one ``turn`` per stated sentence (its own turns,
then its small talk), each followed by the ``belief`` the memory stage would assert for it (the
sentence, its vector, confidence 0.8, stamped at the eval's ``NOW``), then ``turns_after`` turns
of filler, so every belief is old enough to be a decay candidate. The projection folds that log
into a state; :func:`~mirror.cognition.reflection.step.reflect` — the real step: the decay call
and its overruling rules, then the consolidation — reflects on it with the chosen model (the
simulator by default, or any OpenAI-compatible endpoint), and the projection folds the
``reflection`` event it returns, which applies its decisions
(:func:`~mirror.projections.beliefs.apply_decisions`: a forgotten belief leaves the state).

Recall@5 is then asked of the beliefs the state holds, before and after: before equals the
eval's own figures (same sentences, same vectors, the same recall), after shows what the
reflection lost. The simulator's decay answer proposes FORGET for every belief untouched for 20
turns or more (:mod:`mirror.sim.reflection`: a careless model), so with it "after" shows what
the rules alone keep (here a safety constraint, ``protected``: no statement is strong, recalled
or under review); a real model's figure shows what that model forgets, told each belief's age
(``turns_after`` and more turns).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from mirror.cognition.llm import LLM
from mirror.cognition.memory import MemoryIndex
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.cognition.reflection.step import reflect
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Reflection, ThinkerFailed, Turn
from mirror.events.vectors import vector_to_bytes
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state
from mirror.sim.server import SimLLMServer, SimSettings

from .dialogues import NOW, RETRIEVERS, TOP, Dialogue

TURNS_AFTER = 40
"""Filler turns between the last stated sentence and the reflection: the question comes later
still (20 or more make every belief a decay candidate; the simulator proposes to forget them all)."""
CONFIDENCE = 0.8
"""The confidence of an asserted statement (the simulator's extraction gives a statement 0.8)."""
FILLER = "Okay, let us move on."
EMBEDDING_MODEL = "memory-eval"


@dataclass(frozen=True, slots=True)
class ReflectionEvalSettings:
    """The model that reflects: ``llm`` ``sim`` (a loopback simulator) or an OpenAI-compatible base URL."""

    llm: str = "sim"
    model: str = ""
    api_key: str | None = None
    turns_after: int = TURNS_AFTER
    policy: ReflectionPolicy = DEFAULT_POLICY


def dialogue_log(dialogue: Dialogue, vectors: Mapping[str, np.ndarray], turns_after: int = TURNS_AFTER) -> list[Event]:
    """The dialogue as a conversation's events: a turn and its belief per stated sentence, then filler turns."""
    key = StreamKey("eval", dialogue.dialogue_id)
    events: list[Event] = []
    turn = 0
    for item_id, text in dialogue.items():
        events.append(make_event(key, len(events) + 1, Turn(text, "I see."), turn=turn, timestamp=NOW))
        belief = Belief(item_id, "assert", statement=text, confidence=CONFIDENCE, about="user", source_turn=turn,
                        embedding=vector_to_bytes(vectors[text]), embedding_model=EMBEDDING_MODEL)
        events.append(make_event(key, len(events) + 1, belief, turn=turn, timestamp=NOW))
        turn += 1
    for _ in range(turns_after):
        events.append(make_event(key, len(events) + 1, Turn(FILLER, "Sure."), turn=turn, timestamp=NOW))
        turn += 1
    return events


def recall_scores(state: ConversationState, dialogue: Dialogue, vectors: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Recall@5 of the dialogue's needed sentences over the beliefs ``state`` holds, per retriever."""
    index = MemoryIndex(state.beliefs.values())
    query_vector = vectors[dialogue.question]
    keyword, vector = index.rankings(dialogue.question, query_vector)
    fused = index.recall(dialogue.question, query_vector, NOW, limit=TOP).belief_ids
    needed = dialogue.needed_ids
    return {name: len(needed & set(list(found)[:TOP])) / len(needed)
            for name, found in zip(RETRIEVERS, (keyword, vector, fused), strict=True)}


@dataclass(frozen=True, slots=True)
class DialogueReflection:
    """One dialogue's reflection: recall before and after, its decisions, or its failure."""

    dialogue_id: str
    before: dict[str, float]
    after: dict[str, float]
    decisions: tuple[tuple[str, str, str, str], ...]
    needed_forgotten: tuple[str, ...]
    failure: str = ""


async def reflect_on_dialogue(dialogue: Dialogue, vectors: Mapping[str, np.ndarray], llm: LLM, model: str,
                              settings: ReflectionEvalSettings) -> DialogueReflection:
    """Fold the dialogue's log, reflect on it, fold the reflection: recall before and after."""
    before_state = fold(dialogue_log(dialogue, vectors, settings.turns_after), initial_state(StreamKey("eval", dialogue.dialogue_id)))
    config = MirrorConfig(model=model, reflection=True)
    thinking = await reflect(before_state, llm, default_prompt_set(), config, settings.policy, triggers=("forced",))
    events = thinking.events(before_state.key, before_state.last_seq + 1)
    after_state = fold(events, before_state)
    before = recall_scores(before_state, dialogue, vectors)
    payload = events[-1].payload
    if isinstance(payload, ThinkerFailed):
        return DialogueReflection(dialogue.dialogue_id, before, before, (), (), failure=f"{payload.error_type}: {payload.message}")
    assert isinstance(payload, Reflection)  # reflect gives one reflection or one failure
    gone = tuple(sorted(item for item in dialogue.needed_ids if item not in after_state.beliefs))
    return DialogueReflection(dialogue.dialogue_id, before, recall_scores(after_state, dialogue, vectors),
                              payload.decisions, gone)


def summarise(results: Sequence[DialogueReflection], settings: ReflectionEvalSettings, model: str) -> dict[str, Any]:
    """The column: mean recall@5 before and after per retriever, the decisions, the dialogues that lost facts."""
    count = len(results)
    decisions = [decision for result in results for decision in result.decisions]

    def mean(which: str, retriever: str) -> float:
        return round(sum(getattr(result, which)[retriever] for result in results) / count, 4) if count else 0.0

    return {
        "llm": settings.llm,
        "model": model,
        "turns_after": settings.turns_after,
        "recall_at_5_before": {name: mean("before", name) for name in RETRIEVERS},
        "recall_at_5_after": {name: mean("after", name) for name in RETRIEVERS},
        "decisions": len(decisions),
        "proposed": dict(sorted(Counter(proposed for _, proposed, _, _ in decisions).items())),
        "applied": dict(sorted(Counter(applied for _, _, applied, _ in decisions).items())),
        "overruled_by_rule": dict(sorted(Counter(rule for *_, rule in decisions if rule).items())),
        "failed": [{"dialogue": result.dialogue_id, "error": result.failure} for result in results if result.failure],
        "lost": [{"dialogue": result.dialogue_id, "needed_forgotten": list(result.needed_forgotten),
                  "fused_before": round(result.before["fused"], 3), "fused_after": round(result.after["fused"], 3)}
                 for result in results if result.needed_forgotten],
    }


@contextmanager
def _model(settings: ReflectionEvalSettings) -> Iterator[tuple[LLMSettings, str]]:
    if settings.llm == "sim":
        with SimLLMServer(SimSettings()) as server:
            yield LLMSettings(base_url=server.base_url, model="mirror-sim"), "mirror-sim"
    else:
        model = settings.model or "default"
        yield LLMSettings(base_url=settings.llm, model=model, api_key=settings.api_key, timeout_s=300), model


async def _reflect_all(dialogues: Sequence[Dialogue], vectors: Mapping[str, np.ndarray], llm_settings: LLMSettings,
                       model: str, settings: ReflectionEvalSettings) -> list[DialogueReflection]:
    async with OpenAIChatClient(llm_settings) as llm:
        return list(await asyncio.gather(*(reflect_on_dialogue(dialogue, vectors, llm, model, settings)
                                           for dialogue in dialogues)))


def reflection_column(dialogues: Sequence[Dialogue], vectors: Mapping[str, np.ndarray],
                      settings: ReflectionEvalSettings) -> dict[str, Any]:
    """Every dialogue reflected on once by the chosen model (the calls in parallel), summarised."""
    with _model(settings) as (llm_settings, model):
        results = asyncio.run(_reflect_all(dialogues, vectors, llm_settings, model, settings))
    return summarise(results, settings, model)


__all__ = [
    "DialogueReflection", "ReflectionEvalSettings", "TURNS_AFTER", "dialogue_log", "recall_scores", "reflect_on_dialogue",
    "reflection_column", "summarise",
]
