"""`mirror bench turns`: what Mirror adds to a turn, measured through the HTTP gateway.

Production path: ``POST /v1/conversations/{id}/turns`` over HTTP to the gateway of the embedded
stack ``mirror up`` runs (hosted placement, memory and reflection on: the defaults), the
simulator as the model.

C conversations × T turns against the embedded stack with the simulator at a fixed latency L.
Each conversation sends its next turn as soon as the previous reply arrives (a closed loop that
saturates a small machine), or, with ``pause_ms``, after a user's pause of 0.5–1.5 × that
(seeded), which also staggers the conversations' starts. This
process is the load generator only: the simulator runs as its own process and the gateway as
Ray actor processes (``gateways``; 0 puts it on a thread here, for comparison). The Talker
makes exactly one LLM call per turn, so overhead = client-observed latency − that call as
Mirror timed it (L plus the simulator's own work): the gateway,
the Ray actor hop, the fenced append acknowledged by JetStream, and the client's own work.
``floor_p50_ms`` is the raw cost of the hops a turn cannot avoid, measured in the same run (an
HTTP round trip through the gateway, a Ray actor call, a JetStream publish acknowledged), and
``overhead_over_floor_p50_ms`` what Mirror adds beyond them. ``cpu_ms_per_turn`` is the CPU the
stack's processes spent over the turns, per turn, by role (:mod:`._cpu`; ``all`` includes the
simulator and this load generator), not above idle; ``client_reused_retries`` the requests the
client sent again after a reused connection died unanswered (:mod:`mirror.cognition.http_transport`).
``memory`` turns Mirror's memory on (the default, as in production) or off; ``compare_memory``
runs the benchmark twice in one invocation, memory off then on, each on a fresh stack, and
reports ``memory_added_p50_ms`` — on's overhead p50 minus off's: what recall adds to the turn
path (the message's embedding call over loopback HTTP, the simulator's embedding work, the
recall itself, a longer Talker prompt, a two-event append) and whatever the memory stage's
background work costs the turns around it. The simulator's embedding calls take their own
latency (``embedding_latency_ms``, 0 by default), not the chat latency L: at L a 100 ms wait
per message would be charged to memory, which no embedding endpoint of one short message
takes; at 0 the figure is Mirror's own cost. ``recall_p50_ms`` is the recall phase as the
actor timed it (Server-Timing ``recall``), over the turns that recalled (``turns_with_recall``).
``thinking_backlog_share`` is the fraction of turns (after each conversation's first) that
arrived while the previous turn's thinking was still running — the Talker then answered from
an older narrative, as production mode intends.
``stream`` adds, in the same run, a streamed turn (``?stream=true``) beside every plain one
(alternating which goes first), against a simulator that waits ``token_delay_ms`` between the
tokens of a streamed answer, and reports under ``stream`` the time to first token and its
overhead over the model's own first token, sampled straight from the simulator while the turns
run, and the streamed whole-turn figures beside the plain ones (:mod:`._first_token`); the
top-level figures are then the plain turns'.
``compare_limits`` measures, in the same run, what per-tenant limits and idempotency add to a
turn: every other turn of each user goes to its twin conversation of a second tenant
(``bench-limited``) that has all four limits set (high enough never to refuse) and sends an
``Idempotency-Key``, the others to the stack's default tenant (no limits, no key); half the users
start with a limited turn, half with a plain one, so neither half has more of the first turns,
which meet a stack with no thinking left from the warm-up. Under
``limits`` are both halves' overheads and ``added_p50_ms``, the limited half's overhead p50
minus the plain half's (on a busy machine its noise is milliseconds), each phase of both halves
(``limited_phases_p50_ms``, ``phases_added_p50_ms``: the limits middleware is in ``client_and_http``,
the conversation's idempotency lookup in ``gateway_to_actor``), and ``admission_p50_ms``,
the gateway's own time deciding on the limits (Server-Timing ``limits``); the top-level figures
are then the plain half's.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mirror.actors.handle import ConversationHandle
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.http_transport import AiohttpTransport, pool_limits
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import nats_servers
from mirror.gateway.tenants import TenantLimits, TenantRegistry
from mirror.harness.bench._cpu import CpuMeter, settle
from mirror.harness.bench._first_token import model_first_tokens, stream_figures, streamed_turn
from mirror.harness.bench._stats import percentile
from mirror.processes import free_port
from mirror.serving import ThreadedServer
from mirror.stack.embedded import EmbeddedStack, StackSettings
from mirror.stack.processes import SimProcess
from mirror.tracing import TraceSettings


@dataclass(frozen=True, slots=True)
class TurnsBenchConfig:
    conversations: int = 20
    turns: int = 10
    llm_latency_ms: float = 100.0
    mode: str = "full"
    gateways: int = 1
    pause_ms: float = 0.0
    seed: int = 0
    memory: bool = True
    compare_memory: bool = False
    embedding_latency_ms: float = 0.0
    placement: str = "hosted"
    stream: bool = False
    token_delay_ms: float = 5.0
    """The simulator's wait between the tokens of a streamed answer (only streamed calls wait)."""
    metrics: bool = True
    """Prometheus metrics recorded and served in every process (``mirror up``'s default)."""
    compare_metrics: bool = False
    """Run three times, metrics off, on, then on with traces sampled at 1 %: what recording them
    adds to a turn (``metrics_added_p50_ms``, ``metrics_and_traces_added_p50_ms``)."""
    traces: TraceSettings = TraceSettings()
    """OpenTelemetry traces (:mod:`mirror.tracing`); off, as ``mirror up``'s default."""
    compare_limits: bool = False


