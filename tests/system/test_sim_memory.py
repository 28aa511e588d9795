"""The simulator's memory-stage answers over loopback HTTP, as Mirror asks: the stage parses what
the simulator says (the answers alone: ``tests/unit/test_sim_memory.py``)."""

from __future__ import annotations

from mirror.cognition.memory.extract import (
    Pair,
    contradiction_request,
    extraction_request,
    parse_extraction,
    parse_verdicts,
)
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Turn
from mirror.projections.conversation import fold
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client

PROMPTS = default_prompt_set()
KEY = StreamKey("acme", "sim-memory")


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
