"""One copy of each model output: payloads stand in for responses, and replay still holds.

Conversations run through the real pipeline and httpx client against the simulator; the logs
are then verified in both storage forms — the new one (a digest in the provenance) and the
old one (record format 1, the raw answer in the provenance) — with zero model calls. (The
rules alone: ``tests/unit/test_one_copy.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import msgpack
import pytest

from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.pipeline import MirrorConfig, talk, think
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.responses import (
    PayloadDoesNotMatch,
    recorded_response,
    response_digest,
    response_from_payload,
)
from mirror.events.codec import decode, encode, event_to_record
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative, Turn
from mirror.projections.conversation import apply, fold
from mirror.projections.state import initial_state
from mirror.replay import RecordedLLM, verify_events
from mirror.replay.verify import thinking_steps
from mirror.sim.server import SimLLMServer, SimSettings

KEY = StreamKey("acme", "one-copy")
PROMPTS = default_prompt_set()
MESSAGES = ["I never eat peanuts: I am allergic.", "Tell me about rivers.", "And mountains?", "What did I say about food?"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimLLMServer]:
    server = SimLLMServer(SimSettings()).start()
    yield server
    server.stop()


def chat_calls(server: SimLLMServer) -> int:
    return server.stats()["chat_calls"]


async def conversation(server: SimLLMServer, messages: list[str] = MESSAGES) -> list[Event]:
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    log: list[Event] = []
    async with OpenAIChatClient(LLMSettings(base_url=server.base_url, model="mirror-sim", timeout_s=5)) as llm:
        for message in messages:
            said = await talk(state, message, llm, PROMPTS, config)
            event = make_event(KEY, state.last_seq + 1, said.turn, turn=state.turn_count, provenance=said.provenance)
            state = apply(state, event)
            events = (await think(state, llm, PROMPTS, config)).events(KEY, state.last_seq + 1, causation=event.id)
            state = fold(events, state)
            log += [event, *events]
    return log


def old_form(event: Event) -> bytes:
    """``event`` as record format 1 wrote it: the model's answer again in the provenance."""
    assert event.provenance is not None
    raw = replace(event.provenance, response=recorded_response(event), response_digest="")
    record: dict[str, Any] = event_to_record(replace(event, provenance=raw))
    record["f"] = 1
    del record["provenance"]["response_digest"]
    return msgpack.packb(record, use_bin_type=True)


# ------------------------------------------------------------------------------ the pipeline


async def test_every_model_output_is_stored_once(sim: SimLLMServer) -> None:
    log = await conversation(sim)
    assert [type(e.payload) for e in log] == [Turn, Monologue, Narrative] * len(MESSAGES)
    for event in log:
        assert event.provenance is not None and event.provenance.response is None
        rebuilt = response_from_payload(event.payload)
        assert rebuilt is not None and event.provenance.response_digest == response_digest(rebuilt)
        assert decode(encode(event)) == event
    new_bytes = sum(len(encode(event)) for event in log)
    old_bytes = sum(len(old_form(event)) for event in log)
    text = sum(len(response_from_payload(event.payload) or "") for event in log)
    # The second copy of every answer is gone; the digest that replaces it costs under 40 bytes.
    assert old_bytes - new_bytes >= text - 40 * len(log)
    assert new_bytes < old_bytes * 0.85


async def test_a_new_form_log_verifies_with_zero_model_calls(sim: SimLLMServer) -> None:
    log = await conversation(sim)
    before = chat_calls(sim)
    report = await verify_events(KEY, initial_state(KEY), log, PROMPTS)
    assert report.ok, report.as_dict()["divergences"][:2]
    assert report.model_calls == 0 and report.unverifiable == 0
    assert report.steps == len(MESSAGES) + len(thinking_steps(log))
    assert report.recorded_answers == len(log)  # every model call answered from the log
    assert chat_calls(sim) == before


async def test_an_old_form_log_verifies_with_zero_model_calls(sim: SimLLMServer) -> None:
    log = [decode(old_form(event)) for event in await conversation(sim)]
    assert all(e.provenance is not None and e.provenance.response and not e.provenance.response_digest for e in log)
    before = chat_calls(sim)
    report = await verify_events(KEY, initial_state(KEY), log, PROMPTS)
    assert report.ok, report.as_dict()["divergences"][:2]
    assert report.model_calls == 0 and report.recorded_answers == len(log)
    assert report.steps == len(MESSAGES) + len(thinking_steps(log))
    assert chat_calls(sim) == before


async def test_a_payload_edited_alone_still_diverges(sim: SimLLMServer) -> None:
    log = await conversation(sim)
    narrative = next(e for e in log if isinstance(e.payload, Narrative))
    assert isinstance(narrative.payload, Narrative)
    forged = replace(narrative, payload=replace(narrative.payload, text="I decided something else entirely."))
    with pytest.raises(PayloadDoesNotMatch, match=f"seq {narrative.seq}"):
        recorded_response(forged)
    report = await verify_events(KEY, initial_state(KEY), [forged if e.seq == narrative.seq else e for e in log], PROMPTS)
    assert report.divergences and report.divergences[0].seq == narrative.seq
    assert report.model_calls == 0


async def test_recorded_llm_answers_with_the_rebuilt_response(sim: SimLLMServer) -> None:
    log = await conversation(sim, MESSAGES[:1])
    turn = log[0]
    assert isinstance(turn.payload, Turn)
    recorded = RecordedLLM(log)
    from mirror.cognition.pipeline import talker_request

    request = talker_request(initial_state(KEY), MESSAGES[0], PROMPTS, MirrorConfig(model="mirror-sim"))
    answer = await recorded.chat(request)
    assert answer.content == turn.payload.reply and answer.provenance == turn.provenance