LIMITED_TENANT = "bench-limited"
BENCH_LIMITS = TenantLimits(requests_per_minute=1_000_000, concurrent_turns=10_000, tokens_per_day=10**12,
                            live_conversations=100_000)
"""Every limit set, none ever reached: what the bookkeeping costs, not a refusal."""


def server_timing(header: str) -> dict[str, float]:
    """``llm;dur=101.2, append;dur=0.4`` -> {"llm": 101.2, "append": 0.4}."""
    timings = {}
    for part in header.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if duration:
            timings[name] = float(duration)
    return timings


async def _conversation(client: httpx.AsyncClient, name: str, turns: int, pause_ms: float = 0.0,
                        rng: random.Random | None = None, stream: bool = False,
                        limited_token: str | None = None, limited_first: bool = False) -> list[tuple[float, dict[str, Any]]]:
    """``turns`` plain turns; with ``stream`` a streamed one beside each (marked ``streamed``), alternating which
    goes first; with ``limited_token`` every other turn as the limited tenant, with a key (marked ``limited``):
    the odd ones, or with ``limited_first`` the even ones (half the users start with a limited turn, so
    neither half has more of the first turns, which meet a stack whose warm-up thinking is done)."""
    results = []
    for index in range(turns):
        if limited_token is not None and index % 2 == (0 if limited_first else 1):
            if pause_ms and rng is not None:
                await asyncio.sleep(rng.uniform(0.5, 1.5) * pause_ms / 1000)
            started = time.perf_counter()
            response = await client.post(f"/v1/conversations/{name}/turns", json={"message": f"message {index} of {name}"},
                                         headers={"Authorization": f"Bearer {limited_token}",
                                                  "Idempotency-Key": f"{name}-{index}-{uuid.uuid4().hex}"})
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            reply = response.json()
            reply["timings"] = server_timing(response.headers.get("server-timing", ""))
            reply["limited"] = True
            results.append((elapsed, reply))
            continue
        for streamed in ((False, True) if index % 2 == 0 else (True, False)) if stream else (False,):
            if pause_ms and rng is not None:
                # The user reads and types: a pause of 0.5–1.5 × the mean before every turn (the
                # first one too, which staggers the conversations' starts).
                await asyncio.sleep(rng.uniform(0.5, 1.5) * pause_ms / 1000)
            message = f"message {index}{'s' if streamed else ''} of {name}"
            if streamed:
                results.append(await streamed_turn(client, name, message))
                continue
            started = time.perf_counter()
            response = await client.post(f"/v1/conversations/{name}/turns", json={"message": message})
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            reply = response.json()
            reply["timings"] = server_timing(response.headers.get("server-timing", ""))
            results.append((elapsed, reply))
    return results


