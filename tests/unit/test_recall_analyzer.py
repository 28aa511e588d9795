"""The keyword ranking's analyzers: Snowball stems by default, plain words for older recalls.

A recall is replayed with the analyzer it was made with (recorded in the ``recall`` event from
version 3; ``words`` before), so changing the default never turns an old log's replay into a
divergence; a name this Mirror does not know is a typed error, not a silent other answer.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mirror.cognition.errors import CognitionError, UnknownAnalyzer
from mirror.cognition.memory import ANALYZERS, DEFAULT_ANALYZER, MemoryIndex, MemoryItem, analyze, recall
from mirror.cognition.memory.turn import RecallSettings, TurnMemory, recall_at, recall_event, replay_recall
from mirror.events.ids import StreamKey
from mirror.projections.beliefs import BeliefState
from mirror.projections.state import initial_state

NOW = 1_800_000_000.0
FACTS = {
    "b1": "I water it every Sunday.",
    "b2": "The fiddle leaf fig keeps dropping leaves.",
    "b3": "My sister lives in Lisbon.",
}


def test_the_default_is_stemmed_and_both_analyzers_drop_the_same_stopwords() -> None:
    assert DEFAULT_ANALYZER == "stemmed" and set(ANALYZERS) == {"words", "stemmed"}
    assert analyze("Watering the plants", "words") == ["watering", "plants"]
    assert analyze("Watering the plants", "stemmed") == ["water", "plant"]
    assert analyze("", "stemmed") == []


def test_stems_let_a_message_find_another_form_of_a_word() -> None:
    memory = [MemoryItem(belief_id, statement, last_reinforced=NOW) for belief_id, statement in FACTS.items()]
    query = "watering the fig"
    assert recall(memory, query, None, NOW).belief_ids == ("b1", "b2")
    assert recall(memory, query, None, NOW, analyzer="words").belief_ids == ("b2",)


def test_an_unknown_analyzer_is_a_typed_error() -> None:
    with pytest.raises(UnknownAnalyzer, match="'porter'.*words, stemmed") as raised:
        MemoryIndex(analyzer="porter")
    assert isinstance(raised.value, CognitionError) and raised.value.analyzer == "porter"
    with pytest.raises(UnknownAnalyzer):
        analyze("text", "porter")


def _state_with_facts():
    state = initial_state(StreamKey("acme", "analyzer-1"))
    beliefs = {
        belief_id: BeliefState(belief_id=belief_id, statement=statement, memory_type="standard", confidence=0.6,
                               created=NOW, last_reinforced=NOW)
        for belief_id, statement in FACTS.items()
    }
    return replace(state, beliefs=beliefs)


@pytest.mark.parametrize("analyzer", ANALYZERS)
def test_a_recorded_recall_replays_with_its_own_analyzer_even_through_a_live_index(analyzer: str) -> None:
    state = _state_with_facts()
    settings = RecallSettings(analyzer=analyzer)
    made = recall_at(state, "watering", None, NOW, settings=settings)
    recorded = recall_event(made, None, "", "")
    assert recorded.analyzer == analyzer
    assert replay_recall(state, recorded, NOW).payload == recorded
    live = TurnMemory()  # the default analyzer's cache: a recall asking for another builds its own
    assert recall_at(state, "watering", None, NOW, memory=live, settings=settings).belief_ids == made.belief_ids
    assert made.belief_ids == (("b1",) if analyzer == "stemmed" else ())


def test_a_recall_recorded_without_an_analyzer_replays_with_plain_words() -> None:
    state = _state_with_facts()
    made = recall_at(state, "watering", None, NOW, settings=RecallSettings(analyzer="words"))
    unrecorded = replace(recall_event(made, None, "", ""), analyzer="")
    replayed = replay_recall(state, unrecorded, NOW)
    assert replayed.payload.belief_ids == () and replayed.payload.analyzer == "words"
