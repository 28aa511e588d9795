"""The memory eval's reflection column, in process: each dialogue's log folds into beliefs, the real
reflection step decides on them through the LLM port (a double answering by schema here; the
simulator over loopback HTTP in ``tests/system/test_memory_eval.py``), and recall is asked of
what the projection still holds."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

import numpy as np

from mirror.cognition.errors import LLMTimeout
from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.reflection.decay import decay_candidates
from mirror.cognition.reflection.policy import DEFAULT_POLICY
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Provenance, Turn
from mirror.harness.evals.memory import load_dialogues
from mirror.harness.evals.memory.dialogues import Dialogue
from mirror.harness.evals.memory.reflection import (
    DialogueReflection,
    ReflectionEvalSettings,
    dialogue_log,
    recall_scores,
    reflect_on_dialogue,
    summarise,
)
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state

DIALOGUES = {dialogue.dialogue_id: dialogue for dialogue in load_dialogues()}
ALLERGY = DIALOGUES["peanut-allergy"]


def _vector(text: str) -> np.ndarray:
    """A bag of hashed words, normalised: similar sentences, similar vectors, no embedder needed."""
    vector = np.zeros(64, dtype=np.float32)
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.blake2b(word.encode(), digest_size=2).hexdigest(), 16) % 64] += 1.0
    return vector / max(float(np.linalg.norm(vector)), 1e-9)


def _vectors(dialogue: Dialogue) -> dict[str, np.ndarray]:
    return {text: _vector(text) for text in [text for _, text in dialogue.items()] + [dialogue.question]}


class _Model:
    """The LLM port, answering the decay call with one verdict for every belief and the consolidation with a portrait."""

    def __init__(self, verdict: str | None) -> None:
        self.verdict, self.calls = verdict, 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.verdict is None:
            raise LLMTimeout("http://model.invalid/v1", 1, 30.0)
        assert request.json_schema is not None
        if request.json_schema.name == "reflection_decay":
            beliefs = json.loads(request.messages[-1].content)
            content = json.dumps({"decisions": [{"belief": item["belief"], "verdict": self.verdict} for item in beliefs]})
        else:
            content = json.dumps({"portrait": "I am getting to know someone who tells me about their week."})
        return ChatResponse(content, Provenance(model=request.model, prompt_set=request.prompt_set,
                                                request_fingerprint=request.fingerprint(), response=content))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("reflection embeds nothing")


async def _reflect(dialogue: Dialogue, verdict: str | None, turns_after: int = 40) -> tuple[DialogueReflection, int]:
    model = _Model(verdict)
    result = await reflect_on_dialogue(dialogue, _vectors(dialogue), model, "double",
                                       ReflectionEvalSettings(turns_after=turns_after))
    return result, model.calls


def test_a_dialogue_becomes_a_turn_and_a_belief_per_sentence_then_filler_turns() -> None:
    events = dialogue_log(ALLERGY, _vectors(ALLERGY), turns_after=25)
    items = ALLERGY.items()
    assert len(events) == 2 * len(items) + 25 and [event.seq for event in events] == list(range(1, len(events) + 1))
    beliefs = [event.payload for event in events if isinstance(event.payload, Belief)]
    assert [(belief.belief_id, belief.statement) for belief in beliefs] == items
    assert sum(isinstance(event.payload, Turn) for event in events) == len(items) + 25
    state = fold(events, initial_state(StreamKey("eval", ALLERGY.dialogue_id)))
    assert set(state.beliefs) == {item_id for item_id, _ in items}
    assert len(decay_candidates(state, DEFAULT_POLICY)) == len(items)  # every belief old enough to be asked about


def test_before_any_reflection_the_beliefs_recall_as_the_eval_does() -> None:
    events = dialogue_log(ALLERGY, _vectors(ALLERGY))
    state = fold(events, initial_state(StreamKey("eval", ALLERGY.dialogue_id)))
    scores = recall_scores(state, ALLERGY, _vectors(ALLERGY))
    assert set(scores) == {"keyword", "vector", "fused"} and all(0.0 <= value <= 1.0 for value in scores.values())


async def test_a_model_that_forgets_everything_loses_all_but_the_safety_constraint() -> None:
    result, calls = await _reflect(ALLERGY, "FORGET")
    assert calls == 2 and not result.failure  # the decay call and the consolidation
    protected = {belief_id for belief_id, _, applied, rule in result.decisions if rule == "protected"}
    epipen = next(item_id for item_id, text in ALLERGY.items() if "EpiPen" in text)
    assert epipen in protected
    assert all(applied == "retain" for belief_id, _, applied, _ in result.decisions if belief_id in protected)
    assert all(applied == "forget" for belief_id, _, applied, _ in result.decisions if belief_id not in protected)
    assert set(result.needed_forgotten) == ALLERGY.needed_ids - protected
    survived = len(ALLERGY.needed_ids & protected) / len(ALLERGY.needed_ids)
    assert 0 < survived < 1 and all(value <= survived for value in result.after.values())  # only a survivor is found


async def test_a_model_that_retains_everything_changes_no_figure() -> None:
    result, _ = await _reflect(ALLERGY, "RETAIN")
    assert result.after == result.before and not result.needed_forgotten
    assert {applied for _, _, applied, _ in result.decisions} == {"retain"}


async def test_young_beliefs_are_not_asked_about() -> None:
    result, calls = await _reflect(ALLERGY, "FORGET", turns_after=5)
    assert result.decisions == () and result.after == result.before and calls == 1  # the consolidation alone


async def test_a_failed_reflection_is_reported_and_changes_nothing() -> None:
    result, _ = await _reflect(ALLERGY, None)
    assert "timeout" in result.failure.lower() and result.after == result.before and result.decisions == ()


def test_the_column_averages_the_dialogues_and_names_those_that_lost_needed_facts() -> None:
    results = [
        DialogueReflection("a", {"keyword": 1.0, "vector": 0.5, "fused": 1.0}, {"keyword": 0.0, "vector": 0.5, "fused": 0.5},
                           (("t00", "forget", "forget", ""), ("t01", "forget", "retain", "protected")), ("t00",)),
        DialogueReflection("b", {"keyword": 0.5, "vector": 0.5, "fused": 0.5}, {"keyword": 0.5, "vector": 0.5, "fused": 0.5},
                           (), (), failure="LLMTimeout: slow"),
    ]
    column = summarise(results, ReflectionEvalSettings(), "mirror-sim")
    assert column["recall_at_5_before"] == {"keyword": 0.75, "vector": 0.5, "fused": 0.75}
    assert column["recall_at_5_after"] == {"keyword": 0.25, "vector": 0.5, "fused": 0.5}
    assert column["decisions"] == 2 and column["proposed"] == {"forget": 2}
    assert column["applied"] == {"forget": 1, "retain": 1} and column["overruled_by_rule"] == {"protected": 1}
    assert column["failed"] == [{"dialogue": "b", "error": "LLMTimeout: slow"}]
    assert column["lost"] == [{"dialogue": "a", "needed_forgotten": ["t00"], "fused_before": 1.0, "fused_after": 0.5}]