def _phase_samples(runs: list[list[tuple[float, dict[str, Any]]]]) -> dict[str, list[float]]:
    """Each phase of every timed turn (see :func:`turn_phases`), in the turns' order."""
    phases: dict[str, list[float]] = {"client_and_http": [], "gateway_to_actor": [], "embed": [], "recall_without_embed": [],
                                      "talker_without_llm": [], "append": []}
    for run in runs:
        for elapsed, reply in run:
            timing = reply["timings"]
            if not {"gateway", "actor", "talk", "llm", "append"} <= timing.keys():
                continue
            phases["client_and_http"].append(elapsed - timing["gateway"])
            phases["gateway_to_actor"].append(timing["gateway"] - timing["actor"])
            phases["embed"].append(timing.get("embed", 0.0))
            phases["recall_without_embed"].append(timing.get("recall", 0.0) - timing.get("embed", 0.0))
            phases["talker_without_llm"].append(timing["talk"] - timing["llm"])
            phases["append"].append(timing["append"])
    return phases


def turn_phases(runs: list[list[tuple[float, dict[str, Any]]]], share: float = 0.5) -> dict[str, float]:
    """Each phase of a turn at ``share`` (the median by default; 0.99: its p99), from the client's
    clock and the Server-Timing header.

    client_and_http: the client, HTTP and uvicorn; gateway_to_actor: the handler's own work and
    the Ray hop both ways (and the wait for the conversation's mailbox); embed: the message's
    embedding call, recall_without_embed: the rest of recall (both 0 without memory);
    talker_without_llm: prompt building and reply parsing around the LLM call; append: the fenced
    append until JetStream acknowledged it (after any thinking append already under way).
    """
    phases = _phase_samples(runs)
    if share == 0.5:
        return {name: round(statistics.median(values), 2) for name, values in phases.items() if values}
    return {name: round(percentile(values, share), 2) for name, values in phases.items() if values}


def tail_phases(runs: list[list[tuple[float, dict[str, Any]]]], share: float = 0.95) -> dict[str, float]:
    """The phases' means over the turns whose overhead is at or above its ``share`` percentile:
    which phase the slowest turns spent their extra time in (beside the medians, it names the tail)."""
    timed = [(elapsed, reply) for run in runs for elapsed, reply in run
             if {"gateway", "actor", "talk", "llm", "append"} <= reply["timings"].keys()]
    if not timed:
        return {}
    overheads = [elapsed - reply["llm_ms"] for elapsed, reply in timed]
    cut = percentile(overheads, share)
    slow = [item for item, overhead in zip(timed, overheads, strict=True) if overhead >= cut]
    phases = _phase_samples([slow])
    return {"turns": len(slow), "overhead_from_ms": round(cut, 2),
            **{name: round(statistics.fmean(values), 2) for name, values in phases.items() if values}}


async def _backlog(client: httpx.AsyncClient, name: str, warm_up: int = 1) -> tuple[int, int]:
    """(measured turns, of which the Talker saw a narrative older than the previous turn's).

    The first ``warm_up`` turns activated the actor (and, streaming, the streamed path); they are neither timed nor counted here.
    """
    events = (await client.get(f"/v1/conversations/{name}/events", params={"limit": 1000})).json()["events"]
    turn_of_narrative = {e["seq"]: e["turn"] for e in events if e["type"] == "narrative"}
    late = total = 0
    for event in events:
        if event["type"] != "turn" or event["turn"] < warm_up:
            continue
        total += 1
        seen = event["payload"]["narrative_seq"]
        if seen is None or turn_of_narrative.get(seen, -1) < event["turn"] - 1:
            late += 1
    return late, total


