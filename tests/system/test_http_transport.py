"""The aiohttp transport under httpx, against real loopback servers that behave and misbehave."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from mirror.cognition.http_transport import AiohttpTransport
from mirror.processes import free_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return lines[0], headers, body


async def _respond(writer: asyncio.StreamWriter, status: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def _client(base_url: str, **timeouts: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, transport=AiohttpTransport(limits=httpx.Limits(max_connections=4)),
                             timeout=httpx.Timeout(timeouts.get("read", 5.0), connect=timeouts.get("connect", 5.0)))


async def test_request_and_response_pass_through_unchanged(serve: Any) -> None:
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # one connection, several requests (keep-alive)
            try:
                seen.append(await _read_request(reader))
            except asyncio.IncompleteReadError:
                break
            payload = gzip.compress(json.dumps({"n": len(seen)}).encode())
            await _respond(writer, "201 Created", payload,
                           {"Content-Type": "application/json", "Content-Encoding": "gzip", "X-Thing": "a"})
        writer.close()

    async with _client(await serve(echo)) as client:
        first = await client.post("/v1/chat/completions?x=a%2Fb", json={"q": "ü"}, headers={"Authorization": "Bearer k"})
        second = await client.get("/v1/models")
    assert first.status_code == 201 and first.json() == {"n": 1}  # httpx decoded the gzip body
    assert first.headers["x-thing"] == "a" and first.http_version == "HTTP/1.1"
    assert second.json() == {"n": 2}
    (line, headers, body), (line2, _, body2) = seen
    assert line == "POST /v1/chat/completions?x=a%2Fb HTTP/1.1"  # the query is not re-quoted
    assert headers["authorization"] == "Bearer k" and headers["content-type"] == "application/json"
    assert json.loads(body) == {"q": "ü"}
    assert line2 == "GET /v1/models HTTP/1.1" and body2 == b""
    assert len(seen) == 2


async def test_refused_connection_is_a_connect_error() -> None:
    async with _client(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/")


async def test_a_server_that_never_answers_is_a_read_timeout(serve: Any) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    async with _client(await serve(silent), read=0.3) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/")


@pytest.mark.parametrize(("answer", "error"), [
    (b"", httpx.RemoteProtocolError),  # hangs up without a word
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":", httpx.ReadError),  # truncated body
    (b"this is not HTTP at all\r\n\r\n", httpx.RemoteProtocolError),
], ids=["hang-up", "truncated", "not-http"])
async def test_a_broken_answer_is_the_matching_httpx_error(serve: Any, answer: bytes, error: type[Exception]) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with _client(await serve(broken)) as client:
        with pytest.raises(error):
            await client.get("/")


async def test_the_pool_is_capped(serve: Any) -> None:
    connections = 0
    active = 0
    most = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, active, most
        connections += 1
        while True:
            try:
                await _read_request(reader)
            except asyncio.IncompleteReadError:
                break
            active += 1
            most = max(most, active)
            await asyncio.sleep(0.05)
            active -= 1
            await _respond(writer, "200 OK", b"{}")
        writer.close()

    async with _client(await serve(slow)) as client:
        responses = await asyncio.gather(*(client.get("/") for _ in range(12)))
    assert all(r.status_code == 200 for r in responses)
    assert most <= 4 and connections <= 4
