"""The LLM port's contract, run against every adapter: ``OpenAIChatClient`` talking to the
simulator over real loopback HTTP, and ``RecordedLLM`` answering from events that recorded the
simulator's answers (fixture ``llm``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from mirror.cognition.errors import (
    LLMBadResponse,
    LLMError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMUnavailable,
    StructuredOutputError,
)
from mirror.cognition.llm import LLM, ChatMessage, ChatRequest, ChatResponse, JsonSchema
from mirror.cognition.structured import chat_json, schema_errors
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Provenance, ThinkerFailed, Turn
from mirror.replay.errors import RecordingMiss
from mirror.replay.recorded import RecordedLLM, ReplayedFailure
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client

KEY = StreamKey("acme", "llm-contract")
THREADS = JsonSchema("threads", {
    "type": "object",
    "properties": {name: {"type": "string", "minLength": 1} for name in ("reasoning", "memory", "goal")},
    "required": ["reasoning", "memory", "goal"],
    "additionalProperties": False,
})


def request(text: str, *, schema: JsonSchema | None = None, seed: int | None = None,
            temperature: float = 0.7) -> ChatRequest:
    return ChatRequest(
        messages=(ChatMessage("system", "You are Mirror."), ChatMessage("user", text)),
        model=SIM_MODEL, temperature=temperature, max_tokens=200, json_schema=schema, prompt_set="contract-v1",
        seed=seed,
    )


PLAIN = request("I am allergic to peanuts.")
SEEDED = request("What should I cook tonight?", seed=7, temperature=0.0)
STRUCTURED = request("Think about the last turn.", schema=THREADS)
ANSWERED = (PLAIN, SEEDED, STRUCTURED)
BROKEN_JSON = request("Think, but get cut off.", schema=THREADS)
"""Answered with JSON cut short (the simulator's ``malformed`` fault)."""
UNREACHABLE = request("Nobody hears this.")
"""Answered with a 500 and no retries left: the call fails."""
NEVER_ASKED = request("A question no recording holds.")


@dataclass
class Adapter:
    name: str
    llm: LLM
    sim: SimLLMServer

    def fault_next(self, fault: str) -> None:
        """The next live call gets ``fault``; a recording already holds what the fault did."""
        if self.name == "openai":
            self.sim.script(fault)


async def record(sim: SimLLMServer) -> list[Event]:
    """Ask the simulator every request once and keep what a conversation's events would keep."""
    events: list[Event] = []
    async with sim_client(sim) as client:
        for item in ANSWERED:
            response = await client.chat(item)
            events.append(make_event(KEY, len(events) + 1, Turn(item.prompt_text(), response.content),
                                     provenance=response.provenance, timestamp=1.0))
        sim.script("malformed")
        response = await client.chat(BROKEN_JSON)
        events.append(make_event(KEY, len(events) + 1, Turn("cut", response.content),
                                 provenance=response.provenance, timestamp=1.0))
        sim.script("500")
        with pytest.raises(LLMUnavailable) as failed:
            await client.chat(UNREACHABLE)
    provenance = Provenance(model=UNREACHABLE.model, prompt_set=UNREACHABLE.prompt_set,
                            request_fingerprint=UNREACHABLE.fingerprint())
    failure = ThinkerFailed("monologue", failed.value.kind, str(failed.value), attempt=1, for_turn=0)
    events.append(make_event(KEY, len(events) + 1, failure, provenance=provenance, timestamp=1.0))
    return events


@pytest.fixture(params=["openai", "recorded"])
async def llm(request: pytest.FixtureRequest, sim: SimLLMServer) -> AsyncIterator[Adapter]:
    """Every adapter of the LLM port; the simulator's counters are zeroed once it is ready."""
    if request.param == "openai":
        async with sim_client(sim) as client:
            sim.reset()
            yield Adapter("openai", client, sim)
    else:
        recorded = RecordedLLM(await record(sim))
        sim.reset()
        yield Adapter("recorded", recorded, sim)


def model_calls(adapter: Adapter) -> int:
    return adapter.sim.stats()["chat_calls"]


async def test_the_same_request_gets_the_same_answer(llm: Adapter) -> None:
    for item in ANSWERED:
        first, second = await llm.llm.chat(item), await llm.llm.chat(item)
        assert first.content == second.content
        assert first.provenance.request_fingerprint == second.provenance.request_fingerprint == item.fingerprint()
    assert model_calls(llm) == {"openai": 2 * len(ANSWERED), "recorded": 0}[llm.name]


async def test_every_adapter_gives_the_simulators_answer(llm: Adapter, sim: SimLLMServer) -> None:
    async with sim_client(sim) as reference:
        expected = [(await reference.chat(item)).content for item in ANSWERED]
    assert [(await llm.llm.chat(item)).content for item in ANSWERED] == expected


async def test_provenance_says_where_the_answer_came_from(llm: Adapter) -> None:
    for item in ANSWERED:
        response: ChatResponse = await llm.llm.chat(item)
        provenance = response.provenance
        assert provenance.request_fingerprint == item.fingerprint()
        assert (provenance.model, provenance.prompt_set) == (SIM_MODEL, "contract-v1")
        assert provenance.response == response.content and response.content.strip()
        assert provenance.prompt_tokens > 0 and provenance.completion_tokens > 0
        assert provenance.parameters["temperature"] == item.temperature
        assert provenance.parameters["max_tokens"] == item.max_tokens
        assert provenance.parameters.get("seed") == item.seed
        assert provenance.parameters["structured_output"] == ("none" if item.json_schema is None else "json_schema")


async def test_structured_output_is_parsed_to_the_schema(llm: Adapter) -> None:
    value, response = await chat_json(llm.llm, STRUCTURED)
    assert sorted(value) == ["goal", "memory", "reasoning"]
    assert all(isinstance(text, str) and text.strip() for text in value.values())
    assert list(schema_errors(value, THREADS.schema)) == []
    assert response.provenance.request_fingerprint == STRUCTURED.fingerprint()


async def test_json_cut_short_is_a_structured_output_error(llm: Adapter) -> None:
    llm.fault_next("malformed")
    with pytest.raises(StructuredOutputError) as caught:
        await chat_json(llm.llm, BROKEN_JSON)
    assert caught.value.schema_name == "threads" and caught.value.content.startswith("{")


async def test_a_call_that_failed_fails_as_the_same_kind(llm: Adapter) -> None:
    llm.fault_next("500")
    with pytest.raises(LLMError) as caught:
        await llm.llm.chat(UNREACHABLE)
    assert caught.value.kind == "LLMUnavailable"
    expected_type = {"openai": LLMUnavailable, "recorded": ReplayedFailure}[llm.name]
    assert type(caught.value) is expected_type


# --- what only one adapter can do ------------------------------------------------------------


@pytest.mark.parametrize(
    "fault, error",
    [("429", LLMRateLimited), ("500", LLMUnavailable), ("empty", LLMBadResponse), ("no_choices", LLMBadResponse),
     ("garbage", LLMBadResponse), ("echo_error", LLMRequestRejected)],
)
async def test_the_http_client_translates_each_failure(sim: SimLLMServer, fault: str, error: type[LLMError]) -> None:
    sim.script(fault)
    async with sim_client(sim) as client:
        with pytest.raises(error) as caught:
            await client.chat(PLAIN)
    assert type(caught.value) is error and caught.value.kind == error.__name__
    assert sim.stats()["chat_calls"] == 1


async def test_the_http_client_embeds_every_text(sim: SimLLMServer) -> None:
    async with sim_client(sim) as client:
        vectors = await client.embed(["peanuts", "dinner", "peanuts"])
        assert await client.embed([]) == []
    assert len(vectors) == 3 and vectors[0] == vectors[2] and vectors[0] != vectors[1]
    assert len({len(vector) for vector in vectors}) == 1
    assert sim.stats()["embedding_calls"] == 1


async def test_a_recording_misses_what_it_never_heard_and_asks_live_when_it_may(sim: SimLLMServer) -> None:
    events = await record(sim)
    sim.reset()
    recorded = RecordedLLM(events)
    with pytest.raises(RecordingMiss) as caught:
        await recorded.chat(NEVER_ASKED)
    assert caught.value.fingerprint == NEVER_ASKED.fingerprint() and isinstance(caught.value, LLMError)
    with pytest.raises(RecordingMiss):
        await recorded.embed(["peanuts"])
    assert (recorded.recorded_calls, recorded.live_calls, recorded.misses) == (0, 0, 1)

    async with sim_client(sim) as live:
        fallback = RecordedLLM(events, live=live, replay_failures=False)
        answers: dict[str, Any] = {"never": await fallback.chat(NEVER_ASKED), "plain": await fallback.chat(PLAIN),
                                   "failed": await fallback.chat(UNREACHABLE)}
    assert answers["never"].provenance.request_fingerprint == NEVER_ASKED.fingerprint()
    assert events[0].provenance is not None
    assert answers["plain"].content == events[0].provenance.response
    assert (fallback.recorded_calls, fallback.live_calls) == (1, 2)
    assert sim.stats()["chat_calls"] == 2
