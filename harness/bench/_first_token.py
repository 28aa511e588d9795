"""`mirror bench turns --stream`: a streamed turn as its client sees it, and the model's own first token.

:func:`streamed_turn` sends ``POST …/turns?stream=true`` and times the first ``event: token``
(time to first token, from the client's clock) and the final ``event: turn`` (the whole turn).
:func:`model_first_tokens` is the limit beside it, measured in the same run: streamed calls made
straight to the simulator's ``/v1/chat/completions`` (the same token delay the Talker's calls
get), one at a time every ``pace_s`` while the turns run, each timed to its first content chunk
and to its end. :func:`stream_figures` sets the two side by side, with the plain turns of the
same run: first-token overhead = a streamed turn's first token − the model's first-token p50.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import httpx

from mirror.cognition.chat_stream import SSEDecoder
from mirror.cognition.http_transport import STREAM_EXTENSION
from mirror.harness.bench._stats import percentile

__all__ = ["model_first_tokens", "stream_figures", "streamed_turn"]

MODEL_SAMPLES_AT_LEAST = 20
"""The model's first token is sampled at least this often, after the turns if they end sooner."""


async def streamed_turn(client: httpx.AsyncClient, name: str, message: str) -> tuple[float, dict[str, Any]]:
    """(whole turn ms, the turn's JSON with ``first_token_ms`` and ``streamed``) of one streamed turn."""
    request = client.build_request("POST", f"/v1/conversations/{name}/turns", params={"stream": "true"},
                                   json={"message": message}, extensions={STREAM_EXTENSION: True})
    started = time.perf_counter()
    response = await client.send(request, stream=True)
    first_token_ms: float | None = None
    turn: dict[str, Any] | None = None
    try:
        if response.status_code >= 400:
            await response.aread()
            response.raise_for_status()
        buffer = b""
        async for piece in response.aiter_raw():
            buffer += piece
            while (end := buffer.find(b"\n\n")) >= 0:
                event, buffer = buffer[:end], buffer[end + 2:]
                if event.startswith(b"event: token"):
                    if first_token_ms is None:
                        first_token_ms = (time.perf_counter() - started) * 1000
                elif event.startswith(b"event: turn"):
                    turn = json.loads(event.split(b"\ndata: ", 1)[1])
                elif event.startswith(b"event: error"):
                    raise RuntimeError(f"the streamed turn of {name} failed: {event.decode()}")
    finally:
        await response.aclose()
    elapsed = (time.perf_counter() - started) * 1000
    if turn is None or first_token_ms is None:
        raise RuntimeError(f"the streamed turn of {name} ended without {'a token' if turn else 'its turn event'}")
    return elapsed, {**turn, "first_token_ms": first_token_ms, "streamed": True, "timings": {}}


