"""Bytes the log spends per turn: a 20-turn conversation through the real pipeline, encoded.

Runs the MIRROR pipeline (``full`` mode: Talker, Inner Monologue, Cognitive Controller) against
the simulator over HTTP, exactly as tests/unit/test_pipeline.py does, encodes every event with
the codec and prints, as JSON, the msgpack bytes per turn, the characters of model output per
turn and the ratio of the two. Usage: ``.venv/bin/python scripts/bytes_per_turn.py [TURNS]``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mirror.actors.llm.sim.server import SimLLMServer, SimSettings
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.pipeline import MirrorConfig, talk, think
from mirror.cognition.prompts import default_prompt_set
from mirror.events.codec import encode
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative, Turn
from mirror.projections.conversation import apply, fold
from mirror.projections.state import initial_state

MESSAGES = (
    "I never eat peanuts: I am allergic.", "Tell me about rivers.", "And mountains?",
    "What should I cook tonight?", "I moved to Lyon last spring.", "Do you remember where I live?",
    "My sister Ann visits next week.", "She loves hiking.", "Suggest a weekend plan for us.",
    "Can we avoid anything with nuts?", "What is the weather like in the Alps in May?",
    "I work as a nurse, nights mostly.", "How do I sleep better after a night shift?",
    "Tell me a short story about a river.", "Why do rivers meander?", "What did I say about Ann?",
    "Recommend a book for the train.", "I prefer non-fiction.", "What about history?",
    "Summarise what you know about me.",
)


def model_output_chars(event: Event) -> int:
    payload = event.payload
    if isinstance(payload, Turn):
        return len(payload.reply)
    if isinstance(payload, Monologue):
        return len(payload.reasoning) + len(payload.memory) + len(payload.goal)
    if isinstance(payload, Narrative):
        return len(payload.text)
    return 0


async def conversation(turns: int, base_url: str) -> list[Event]:
    key = StreamKey("acme", "bytes")
    prompts = default_prompt_set()
    config = MirrorConfig(model="mirror-sim")
    llm = OpenAIChatClient(LLMSettings(base_url=base_url, model="mirror-sim", timeout_s=10))
    state = initial_state(key)
    log: list[Event] = []
    try:
        for index in range(turns):
            said = await talk(state, MESSAGES[index % len(MESSAGES)], llm, prompts, config)
            event = make_event(key, state.last_seq + 1, said.turn, turn=state.turn_count, provenance=said.provenance)
            state = apply(state, event)
            thinking = await think(state, llm, prompts, config)
            events = thinking.events(key, state.last_seq + 1, causation=event.id)
            state = fold(events, state)
            log += [event, *events]
    finally:
        await llm.aclose()
    return log


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    server = SimLLMServer(SimSettings()).start()
    try:
        log = asyncio.run(conversation(turns, server.base_url))
    finally:
        server.stop()
    total = sum(len(encode(event)) for event in log)
    output = sum(map(model_output_chars, log))
    user = sum(len(e.payload.user_message) for e in log if isinstance(e.payload, Turn))
    print(json.dumps({
        "turns": turns, "events": len(log), "bytes_per_turn": round(total / turns),
        "model_output_chars_per_turn": round(output / turns), "user_chars_per_turn": round(user / turns),
        "bytes_per_output_char": round(total / max(1, output), 2),
    }))


if __name__ == "__main__":
    main()