async def _floor(client: httpx.AsyncClient, nats_url: str, conversation: ConversationHandle, samples: int = 40,
                 pace_s: float = 0.05) -> dict[str, float]:
    """The raw latency of the hops no turn can avoid, measured in this run (p50, ms), one at a
    time every ``pace_s``: an HTTP round trip through the gateway (``GET /healthz``), a Ray call
    to a conversation's process and back (``pid``, a method that does nothing), and a JetStream publish
    until acknowledged (to a scratch stream on the same server, with a turn's payload size)."""
    import nats

    async def p50(step: Any) -> float:
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            await step()
            times.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(pace_s)
        return round(statistics.median(times), 2)

    nc = await nats.connect(nats_servers(nats_url), name="mirror-bench-floor")
    try:
        js = nc.jetstream()
        await js.add_stream(name="MIRROR_BENCH_FLOOR", subjects=["mirror_bench_floor"])
        try:
            floor = {
                "http": await p50(lambda: client.get("/healthz")),
                "ray_call": await p50(conversation.pid),
                "jetstream_append": await p50(lambda: js.publish("mirror_bench_floor", b"x" * 800)),
            }
        finally:
            await js.delete_stream("MIRROR_BENCH_FLOOR")
    finally:
        await nc.close()
    floor["total"] = round(sum(floor.values()), 2)
    return floor


async def _measure(url: str, token: str, config: TurnsBenchConfig, nats_url: str, runtime: RuntimeSettings,
                   sim_base_url: str, limited_token: str | None = None) -> dict[str, Any]:
    limits = pool_limits(config.conversations + 4)  # idle under the server's keep-alive
    # The load generator's own CPU per request counts in the overhead it measures: aiohttp under
    # httpx, as Mirror's model calls use, costs a fifth of httpx's default transport.
    transport = AiohttpTransport(limits=limits)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120,
                                 limits=limits, transport=transport) as client:
        names = [f"bench-{index}" for index in range(config.conversations)]
        await asyncio.gather(*(_conversation(client, name, 1) for name in names))  # activate the actors first
        if limited_token is not None:  # and the limited twins (index 1: the limited one)
            await asyncio.gather(*(_conversation(client, name, 2, limited_token=limited_token) for name in names))
        if config.stream:  # and the streamed path
            await asyncio.gather(*(streamed_turn(client, name, "warm-up") for name in names))
        from mirror.actors.placement import conversation_handle
        from mirror.stack.embedded import DEFAULT_TENANT

        conversation = conversation_handle(StreamKey(DEFAULT_TENANT, names[0]), runtime)  # its host, when hosted
        floor = await _floor(client, nats_url, conversation)
        meter = CpuMeter().start()
        started = time.perf_counter()
        rngs = [random.Random(f"{config.seed}:{name}") for name in names]
        turns_done = asyncio.Event()
        model = asyncio.create_task(model_first_tokens(sim_base_url, turns_done)) if config.stream else None
        try:
            runs = await asyncio.gather(*(_conversation(client, name, config.turns, config.pause_ms, rng, config.stream,
                                                        limited_token, limited_first=position % 2 == 1)
                                          for position, (name, rng) in enumerate(zip(names, rngs, strict=True))))
        finally:
            turns_done.set()
        wall = time.perf_counter() - started
        cpu = meter.stop()
        model_samples = await model if model is not None else []
        backlog = await asyncio.gather(*(_backlog(client, name, 2 if config.stream else 1) for name in names))
    streamed = [item for run in runs for item in run if item[1].get("streamed")]
    limited_phases = turn_phases([[item for item in run if item[1].get("limited")] for run in runs])
    limited = [elapsed - reply["llm_ms"] for run in runs for elapsed, reply in run if reply.get("limited")]
    admissions = [reply["timings"]["limits"] for run in runs for _, reply in run
                  if reply.get("limited") and "limits" in reply["timings"]]
    runs = [[item for item in run if not item[1].get("streamed") and not item[1].get("limited")] for run in runs]
    latencies = [elapsed for run in runs for elapsed, _ in run]
    # The simulator's own time is the Talker's LLM call as Mirror timed it (the configured
    # latency plus the simulator's work and its HTTP hop); the rest is Mirror's overhead.
    overheads = [elapsed - reply["llm_ms"] for run in runs for elapsed, reply in run]
    llm_times = [reply["llm_ms"] for run in runs for _, reply in run]
    late, total = sum(b[0] for b in backlog), sum(b[1] for b in backlog)
    recalls = [reply["timings"]["recall"] for run in runs for _, reply in run
               if reply.get("recall_seq") is not None and "recall" in reply["timings"]]
    return {
        "benchmark": "turns",
        "conversations": config.conversations,
        "turns": len(latencies),
        "llm_latency_ms": config.llm_latency_ms,
        "latency_p50_ms": round(statistics.median(latencies), 2),
        "llm_call_p50_ms": round(statistics.median(llm_times), 2),
        "overhead_p50_ms": round(statistics.median(overheads), 2),
        "overhead_p99_ms": round(percentile(overheads, 0.99), 2),
        "floor_p50_ms": floor,
        "overhead_over_floor_p50_ms": round(statistics.median(overheads) - floor["total"], 2),
        "turns_per_s": round((len(latencies) + len(streamed)) / wall, 1),
        "cpu_ms_per_turn": cpu.ms_per(len(latencies) + len(streamed)),
        "cpu_exited_processes": cpu.exited,
        "client_reused_retries": transport.reused_retries,
        "thinking_backlog_share": round(late / total, 3) if total else 0.0,
        "gateways": config.gateways,
        "placement": config.placement,
        "pause_ms": config.pause_ms,
        "phases_p50_ms": turn_phases(runs),
        "phases_p99_ms": turn_phases(runs, 0.99),
        "slowest_5_percent_phases_mean_ms": tail_phases(runs),
        "memory": config.memory,
        "embedding_latency_ms": config.embedding_latency_ms,
        "turns_with_recall": len(recalls),
        "recall_p50_ms": round(statistics.median(recalls), 2) if recalls else None,
        **({"limits": _limits_figures(limited, overheads, admissions, limited_phases, turn_phases(runs))}
           if limited_token is not None else {}),
        **({"stream": stream_figures(streamed, [item for run in runs for item in run], model_samples, floor,
                                     config.token_delay_ms)} if config.stream else {}),
    }


