"""Read your writes over HTTP: once a turn is answered with seq N, the very first read of every
read route includes N, though the log commits it up to a second later.

The ingester lingers 1 s before each commit (``--linger-ms 1000``), so right after a turn the
log is behind the stream (the test checks it is, for at least one turn); nothing sleeps or polls
between the turn and the reads: each route is read once, at once, and must include N. Real
NATS, ingester process, DuckDB, Ray, gateway over HTTP and the simulator.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from mirror.cognition.persona import EXAMPLES
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack

pytestmark = pytest.mark.long  # ~25 s: an ingester lingering 1 s; .ci/run runs it with -m long

SHARD = "ryw"
LINGER_MS = 1000.0
"""The ingester's longest linger: a turn's events reach the log up to a second after its answer."""
FIRST_EVENT_S = 30.0
"""Bound on reading a stream's first event, so a broken catch-up fails instead of hanging."""


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("ryw"), shard=SHARD, latency="fixed:0",
                       ingest_linger_ms=LINGER_MS) as (url, tokens):
        yield url, tokens["acme"]


Turn = Callable[[httpx.AsyncClient, str, str], Awaitable[int]]
"""``turn(client, conversation, message)``: the seq the turn was answered with."""


async def native(client: httpx.AsyncClient, conversation: str, message: str) -> int:
    answer = await client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["seq"])


async def native_persona(client: httpx.AsyncClient, conversation: str, message: str) -> int:
    answer = await client.post(f"/v1/conversations/{conversation}/turns", json={
        "message": message, "mind": "persona", "persona": json.loads((EXAMPLES / "wren.json").read_text())})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["seq"])


async def native_streamed(client: httpx.AsyncClient, conversation: str, message: str) -> int:
    async with client.stream("POST", f"/v1/conversations/{conversation}/turns", params={"stream": "true"},
                             json={"message": message}) as answer:
        assert answer.status_code == 200, await answer.aread()
        event, turn = "", None
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "turn":
                turn = json.loads(line.removeprefix("data: "))
    assert turn is not None, "the stream ended without its turn"
    return int(turn["seq"])


async def openai(client: httpx.AsyncClient, conversation: str, message: str) -> int:
    answer = await client.post("/v1/chat/completions", headers={"X-Mirror-Conversation": conversation},
                               json={"model": "mirror", "messages": [{"role": "user", "content": message}]})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["mirror"]["seq"])


async def openai_streamed(client: httpx.AsyncClient, conversation: str, message: str) -> int:
    seq = None
    async with client.stream("POST", "/v1/chat/completions", headers={"X-Mirror-Conversation": conversation},
                             json={"model": "mirror", "stream": True,
                                   "messages": [{"role": "user", "content": message}]}) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for line in answer.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line.removeprefix("data: "))
                seq = chunk.get("mirror", {}).get("seq", seq)
    assert seq is not None, "no chunk carried mirror.seq"
    return int(seq)


async def first_streamed_seq(client: httpx.AsyncClient, conversation: str, after: int) -> int:
    """The seq of the first event ``/stream?after=`` sends (its catch-up)."""
    async def first() -> int:
        async with client.stream("GET", f"/v1/conversations/{conversation}/stream", params={"after": after}) as answer:
            assert answer.status_code == 200, await answer.aread()
            async for line in answer.aiter_lines():
                if line.startswith("id: "):
                    return int(line.removeprefix("id: "))
        raise AssertionError("the stream ended before its first event")
    return await asyncio.wait_for(first(), FIRST_EVENT_S)


