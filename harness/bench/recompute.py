"""`mirror bench recompute`: how close re-thinking a tenant comes to the model's own limit.

Production path: the recompute driver ``POST /v1/recompute`` runs (``RecomputeJob`` and
``run_recompute``: Ray tasks over the shard's log, its slices and in-flight bound), called here
directly rather than through HTTP and the driver actor, against the simulator.

N conversations of T recorded turns, re-thought on a branch by Ray tasks against the simulator
at fixed latency L with at most C chat calls in flight. The ideal rate is
C / (chat calls per conversation × L); ``efficiency`` = achieved / ideal. Ray's worker processes
are started before the clock starts (``warmup_s``), as they are on a running cluster.

What the ideal assumes: the C chat slots are the only limit, i.e. a conversation's own chain of
calls is shorter than its share of the slots' time. With memory on (T = 4, turns recorded alone)
a conversation makes 15 chat calls (monologue, controller and extraction per turn, a contradiction
check from the second turn on) and 7 embedding calls (one per memory step, one per recall from
the second turn on), the simulator charging each embedding L too. Its critical path is 11 L: the
memory step runs beside the thinking and the next message is embedded meanwhile, so a turn costs
the longer of monologue → controller (2 L) and extraction → embedding → check (3 L, 2 L at the
first turn). 16 conversations in flight over 11 L outrun 16 slots over 15 L, so the slots bind
and the ideal holds. (Run one after another, the 22 calls were a 22 L path: at most 15/22 = 0.68
of this ideal.) ``max_chat_in_flight`` shows the bound was kept; ``embedding_calls`` go to the
embedding model, outside it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import ray

from mirror.actors.recompute_driver import MAX_PER_TASK, RecomputeJob, run_recompute, start_slice
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.prompts import default_prompt_set
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Turn
from mirror.harness.bench._stacks import nats_and_ingester
from mirror.replay import RecomputePlan
from mirror.stack.processes import SimProcess

__all__ = ["RecomputeBenchConfig", "run_recompute_bench"]


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
        last = max(result.fence for result in results)  # type: ignore[union-attr]  # fresh streams, one writer each: no conflict
        assert await LogClient(bus.nc).wait_committed(last, timeout=120), "the ingester did not commit the seed"
    finally:
        await bus.close()


def run_recompute_bench(config: RecomputeBenchConfig) -> dict[str, Any]:
    tenant = "benchrc"
    with nats_and_ingester() as log_stack:
        nats_url = log_stack.url
        sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}").start()  # its own process: not our GIL
        ray.init(address="local", namespace="mirror", include_dashboard=False, log_to_driver=False)
        try:
            asyncio.run(_seed(nats_url, tenant, config))
            runtime = RuntimeSettings(infrastructure=NatsInfrastructure(nats_url), llm=LLMSettings(base_url=sim.base_url, model="mirror-sim",
                                                                         max_concurrency=config.concurrency))
            warm = time.perf_counter()
            warmups = [start_slice(runtime, RecomputePlan(default_prompt_set(), branch="warmup"), [], 1)
                       for _ in range(max(1, -(-config.concurrency // MAX_PER_TASK)))]
            for stream in warmups:  # start the task workers (nothing to re-think)
                ray.get(list(stream))
            warmup_s = time.perf_counter() - warm
            before = sim.stats()
            job = RecomputeJob(tenant, RecomputePlan(default_prompt_set()), concurrency=config.concurrency)
            report = run_recompute(runtime, job)
            after = sim.stats()
            calls = after["chat_calls"] - before["chat_calls"]
            embedding_calls = after["embedding_calls"] - before["embedding_calls"]
        finally:
            ray.shutdown()
            sim.stop()
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
        "embedding_calls": embedding_calls,
        "max_chat_in_flight": after["max_chat_in_flight"],
        "max_in_flight": after["max_in_flight"],
        "events_written": report["events_written"],
        "warmup_s": round(warmup_s, 3),
        "seconds": seconds,
        "conversations_per_s": round(achieved, 3),
        "ideal_conversations_per_s": round(ideal, 3),
        "efficiency": round(achieved / ideal, 3),
    }