def _limits_figures(limited: list[float], plain: list[float], admissions: list[float], limited_phases: dict[str, float],
                    plain_phases: dict[str, float]) -> dict[str, Any]:
    """The limited tenant's keyed turns against the plain ones of the same run (overheads over the model, ms),
    each phase's p50 of both halves and what the limited half adds to it (``phases_added_p50_ms``), and the
    gateway's own time deciding on the limits (Server-Timing ``limits``), which scheduling noise spares."""
    return {
        "admission_p50_ms": round(statistics.median(admissions), 3) if admissions else None,
        "admission_p99_ms": round(percentile(admissions, 0.99), 3) if admissions else None,
        "limited_turns": len(limited), "plain_turns": len(plain), "limits": BENCH_LIMITS.as_dict(),
        "limited_overhead_p50_ms": round(statistics.median(limited), 2),
        "plain_overhead_p50_ms": round(statistics.median(plain), 2),
        "added_p50_ms": round(statistics.median(limited) - statistics.median(plain), 2),
        "limited_overhead_p99_ms": round(percentile(limited, 0.99), 2),
        "plain_overhead_p99_ms": round(percentile(plain, 0.99), 2),
        "limited_phases_p50_ms": limited_phases,
        "phases_added_p50_ms": {name: round(value - plain_phases[name], 2) for name, value in limited_phases.items()
                                if name in plain_phases},
    }


