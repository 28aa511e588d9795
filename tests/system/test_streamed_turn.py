"""Streaming through the stack: the model's streamed answer, the simulator's chunks, a streamed turn.

Streaming is a transport choice: a streamed call sends the same request (same fingerprint) and
returns the same response as the plain call; a streamed turn logs the same ``turn`` event as a
plain one, and its pieces join to exactly the logged reply. The simulator runs over loopback
HTTP; the conversation runs on the in-memory infrastructure (no Ray), as
``test_in_memory_conversation`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mirror.actors.placement.local import LocalPlacement
from mirror.actors.results import TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import LLMBadResponse, LLMRequestRejected
from mirror.cognition.llm import ChatMessage, ChatRequest
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Turn
from mirror.serving import ThreadedServer
from mirror.sim.routes import CUT_AFTER_TOKENS, tokens
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client
from tests.support.waits import until_async

REQUEST = ChatRequest((ChatMessage("system", "Be brief."), ChatMessage("user", "How was the lake?")), model=SIM_MODEL)


async def test_a_streamed_call_returns_what_the_plain_call_does(sim: SimLLMServer) -> None:
    async with sim_client(sim) as client:
        plain = await client.chat(REQUEST)
        pieces: list[str] = []
        streamed = await client.chat_streamed(REQUEST, pieces.append)
    assert len(pieces) > 3 and "".join(pieces) == plain.content == streamed.content
    assert replace(streamed.provenance, latency_ms=0) == replace(plain.provenance, latency_ms=0)
    assert streamed.provenance.request_fingerprint == REQUEST.fingerprint()  # stream is not part of the identity


async def test_a_streamed_call_is_retried_before_its_first_token_and_rejected_like_a_plain_one(sim: SimLLMServer) -> None:
    sim.script("500", "429")
    async with sim_client(sim, retries=2) as client:
        pieces: list[str] = []
        response = await client.chat_streamed(REQUEST, pieces.append)
        assert client.retries == 2 and "".join(pieces) == response.content
        sim.script("echo_error")
        with pytest.raises(LLMRequestRejected):
            await client.chat_streamed(REQUEST, pieces.append)


async def test_a_stream_cut_after_its_first_tokens_is_not_retried(sim: SimLLMServer) -> None:
    sim.script("cut")
    async with sim_client(sim, retries=2) as client:
        pieces: list[str] = []
        with pytest.raises(LLMBadResponse, match="ended without"):
            await client.chat_streamed(REQUEST, pieces.append)
        assert len(pieces) == CUT_AFTER_TOKENS and client.retries == 0  # the sink saw them: never asked again


async def test_a_server_that_ignores_stream_is_read_whole(sim: SimLLMServer) -> None:
    async def plain_only(request: Request) -> Response:  # answers as if stream were false
        body = await request.json()
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{sim.base_url}/chat/completions", json={**body, "stream": False})
        return Response(answer.content, media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response("{}", media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", plain_only, methods=["POST"]), Route("/healthz", healthz)])
    with ThreadedServer(app, name="plain-only") as server:
        async with sim_client(sim) as reference, OpenAIChatClient(LLMSettings(
                base_url=f"http://127.0.0.1:{server.port}/v1", model=SIM_MODEL, max_retries=0)) as client:
            pieces: list[str] = []
            streamed = await client.chat_streamed(REQUEST, pieces.append)
            plain = await reference.chat(REQUEST)
    assert pieces == [plain.content] and streamed.content == plain.content
    assert streamed.provenance.completion_tokens == plain.provenance.completion_tokens


def test_the_simulator_streams_chunks_that_join_to_its_plain_answer(sim: SimLLMServer) -> None:
    body = {"model": SIM_MODEL, "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=sim.base_url) as http:
        plain = http.post("/chat/completions", json=body).json()
        with http.stream("POST", "/chat/completions", json={**body, "stream": True,
                                                             "stream_options": {"include_usage": True}}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    import json

    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" and chunk["id"] == plain["id"] for chunk in chunks)
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks if chunk["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == plain["usage"] and chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert "".join(tokens(" a  b\n c ")) == " a  b\n c "


@pytest.fixture
async def local(sim: SimLLMServer) -> AsyncIterator[tuple[LocalPlacement, InMemoryInfrastructure]]:
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=sim.base_url, model=SIM_MODEL, max_retries=1,
                                                           backoff_initial_s=0.01), mode="baseline", memory=False)
    placement = LocalPlacement(settings)
    try:
        yield placement, infrastructure
    finally:
        await placement.close()


async def test_a_streamed_turn_logs_what_a_plain_turn_does_and_its_pieces_join_to_the_reply(
    local: tuple[LocalPlacement, InMemoryInfrastructure],
) -> None:
    placement, infrastructure = local
    plain = await placement.handle(StreamKey("acme", "plain")).turn(TurnRequest("Tell me about the garden."))
    items = [item async for item in placement.handle(StreamKey("acme", "streamed")).turn_stream(TurnRequest("Tell me about the garden."))]
    *pieces, result = items
    assert isinstance(result, TurnResult) and all(isinstance(piece, str) for piece in pieces) and pieces
    assert "".join(pieces) == result.reply == plain.reply  # type: ignore[arg-type]
    logged = {}
    for name in ("plain", "streamed"):  # the turn is each conversation's first event; its thinking may follow already
        (event,) = await infrastructure.event_log.read(StreamKey("acme", name), until_seq=1)
        assert isinstance(event.payload, Turn)
        logged[name] = event
    assert logged["plain"].payload == logged["streamed"].payload
    assert logged["plain"].provenance is not None and logged["streamed"].provenance is not None
    assert logged["plain"].provenance.request_fingerprint == logged["streamed"].provenance.request_fingerprint
    assert result.completion_tokens > 0 and result.prompt_tokens > 0


async def test_a_reader_that_leaves_mid_stream_leaves_the_whole_turn_logged(
    local: tuple[LocalPlacement, InMemoryInfrastructure],
) -> None:
    placement, infrastructure = local
    key = StreamKey("acme", "left")
    handle = placement.handle(key)
    stream = handle.turn_stream(TurnRequest("Tell me a long story about the river."))
    first = await anext(stream)
    assert isinstance(first, str)
    await stream.aclose()  # type: ignore[attr-defined]
    events = await until_async(lambda: infrastructure.event_log.read(key), "the turn, logged without its reader")
    turns = [event.payload for event in events if isinstance(event.payload, Turn)]
    assert len(turns) == 1 and turns[0].reply.startswith(first)
    after = await handle.turn(TurnRequest("And then?"))
    assert after.turn == 1
