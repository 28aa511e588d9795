"""The simulator's memory-stage answers: read from the request, a pure function of it, and valid
against the stage's schemas (so the stage parses them), over loopback HTTP as Mirror asks."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mirror.cognition.memory.extract import (
    MEMORY_SCHEMA,
    Pair,
    contradiction_request,
    extraction_request,
    parse_extraction,
    parse_verdicts,
)
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.structured import schema_errors
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Turn
from mirror.projections.conversation import fold
from mirror.sim import memory
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client

PROMPTS = default_prompt_set()
KEY = StreamKey("acme", "sim-memory")


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


async def test_over_http_the_stage_parses_what_the_simulator_says(sim: SimLLMServer) -> None:
    state = fold([make_event(KEY, 1, Turn("I am allergic to peanuts. Stress causes insomnia.", "Noted."), turn=0)])
    config = MirrorConfig(model=SIM_MODEL, thinker_max_tokens=500, seed=1)
    pairs = [Pair(0, 0, "I am not allergic to peanuts.", "b-1", "I am allergic to peanuts."),
             Pair(1, 0, "I am not allergic to peanuts.", "b-2", "I like the sea.")]
    async with sim_client(sim) as llm:
        extracted = parse_extraction((await llm.chat(extraction_request(state, PROMPTS, config))).content)
        judged = parse_verdicts((await llm.chat(contradiction_request(pairs, PROMPTS, config))).content, pairs)
    assert [c.statement for c in extracted.candidates] == ["I am allergic to peanuts.", "Stress causes insomnia."]
    assert [(e.src, e.relation, e.dst) for e in extracted.edges] == [("stress", "causes", "insomnia")]
    assert judged == {0: "CONTRADICTS", 1: "UNRELATED"}