@contextmanager
def _stack(config: TurnsBenchConfig) -> Iterator[tuple[EmbeddedStack, SimProcess]]:
    """The embedded stack against a simulator of our own (its embedding latency set apart), and that simulator."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-turns-") as data:
        sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}",
                         embedding_latency=f"fixed:{config.embedding_latency_ms:g}",
                         token_delay_ms=config.token_delay_ms, log_path=Path(data) / "sim-llm.log").start()
        try:
            settings = StackSettings(
                data_dir=Path(data), llm=sim.base_url, llm_model="mirror-sim", mode=config.mode,
                memory=config.memory, gateway_port=free_port(), nats_port=free_port(),
                gateway_processes=config.gateways, placement=config.placement, metrics=config.metrics,
                traces=config.traces,
            )
            with EmbeddedStack(settings) as stack:
                yield stack, sim
        finally:
            sim.stop()


class _OtlpSink(ThreadedServer):
    """Takes OTLP/HTTP exports and counts them (the bench measures what sending costs Mirror, not a collector)."""

    def __init__(self) -> None:
        self.exports = 0

        async def take(request: Request) -> Response:
            await request.body()
            self.exports += 1
            return Response(b"", media_type="application/x-protobuf")

        async def healthz(request: Request) -> Response:  # what ThreadedServer waits on before serving
            return Response(b"ok")

        super().__init__(Starlette(routes=[Route("/v1/traces", take, methods=["POST"]), Route("/healthz", healthz)]),
                         name="otlp sink")


def _run_once(config: TurnsBenchConfig) -> dict[str, Any]:
    with _stack(config) as (stack, sim):
        limited_token = None
        if config.compare_limits:  # as `mirror tenants add` and `mirror tenants limits` do
            registry = TenantRegistry(stack.data_dir / "tenants.json")
            limited_token = registry.add(LIMITED_TENANT)
            limits = BENCH_LIMITS
            registry.set_limits(LIMITED_TENANT, requests_per_minute=limits.requests_per_minute,
                                concurrent_turns=limits.concurrent_turns, tokens_per_day=limits.tokens_per_day,
                                live_conversations=limits.live_conversations)
        return asyncio.run(_measure(stack.url, stack.token, config, stack.nats_url, stack.runtime, sim.base_url,
                                    limited_token))


def run_turns_bench(config: TurnsBenchConfig) -> dict[str, Any]:
    """One run (memory as ``config.memory``), or with ``compare_memory`` (``compare_metrics``) both, off then on."""
    if config.compare_metrics:
        off = _run_once(replace(config, metrics=False, compare_metrics=False))
        settled_s = settle()
        on = _run_once(replace(config, metrics=True, compare_metrics=False))
        settle()
        sink = _OtlpSink()
        with sink:  # spans exported over OTLP/HTTP to a receiver that takes them and answers 200
            traced = _run_once(replace(config, metrics=True, compare_metrics=False, traces=TraceSettings(True, (
                ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url), ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.01")))))
        return {"benchmark": "turns", "metrics_added_p50_ms": round(on["overhead_p50_ms"] - off["overhead_p50_ms"], 2),
                "metrics_added_over_floor_p50_ms": round(on["overhead_over_floor_p50_ms"]
                                                         - off["overhead_over_floor_p50_ms"], 2),
                "metrics_and_traces_added_p50_ms": round(traced["overhead_p50_ms"] - off["overhead_p50_ms"], 2),
                "traces_exported_requests": sink.exports,
                "settled_between_runs_s": settled_s, "metrics_off": off, "metrics_on": on,
                "metrics_on_traces_1_percent": traced}
    if not config.compare_memory:
        return _run_once(config)
    off = _run_once(replace(config, memory=False, compare_memory=False))
    settled_s = settle()
    on = _run_once(replace(config, memory=True, compare_memory=False))
    return {
        "benchmark": "turns",
        "memory_added_p50_ms": round(on["overhead_p50_ms"] - off["overhead_p50_ms"], 2),
        "memory_added_over_floor_p50_ms": round(on["overhead_over_floor_p50_ms"] - off["overhead_over_floor_p50_ms"], 2),
        "recall_p50_ms": on["recall_p50_ms"],
        "settled_between_runs_s": settled_s,
        "memory_off": off,
        "memory_on": on,
    }


__all__ = ["BENCH_LIMITS", "LIMITED_TENANT", "TurnsBenchConfig", "run_turns_bench", "server_timing", "tail_phases", "turn_phases"]
