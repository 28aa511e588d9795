"""The MIRROR pipeline through the real httpx client against the simulator over HTTP (the requests
alone, in process: ``tests/unit/test_pipeline.py``)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.openai_client import OpenAIChatClient
from mirror.cognition.pipeline import (
    MODES,
    MirrorConfig,
    controller_request,
    monologue_request,
    talk,
    think,
)
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.responses import response_digest
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative, Payload, ThinkerFailed, Turn
from mirror.projections.conversation import apply, fold
from mirror.projections.state import ConversationState, initial_state
from mirror.sim.server import SimLLMServer
from tests.support.sim import sim_client

KEY = StreamKey("acme", "pipeline")
PROMPTS = default_prompt_set()


def reset(server: SimLLMServer, script: list[str] | None = None) -> None:
    server.reset()
    if script:
        server.script(*script)


def chat_calls(server: SimLLMServer) -> int:
    return server.stats()["chat_calls"]


def client(server: SimLLMServer, retries: int = 0) -> OpenAIChatClient:
    return sim_client(server, retries=retries)


async def one_turn(state: ConversationState, message: str, llm: OpenAIChatClient, config: MirrorConfig):
    said = await talk(state, message, llm, PROMPTS, config)
    turn_event = make_event(KEY, state.last_seq + 1, said.turn, turn=state.turn_count, provenance=said.provenance)
    state = apply(state, turn_event)
    thinking = await think(state, llm, PROMPTS, config)
    events = thinking.events(KEY, state.last_seq + 1)
    state = fold(events, state)
    return state, [turn_event, *events], thinking


# ------------------------------------------------------------------------------ modes


@pytest.mark.parametrize("mode", MODES)
async def test_each_mode_makes_its_calls_and_events(sim: SimLLMServer, mode: str) -> None:
    reset(sim)
    config = MirrorConfig(model="mirror-sim", mode=mode)  # type: ignore[arg-type]  # MODES holds the Mode literals typed as plain str
    expected_by_mode: dict[str, list[type[Payload]]] = {
        "baseline": [], "threads_only": [Monologue], "controller_only": [Narrative], "full": [Monologue, Narrative],
    }
    expected_thinking = expected_by_mode[mode]
    state = initial_state(KEY)
    async with client(sim) as llm:
        for message in ("I am allergic to peanuts.", "What should I cook tonight?"):
            before = chat_calls(sim)
            state, events, thinking = await one_turn(state, message, llm, config)
            assert chat_calls(sim) - before == 1 + len(expected_thinking)
            assert [type(event.payload) for event in events] == [Turn, *expected_thinking]
            assert thinking.ok
    turn = events[0].payload
    assert turn.mode == mode
    if mode == "baseline":
        assert turn.narrative_seq is None and state.narrative is None
    if mode in ("full", "controller_only"):
        assert turn.narrative_seq is not None and state.narrative and state.thought_turn == 1
    if mode == "full":
        narrative = events[-1]
        assert narrative.payload.monologue_seq == events[-2].seq
    for event in events:
        assert event.provenance is not None and event.provenance.prompt_set == PROMPTS.version
        assert event.provenance.model == "mirror-sim" and event.provenance.latency_ms > 0


async def test_the_controller_never_sees_the_raw_conversation(sim: SimLLMServer) -> None:
    reset(sim)
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    async with client(sim) as llm:
        state, _, _ = await one_turn(state, "My secret word is PAPRIKA-77.", llm, config)
        state, _, _ = await one_turn(state, "Tell me a story.", llm, config)
    monologue = monologue_request(state, PROMPTS, config)
    assert any("PAPRIKA-77" in message.content for message in monologue.messages)
    assert monologue.json_schema is not None
    controller = controller_request(state, state.threads, PROMPTS, config)
    assert not any("PAPRIKA-77" in message.content for message in controller.messages)
    assert state.narrative in controller.messages[0].content
    assert controller.temperature == 0.7 and controller.max_tokens == 3000


async def test_provenance_identifies_the_exact_request(sim: SimLLMServer) -> None:
    reset(sim)
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    async with client(sim) as llm:
        said = await talk(state, "Hello there", llm, PROMPTS, config)
        again = await talk(state, "Hello there", llm, PROMPTS, config)
    assert said.reply == again.reply  # the simulator is a pure function of the request
    assert said.provenance.request_fingerprint == again.provenance.request_fingerprint
    # One copy: the reply is the Talker's answer, so the provenance keeps only its digest.
    assert said.provenance.response is None
    assert said.provenance.response_digest == response_digest(said.reply)
    assert said.provenance.parameters["temperature"] == 0.7


async def test_a_call_that_got_no_answer_records_the_request_it_asked(sim: SimLLMServer) -> None:
    """Replay rebuilds a failed request from its provenance: every parameter that reaches the
    model (the seed too) must be there, or the rebuilt request is another one."""
    config = MirrorConfig(model="mirror-sim", seed=5, temperature=0.3)
    state = initial_state(KEY)
    async with client(sim) as llm:
        said = await talk(state, "Hello there", llm, PROMPTS, config)
        state = apply(state, make_event(KEY, 1, said.turn, provenance=said.provenance))
        reset(sim, ["500"])
        thinking = await think(state, llm, PROMPTS, config)
    (failed,) = thinking.thoughts
    assert isinstance(failed.payload, ThinkerFailed) and failed.payload.error_type == "LLMUnavailable"
    asked = monologue_request(state, PROMPTS, config)
    assert failed.provenance is not None and failed.provenance.response is None
    assert failed.provenance.request_fingerprint == asked.fingerprint()
    assert failed.provenance.parameters == {"temperature": 0.3, "max_tokens": config.thinker_max_tokens, "seed": 5}


# ------------------------------------------------------------------------------ failures


async def test_a_failed_monologue_never_reaches_the_controller(sim: SimLLMServer) -> None:
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    async with client(sim) as llm:
        reset(sim)
        state, _, first = await one_turn(state, "I am vegan.", llm, config)
        narrative = state.narrative
        for fault in ("malformed", "500", "empty"):
            reset(sim, ["ok", fault])  # the Talker succeeds, the monologue fails
            state, events, thinking = await one_turn(state, "Anything else?", llm, config)
            assert chat_calls(sim) == 2  # no controller call after the failure
            failure = events[-1].payload
            assert isinstance(failure, ThinkerFailed) and failure.stage == "monologue"
            assert state.narrative == narrative and state.last_failure is not None
    assert first.ok


async def test_a_failed_controller_keeps_the_previous_narrative(sim: SimLLMServer) -> None:
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    async with client(sim) as llm:
        reset(sim)
        state, _, _ = await one_turn(state, "I am vegan.", llm, config)
        narrative, narrative_seq = state.narrative, state.narrative_seq
        reset(sim, ["ok", "ok", "empty"])
        state, events, thinking = await one_turn(state, "Plan my week.", llm, config)
    assert [type(event.payload) for event in events] == [Turn, Monologue, ThinkerFailed]
    assert events[-1].payload.stage == "controller" and not thinking.ok
    assert (state.narrative, state.narrative_seq) == (narrative, narrative_seq)
    assert state.thought_turn == 0  # turn 1 is still to be thought about


async def test_retries_inside_the_client_hide_transient_faults(sim: SimLLMServer) -> None:
    config = MirrorConfig(model="mirror-sim")
    reset(sim, ["ok", "429", "500", "ok", "ok"])
    async with client(sim, retries=3) as llm:
        _, events, thinking = await one_turn(initial_state(KEY), "Hi!", llm, config)
    assert thinking.ok and [type(e.payload) for e in events] == [Turn, Monologue, Narrative]


FAULTS = st.sampled_from(["ok", "ok", "ok", "500", "malformed", "empty", "429"])


@settings(max_examples=25, deadline=None)
@given(script=st.lists(FAULTS, min_size=0, max_size=24), turns=st.integers(1, 5))
def test_no_failure_sequence_yields_a_narrative_that_no_controller_wrote(sim_server, script, turns) -> None:
    asyncio.run(_error_chaining_scenario(sim_server, script, turns))


def narrative_of(event: Event) -> Narrative:
    assert isinstance(event.payload, Narrative)
    return event.payload


async def _error_chaining_scenario(sim: SimLLMServer, script: list[str], turns: int) -> None:
    reset(sim, script)
    config = MirrorConfig(model="mirror-sim")
    state = initial_state(KEY)
    log: list[Event] = []
    async with client(sim) as llm:
        for index in range(turns):
            try:
                state, events, _ = await one_turn(state, f"message {index}", llm, config)
            except Exception:  # the Talker failed: nothing is appended for this turn
                continue
            log.extend(events)
    narratives = [event for event in log if isinstance(event.payload, Narrative)]
    for event in narratives:
        # Written by a successful controller call: its provenance has the digest of exactly
        # that response (the payload holds the one copy), and the monologue it consolidated
        # (same step) succeeded.
        narrative = narrative_of(event)
        assert event.provenance is not None and event.provenance.response is None
        assert event.provenance.response_digest == response_digest(narrative.text)
        assert narrative.monologue_seq is not None
        monologue = log[[e.seq for e in log].index(narrative.monologue_seq)]
        assert isinstance(monologue.payload, Monologue)
    assert state.narrative == (narrative_of(narratives[-1]).text if narratives else None)
    assert fold(log, initial_state(KEY)) == state  # an empty log folds to the initial state
