"""A server that closes idle connections, and Mirror's HTTP clients reusing one at that moment.

uvicorn closes a connection idle for ``timeout_keep_alive``; a client whose loop is busy has not
yet read that close when it reuses the connection, so its request dies unanswered. These tests
make that moment on purpose against a real uvicorn (1 s keep-alive, the clients' 4 s): they
block the client's loop until the server has closed the connection, then send. Both clients are
covered: the httpx transport the benches use, and the model client (aiohttp without httpx).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from mirror.cognition.http_transport import IDLE_KEEPALIVE_S, STREAM_EXTENSION, AiohttpTransport, pool_limits
from mirror.cognition.llm import ChatMessage, ChatRequest
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.serving import bind_socket


async def _body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The request's body back (``/healthz``: empty)."""
    if scope["type"] != "http":
        return
    body = await _body(receive)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body or b"{}"})


async def _model(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A chat completion whose content is the last message's (streamed when asked: one chunk, then [DONE])."""
    if scope["type"] != "http":
        return
    body = await _body(receive)
    request = json.loads(body)
    content = request["messages"][-1]["content"]
    if request.get("stream"):
        chunk = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "stop"}]}
        answer, kind = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(), b"text/event-stream"
    else:
        answer = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                          "finish_reason": "stop"}]}).encode()
        kind = b"application/json"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": answer})


def _serve(app: Any) -> Iterator[tuple[uvicorn.Server, str]]:
    """uvicorn serving ``app``, closing connections idle for 1 s, on a thread of its own."""
    sock = bind_socket("127.0.0.1", 0, "keep-alive test server")
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                           timeout_keep_alive=1, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _block_until(lambda: server.started, "the server started")
    yield server, f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def idle_closing_server() -> Iterator[tuple[uvicorn.Server, str]]:
    """An echo server closing connections idle for 1 s."""
    yield from _serve(_echo)


@pytest.fixture
def idle_closing_model() -> Iterator[tuple[uvicorn.Server, str]]:
    """A model server (OpenAI chat completions) closing connections idle for 1 s."""
    yield from _serve(_model)


def _block_until(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Poll ``condition`` without yielding to any event loop (the point: the client's loop stays busy)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_request_on_a_connection_the_server_closed_idle_is_sent_again_once(
        idle_closing_server: tuple[uvicorn.Server, str], streamed: bool) -> None:
    server, url = idle_closing_server
    transport = AiohttpTransport(limits=pool_limits(4))
    assert transport.idle_keepalive_s > server.config.timeout_keep_alive  # the client would keep it longer
    extensions = {STREAM_EXTENSION: True} if streamed else {}
    async with httpx.AsyncClient(base_url=url, transport=transport) as client:
        async def post(body: dict[str, int]) -> Any:
            async with client.stream("POST", "/turn", json=body, extensions=extensions) as response:
                await response.aread()
                assert response.status_code == 200
                return response.json()

        assert await post({"n": 1}) == {"n": 1}
        requests_before = server.server_state.total_requests
        # The loop is blocked here: the server's close reaches the client's socket unread, so the
        # pool still sees the connection open, as on a busy machine.
        _block_until(lambda: not server.server_state.connections, "the server closed the idle connection")
        assert await post({"n": 2}) == {"n": 2}  # a POST: aiohttp itself retries only idempotent methods
    assert transport.reused_retries == 1
    assert server.server_state.total_requests == requests_before + 1  # the dead attempt never reached the app


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_the_model_client_sends_a_call_again_once_when_the_server_closed_its_idle_connection(
        idle_closing_model: tuple[uvicorn.Server, str], streamed: bool) -> None:
    server, url = idle_closing_model
    settings = LLMSettings(base_url=f"{url}/v1", model="m", max_retries=0)  # no retry would save the call

    def ask(words: str) -> ChatRequest:
        return ChatRequest(model="m", messages=(ChatMessage("user", words),))

    async with OpenAIChatClient(settings) as client:
        async def call(words: str) -> str:
            if streamed:
                pieces: list[str] = []
                return (await client.chat_streamed(ask(words), pieces.append)).content
            return (await client.chat(ask(words))).content

        assert await call("first") == "first"
        requests_before = server.server_state.total_requests
        _block_until(lambda: not server.server_state.connections, "the server closed the idle connection")
        assert await call("second") == "second"
        assert client.reused_retries == 1 and client.retries == 0
    assert server.server_state.total_requests == requests_before + 1  # the dead attempt never reached the app


async def test_a_new_connection_that_dies_unanswered_is_not_sent_again() -> None:
    """The server may have read a request on a connection it had never served: the caller decides."""
    requests = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await reader.readuntil(b"\r\n\r\n")
        requests += 1
        writer.close()

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    transport = AiohttpTransport()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}",
                                     transport=transport) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post("/turn", content=b"{}")
    finally:
        listener.close()
        await listener.wait_closed()
    assert requests == 1 and transport.reused_retries == 0


def test_the_pool_never_keeps_an_idle_connection_as_long_as_servers_do() -> None:
    assert IDLE_KEEPALIVE_S < 5.0  # uvicorn's timeout_keep_alive default
    assert AiohttpTransport().idle_keepalive_s == IDLE_KEEPALIVE_S  # aiohttp's own default would be 15 s
    assert AiohttpTransport(limits=httpx.Limits(keepalive_expiry=15.0)).idle_keepalive_s == IDLE_KEEPALIVE_S
    assert AiohttpTransport(limits=httpx.Limits(keepalive_expiry=None)).idle_keepalive_s == IDLE_KEEPALIVE_S
    assert AiohttpTransport(limits=httpx.Limits(keepalive_expiry=1.0)).idle_keepalive_s == 1.0
    assert pool_limits(8).keepalive_expiry == IDLE_KEEPALIVE_S
