"""The model client's own CPU per call: what one chat, streamed chat or embedding call costs the
process that makes it, with the model answering at once.

Why a probe of its own: a thought-through turn makes ~5.6 chat and ~1.8 embedding calls, and in
the conversations' process the client's layers (once httpx above aiohttp, and a retry library)
were most of the turn's CPU (issue 38). Here the simulator runs in its own process
(:class:`~mirror.stack.processes.SimProcess`, zero latency, loopback), so the CPU time measured
(``time.process_time`` around ``calls`` sequential calls of each kind, after a warm-up) is the
client's alone: building the request, aiohttp's send and parse, the retry loop's attempt, reading
the answer (JSON, or each streamed chunk) and the provenance.

Production path: :class:`~mirror.cognition.openai_client.OpenAIChatClient` with the settings the
stack gives it (only ``base_url`` and ``model`` set), the requests shaped like the Talker's (a long
system prompt, a user message, ``max_tokens`` 200) and the embedder's (two short texts).

Run: ``python -m mirror.harness.bench.model_client [calls] [token_delay_ms]`` (JSON on stdout:
per kind, ``cpu_us_per_call`` and ``calls_per_s``). ``token_delay_ms`` paces a streamed answer's
tokens as a real model does (the simulator's ``--token-delay``; 0, the default, sends them at
once, so they arrive in a few reads): each piece that arrives on its own costs the client a read,
a wake-up and a chunk to parse. It imports nothing newer than the client's port, so
the same file run by an older checkout's Python measures that checkout's client.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable

from mirror.cognition.llm import ChatMessage, ChatRequest
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.stack.processes import SimProcess

KINDS = ("chat", "streamed", "embed")
WARM_UP_CALLS = 20
SYSTEM_PROMPT = "You are a thoughtful companion who remembers what the user said. " * 20


def _request(number: int) -> ChatRequest:
    user = f"Message {number}: tell me what you think about the weather this week. " * 5
    return ChatRequest(messages=(ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", user)),
                       model="mirror-sim", max_tokens=200)


def _call_of(kind: str, client: OpenAIChatClient) -> Callable[[int], Awaitable[object]]:
    def ignore(_piece: str) -> None:
        return None

    if kind == "chat":
        return lambda number: client.chat(_request(number))
    if kind == "streamed":
        return lambda number: client.chat_streamed(_request(number), ignore)
    return lambda number: client.embed([f"text {number} about the week", f"another text {number}"])


async def measure(base_url: str, calls: int) -> dict[str, dict[str, float]]:
    """Per kind: CPU µs per call in this process and calls per second, ``calls`` calls one after another."""
    figures: dict[str, dict[str, float]] = {}
    async with OpenAIChatClient(LLMSettings(base_url=base_url, model="mirror-sim")) as client:
        for kind in KINDS:
            call = _call_of(kind, client)
            for number in range(WARM_UP_CALLS):
                await call(number)
            cpu, wall = time.process_time(), time.perf_counter()
            for number in range(calls):
                await call(number)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            figures[kind] = {"cpu_us_per_call": round(cpu / calls * 1e6, 1), "calls_per_s": round(calls / wall, 1)}
    return figures


def main(argv: list[str]) -> None:
    calls = int(argv[0]) if argv else 500
    token_delay_ms = float(argv[1]) if len(argv) > 1 else 0.0
    sim = SimProcess(token_delay_ms=token_delay_ms).start()
    try:
        figures = asyncio.run(measure(sim.base_url, calls))
    finally:
        sim.stop()
    print(json.dumps({"calls": calls, "token_delay_ms": token_delay_ms, **figures}))


__all__ = ["KINDS", "main", "measure"]

if __name__ == "__main__":
    main(sys.argv[1:])