async def model_first_tokens(sim_base_url: str, done: asyncio.Event, pace_s: float = 0.05) -> list[tuple[float, float]]:
    """(first content chunk ms, whole call ms) of streamed calls straight to the simulator, one at a
    time every ``pace_s`` until ``done`` is set (and at least :data:`MODEL_SAMPLES_AT_LEAST`)."""
    body = {"model": "mirror-sim", "stream": True,
            "messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "A message like a user's, to time the first token."}]}
    samples: list[tuple[float, float]] = []
    async with httpx.AsyncClient(base_url=sim_base_url, timeout=60) as sim:
        while not done.is_set() or len(samples) < MODEL_SAMPLES_AT_LEAST:
            request = sim.build_request("POST", "/chat/completions", json=body)
            decoder, first = SSEDecoder(), None
            started = time.perf_counter()
            response = await sim.send(request, stream=True)
            try:
                response.raise_for_status()
                async for piece in response.aiter_raw():
                    for payload in decoder.feed(piece):
                        if first is None and payload != "[DONE]" and _content(payload):
                            first = (time.perf_counter() - started) * 1000
            finally:
                await response.aclose()
            if first is None:
                raise RuntimeError("the simulator's streamed answer had no content")
            samples.append((first, (time.perf_counter() - started) * 1000))
            await asyncio.sleep(pace_s)
    return samples


def _content(payload: str) -> str:
    choices = json.loads(payload).get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


def _p(values: list[float], share: float) -> float:
    return round(percentile(values, share), 2)


def stream_figures(streamed: list[tuple[float, dict[str, Any]]], plain: list[tuple[float, dict[str, Any]]],
                   model: list[tuple[float, float]], floor: dict[str, float], token_delay_ms: float) -> dict[str, Any]:
    """The streamed turns beside the model's own first token and beside the plain turns of the same run.

    ``first_token_overhead_*``: a streamed turn's first token − the model's first-token p50 (the
    simulator's latency and work, its HTTP hop), i.e. Mirror's gateway, Ray hop, recall and
    relay before the first piece. ``*_over_floor_p50_ms`` subtracts the hops the bench measures
    (``floor_p50_ms.total``: HTTP, a Ray call, a JetStream ack); ``*_over_path_floor_p50_ms`` only
    the two on the first token's path (HTTP and a Ray call: no append comes before it). Whole
    turns: overhead = client latency − the Talker's call as Mirror timed it (streamed, that call
    includes the token delays), so streamed and plain overheads compare although their calls differ.
    """
    model_first = [first for first, _ in model]
    model_first_p50 = statistics.median(model_first)
    first_overheads = [reply["first_token_ms"] - model_first_p50 for _, reply in streamed]
    overheads = [elapsed - reply["llm_ms"] for elapsed, reply in streamed]
    plain_overheads = [elapsed - reply["llm_ms"] for elapsed, reply in plain]
    first_overhead_p50 = statistics.median(first_overheads)
    path_floor = floor["http"] + floor["ray_call"]
    return {
        "token_delay_ms": token_delay_ms,
        "turns": len(streamed),
        "first_token_p50_ms": round(statistics.median(reply["first_token_ms"] for _, reply in streamed), 2),
        "first_token_p99_ms": _p([reply["first_token_ms"] for _, reply in streamed], 0.99),
        "model_first_token_p50_ms": round(model_first_p50, 2),
        "model_first_token_p99_ms": _p(model_first, 0.99),
        "model_call_p50_ms": round(statistics.median(whole for _, whole in model), 2),
        "model_samples": len(model),
        "first_token_overhead_p50_ms": round(first_overhead_p50, 2),
        "first_token_overhead_p99_ms": _p(first_overheads, 0.99),
        "first_token_overhead_over_floor_p50_ms": round(first_overhead_p50 - floor["total"], 2),
        "first_token_overhead_over_path_floor_p50_ms": round(first_overhead_p50 - path_floor, 2),
        "latency_p50_ms": round(statistics.median(elapsed for elapsed, _ in streamed), 2),
        "latency_p99_ms": _p([elapsed for elapsed, _ in streamed], 0.99),
        "llm_call_p50_ms": round(statistics.median(reply["llm_ms"] for _, reply in streamed), 2),
        "overhead_p50_ms": round(statistics.median(overheads), 2),
        "overhead_p99_ms": _p(overheads, 0.99),
        "overhead_over_floor_p50_ms": round(statistics.median(overheads) - floor["total"], 2),
        "plain_latency_p50_ms": round(statistics.median(elapsed for elapsed, _ in plain), 2),
        "plain_latency_p99_ms": _p([elapsed for elapsed, _ in plain], 0.99),
        "plain_overhead_p50_ms": round(statistics.median(plain_overheads), 2),
        "plain_overhead_p99_ms": _p(plain_overheads, 0.99),
        "streamed_minus_plain_overhead_p50_ms": round(statistics.median(overheads) - statistics.median(plain_overheads), 2),
        "streamed_minus_plain_overhead_p99_ms": round(percentile(overheads, 0.99) - percentile(plain_overheads, 0.99), 2),
    }
