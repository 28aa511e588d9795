"""The simulator's memory-stage answers, in process: read from the request, a pure function of it,
and valid against the stage's schemas (so the stage parses them). Over loopback HTTP, as Mirror
asks: ``tests/system/test_sim_memory.py``."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mirror.cognition.memory.extract import (
    MEMORY_SCHEMA,
    parse_extraction,
)
from mirror.cognition.structured import schema_errors
from mirror.sim import memory


def test_each_sentence_of_the_user_message_becomes_a_belief_and_causes_become_edges() -> None:
    answer = memory.extraction("Hi! I live in Lisbon. I sleep badly because of stress. Coffee increases my anxiety. "
                               "Can you help me?")
    statements = [(b["statement"], b["type"], b["kind"]) for b in answer["beliefs"]]
    assert statements == [("I live in Lisbon.", "location", "belief"),
                          ("I sleep badly because of stress.", "standard", "belief"),
                          ("Coffee increases my anxiety.", "standard", "belief"),
                          ("Can you help me?", "standard", "open_loop")]
    assert [(e["src"], e["relation"], e["dst"]) for e in answer["edges"]] == [
        ("stress", "causes", "i sleep badly"), ("coffee", "increases", "my anxiety")]


def test_verdicts_follow_shared_words_and_negation() -> None:
    assert memory.verdict("I am not allergic to peanuts.", "I am allergic to peanuts.") == "CONTRADICTS"
    assert memory.verdict("I don't drink coffee", "I drink coffee every morning") == "CONTRADICTS"
    assert memory.verdict("I am allergic to peanuts!", "I am allergic to peanuts.") == "CONSISTENT"
    assert memory.verdict("I live in Lisbon.", "I am allergic to peanuts.") == "UNRELATED"


@given(st.text(max_size=400))
def test_any_message_gives_an_answer_the_stage_accepts(message: str) -> None:
    answer = memory.extraction(message)
    assert list(schema_errors(answer, MEMORY_SCHEMA.schema)) == []
    parse_extraction(json.dumps(answer))  # raises if the stage would refuse it
    assert memory.extraction(message) == answer
