"""`mirror bench timetravel` and `mirror bench recompute`.

timetravel: one conversation of N events (turns, monologues, narratives, beliefs, edges)
appended fenced through JetStream and committed by an ingester process; then ``state_at`` at
random positions through the log's NATS read API — the path the gateway's ``/state`` takes.
The first look folds the whole history once and leaves a snapshot every 200 events (reported
as ``cold_first_call_ms``); every later look folds at most one interval, wherever it lands.
``ratio_deep_vs_shallow`` = p50 at position N-100 / p50 at position 100.

recompute: N conversations of T recorded turns, re-thought on a branch by Ray tasks against
the simulator at fixed latency L with at most C model calls in flight. The ideal rate is
C / (calls per conversation × L); ``efficiency`` = achieved / ideal. Ray's worker processes
are started before the clock starts (``warmup_s``), as they are on a running cluster.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.actors.stack.processes import IngesterProcess, SimProcess
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.prompts import default_prompt_set
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief, Edge, Monologue, Narrative, Turn


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def history_events(key: StreamKey, count: int) -> list[Event]:
    """A long conversation's events: every turn thought about, beliefs and edges accumulating."""
    events: list[Event] = []
    cycle = ("turn", "monologue", "narrative", "belief", "edge")
    for seq in range(1, count + 1):
        turn, kind = (seq - 1) // len(cycle), cycle[(seq - 1) % len(cycle)]
        if kind == "turn":
            payload: Any = Turn(f"user message {turn}: " + "words " * 20, f"reply {turn}: " + "answer " * 30,
                                narrative_seq=seq - 2 if turn else None)
        elif kind == "monologue":
            payload = Monologue(f"I reason about turn {turn}.", f"I remember turn {turn - 1}.", "My goal is to help.")
        elif kind == "narrative":
            payload = Narrative(f"After turn {turn} I understand: " + "the user prefers care. " * 20,
                                monologue_seq=seq - 1)
        elif kind == "belief":
            belief = f"b{turn % 60}"
            payload = Belief(belief, "assert" if turn < 60 else "reinforce", f"statement {belief}")
        else:
            payload = Edge(f"cause{turn % 40}", "leads_to", f"effect{turn % 40}",
                           operation="assert" if turn < 40 else "reinforce")
        events.append(make_event(key, seq, payload, turn=turn, timestamp=1_700_000_000.0 + seq))
    return events


@dataclass(frozen=True, slots=True)
class TimeTravelBenchConfig:
    events: int = 10_000
    lookups: int = 200
    seed: int = 7


async def _timetravel(config: TimeTravelBenchConfig, nats_url: str) -> dict[str, Any]:
    from mirror.replay import History

    key = StreamKey("bench", "long-conversation")
    events = history_events(key, config.events)
    bus = await JetStreamBus.connect(nats_url)
    try:
        head = (await bus.head(key)).with_last_seq(0)
        for start in range(0, len(events), 500):
            head = await bus.append(key, events[start:start + 500], head)
        log = LogClient(bus.nc)
        assert await log.wait_committed(head.fence, timeout=120), "the ingester did not commit the history"
        history = History(log)

        async def timed(seq: int) -> float:
            started = time.perf_counter()
            state = await history.state_at(key, seq)
            elapsed = (time.perf_counter() - started) * 1000
            assert state.last_seq == seq
            return elapsed

        cold = await timed(config.events)
        rng = random.Random(config.seed)
        positions = [rng.randint(1, config.events) for _ in range(config.lookups)]
        times = [await timed(seq) for seq in positions]
        shallow = [await timed(min(100, config.events)) for _ in range(50)]
        deep = [await timed(max(1, config.events - 100)) for _ in range(50)]
    finally:
        await bus.close()
    return {
        "benchmark": "timetravel",
        "events": config.events,
        "lookups": config.lookups,
        "cold_first_call_ms": round(cold, 2),
        "p50_ms": round(_percentile(times, 0.5), 2),
        "p99_ms": round(_percentile(times, 0.99), 2),
        "shallow_p50_ms": round(statistics.median(shallow), 2),
        "deep_p50_ms": round(statistics.median(deep), 2),
        "ratio_deep_vs_shallow": round(statistics.median(deep) / statistics.median(shallow), 3),
    }