async def reads_after(client: httpx.AsyncClient, conversation: str, seq: int, *, persona: bool) -> dict[str, Any]:
    """Every read route, each asked once and all at once; what each says about ``seq``."""
    base = f"/v1/conversations/{conversation}"

    async def get(path: str, **params: Any) -> Any:
        answer = await client.get(path, params=params)
        assert answer.status_code == 200, (path, params, answer.status_code, answer.text)
        return answer.json()

    async def stream() -> int:
        return await first_streamed_seq(client, conversation, seq - 1)

    checks: dict[str, Awaitable[Any]] = {
        "events": get(f"{base}/events", limit=1000),
        "events page": get(f"{base}/events", after=seq - 1, limit=1),
        "state": get(f"{base}/state"), "state at": get(f"{base}/state", at=seq),
        "why": get(f"{base}/why", seq=seq), "stream": stream(),
        "summary": get(base), "list": get("/v1/conversations"),
        "memory": get(f"{base}/memory", query="what do you remember?"),
        "reflections": get(f"{base}/reflections"), "diff": get(f"{base}/diff"),
        "portrait": get(f"{base}/portrait"), "beliefs": get(f"{base}/beliefs"),
    }
    if persona:
        checks |= {"persona": get(f"{base}/persona"), "persona at": get(f"{base}/persona", at=seq)}
    answers = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
    listed = {c["id"]: c for c in answers["list"]["conversations"]}
    seen = {
        "events": seq in [e["seq"] for e in answers["events"]["events"]],
        "events page": [e["seq"] for e in answers["events page"]["events"]] == [seq],
        "state": answers["state"]["seq"] >= seq, "state at": answers["state at"]["seq"] == seq,
        "why": answers["why"]["subject"]["seq"] == seq and answers["why"]["event"]["seq"] == seq,
        "stream": answers["stream"] == seq, "summary": answers["summary"]["last_seq"] >= seq,
        "list": conversation in listed and listed[conversation]["last_seq"] >= seq,
        "memory": answers["memory"]["seq"] >= seq, "reflections": answers["reflections"]["seq"] >= seq,
        "diff": int(answers["diff"]["target"].rpartition("@")[2]) >= seq,
        "portrait": answers["portrait"]["seq"] >= seq, "beliefs": answers["beliefs"]["seq"] >= seq,
    }
    if persona:
        seen |= {"persona": answers["persona"]["seq"] >= seq, "persona at": answers["persona at"]["seq"] == seq}
    return seen


TURNS: dict[str, Turn] = {"native": native, "native-streamed": native_streamed, "openai": openai,
                          "openai-streamed": openai_streamed, "persona": native_persona}


def test_every_read_right_after_a_turn_includes_its_seq(stack: tuple[str, str], nats_server: EmbeddedNats) -> None:
    url, token = stack

    async def scenario() -> list[bool]:
        nc = await connect_nats(nats_server.url, name="ryw-probe")
        log = LogClient(nc, shard=SHARD)
        behind: list[bool] = []
        try:
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                         timeout=60) as client:
                for name, turn in TURNS.items():
                    conversation = f"ryw-{name}"
                    for message in ("My sister Ana lives in Porto.", "She is visiting next week."):
                        seq = await turn(client, conversation, message)
                        behind.append(await log.last_seq(StreamKey("acme", conversation)) < seq)
                        seen = await reads_after(client, conversation, seq, persona=name == "persona")
                        assert all(seen.values()), (name, message, seq, [r for r, ok in seen.items() if not ok])
        finally:
            await nc.close()
        return behind

    behind = asyncio.run(scenario())
    assert any(behind), "the log was never behind right after a turn: the test did not race the ingester"


def test_a_stream_catches_up_from_the_log_then_goes_on_live(stack: tuple[str, str]) -> None:
    url, token = stack

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            first = await native(client, "ryw-live", "Hello.")
            async with client.stream("GET", "/v1/conversations/ryw-live/stream", params={"after": 0}) as answer:
                assert answer.status_code == 200
                lines = answer.aiter_lines()
                seqs: list[int] = []
                second: int | None = None
                async for line in lines:
                    if not line.startswith("id: "):
                        continue
                    seqs.append(int(line.removeprefix("id: ")))
                    if seqs[-1] == first and second is None:  # caught up: a turn now arrives live
                        second = await native(client, "ryw-live", "Still there?")
                    if second is not None and seqs[-1] >= second:
                        break
                assert seqs == list(range(1, len(seqs) + 1)), seqs  # from the start, no gap, nothing twice

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_bad_stream_positions_are_refused(stack: tuple[str, str]) -> None:
    url, token = stack
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        assert client.get("/v1/conversations/ryw-nobody/stream", params={"after": 0}).status_code == 404
        assert client.get("/v1/conversations/ryw-nobody/stream", params={"after": -1}).status_code == 422