def run_timetravel_bench(config: TimeTravelBenchConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir:
        server = EmbeddedNats(Path(workdir) / "nats").start()
        ingester = IngesterProcess(server.url, Path(workdir) / "log.duckdb").start()
        try:
            return asyncio.run(_timetravel(config, server.url))
        finally:
            ingester.stop()
            server.stop()


@dataclass(frozen=True, slots=True)
class RecomputeBenchConfig:
    conversations: int = 64
    turns: int = 4
    llm_latency_ms: float = 100.0
    concurrency: int = 16


async def _seed(nats_url: str, tenant: str, config: RecomputeBenchConfig) -> None:
    bus = await JetStreamBus.connect(nats_url)
    try:
        batches = []
        for index in range(config.conversations):
            key = StreamKey(tenant, f"c{index}")
            turns = [make_event(key, seq, Turn(f"question {seq} of {index}", f"answer {seq} of {index}"), turn=seq - 1)
                     for seq in range(1, config.turns + 1)]
            batches.append((key, turns, (await bus.head(key)).with_last_seq(0)))
        results = await bus.append_many(batches)
        last = max(result.fence for result in results)  # type: ignore[union-attr]
        assert await LogClient(bus.nc).wait_committed(last, timeout=120), "the ingester did not commit the seed"
    finally:
        await bus.close()


def run_recompute_bench(config: RecomputeBenchConfig) -> dict[str, Any]:
    import ray

    from mirror.actors.conversation import RuntimeSettings
    from mirror.actors.recompute_driver import MAX_PER_TASK, RecomputeJob, recompute_slice, run_recompute
    from mirror.replay import RecomputePlan

    tenant = "benchrc"
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir:
        server = EmbeddedNats(Path(workdir) / "nats").start()
        ingester = IngesterProcess(server.url, Path(workdir) / "log.duckdb").start()
        sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}").start()  # its own process: not our GIL
        ray.init(namespace="mirror", include_dashboard=False, log_to_driver=False)
        try:
            asyncio.run(_seed(server.url, tenant, config))
            runtime = RuntimeSettings(nats_url=server.url, llm=LLMSettings(base_url=sim.base_url, model="mirror-sim",
                                                                           max_concurrency=config.concurrency))
            warm = time.perf_counter()
            warmups = [recompute_slice.remote(runtime, RecomputePlan(default_prompt_set(), branch="warmup"), [], 1)
                       for _ in range(max(1, -(-config.concurrency // MAX_PER_TASK)))]
            for stream in warmups:  # start the task workers (nothing to re-think)
                ray.get(list(stream))
            warmup_s = time.perf_counter() - warm
            calls_before = sim.stats()["chat_calls"]
            job = RecomputeJob(tenant, RecomputePlan(default_prompt_set()), concurrency=config.concurrency)
            report = run_recompute(runtime, job)
            calls = sim.stats()["chat_calls"] - calls_before
        finally:
            ray.shutdown()
            sim.stop()
            ingester.stop()
            server.stop()
    seconds = report["seconds"]
    calls_per_conversation = calls / config.conversations
    achieved = report["completed"] / seconds
    ideal = config.concurrency / (calls_per_conversation * config.llm_latency_ms / 1000)
    return {
        "benchmark": "recompute",
        "conversations": config.conversations,
        "turns": config.turns,
        "llm_latency_ms": config.llm_latency_ms,
        "concurrency": config.concurrency,
        "completed": report["completed"],
        "failed": report["failed"],
        "model_calls": calls,
        "calls_per_conversation": round(calls_per_conversation, 2),
        "events_written": report["events_written"],
        "warmup_s": round(warmup_s, 3),
        "seconds": seconds,
        "conversations_per_s": round(achieved, 3),
        "ideal_conversations_per_s": round(ideal, 3),
        "efficiency": round(achieved / ideal, 3),
    }


__all__ = ["RecomputeBenchConfig", "TimeTravelBenchConfig", "run_recompute_bench", "run_timetravel_bench"]
