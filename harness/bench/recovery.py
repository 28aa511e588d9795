"""``mirror bench recovery``: how long a crash costs a conversation, phase by phase.

Production path: turns through the HTTP gateway of the embedded stack; the kills are SIGKILLs
of the processes the stack runs (a conversation host or actor, the ingester), and recovery is
Ray's restart and the conversation's own rebuild.

On an embedded stack (simulator at a fixed latency) with ``conversations`` in a closed loop
(a short pause between turns), it makes two kinds of crash and measures what users see:

- **actor**: ``rounds`` times, the process holding one conversation (its host, or its own
  actor when dedicated) gets SIGKILL; that conversation's next turn is sent at once and timed
  to its 200. The time splits into the wait for a live process (Ray restarting the actor:
  everything the turn's ``Server-Timing`` does not account for), the rebuild from snapshot and
  tail (``rebuild_ms`` of the new activation), and the turn itself (``actor``). The other
  conversations keep turning; their latencies during the round are reported too (hosted, a
  host's neighbours share its crash).
- **ingester**: the shard's ingester process gets SIGKILL; turns go on (they never touch it)
  and their latency is compared with before; reads (``GET …/events``) are polled until they
  answer again.

Every answer's status is counted; a conversation that does not answer within ``timeout_s`` is
a failure, and the benchmark says so (exit status 1).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from mirror.events.ids import StreamKey
from mirror.harness.bench._stacks import sim_stack
from mirror.harness.bench._stats import percentile
from mirror.harness.bench.turns import server_timing
from mirror.stack.embedded import EmbeddedStack

__all__ = ["RecoveryBenchConfig", "run_recovery_bench"]

TENANT = "default"


@dataclass(frozen=True)
class RecoveryBenchConfig:
    placement: str = "hosted"
    conversations: int = 8
    rounds: int = 10
    pause_ms: float = 200.0
    """Each conversation's pause between its turns (closed loop)."""
    llm_latency_ms: float = 50.0
    ingester_kills: int = 2
    timeout_s: float = 60.0
    mode: str = "full"
    show_progress: bool = False


@dataclass
class Load:
    """Closed-loop turns on the conversations not being killed; latencies with their send time."""

    client: httpx.AsyncClient
    turns: list[tuple[float, float]] = field(default_factory=list)
    """(sent at, seconds) of every answered turn."""
    statuses: Counter[str] = field(default_factory=Counter)
    paused: set[str] = field(default_factory=set)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def turn(self, conversation: str, message: str) -> httpx.Response | None:
        sent = time.monotonic()
        try:
            response = await self.client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})
        except httpx.HTTPError as exc:
            self.statuses[type(exc).__name__] += 1
            return None
        self.statuses[str(response.status_code)] += 1
        if response.status_code == 200:
            self.turns.append((sent, time.monotonic() - sent))
        return response

    async def loop(self, conversation: str, pause_s: float) -> None:
        count = 0
        while not self.stop.is_set():
            if conversation in self.paused:
                await asyncio.sleep(0.02)
                continue
            count += 1
            await self.turn(conversation, f"{conversation} turn {count}")
            await asyncio.sleep(pause_s)

    def latencies(self, start: float, end: float) -> list[float]:
        return [seconds for sent, seconds in self.turns if start <= sent < end]


def _summary(values: list[float], digits: int = 3) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(values), "p50": round(percentile(values, 0.5), digits), "p99": round(percentile(values, 0.99), digits),
            "max": round(max(values), digits)}


async def _holder_pid(stack: EmbeddedStack, conversation: str) -> int:
    from mirror.actors.placement import conversation_handle

    return await asyncio.wait_for(conversation_handle(StreamKey(TENANT, conversation), stack.runtime).pid(), 30)


async def _rebuild_ms(stack: EmbeddedStack, conversation: str) -> float | None:
    from mirror.actors.placement import conversation_handle

    handle = conversation_handle(StreamKey(TENANT, conversation), stack.runtime)
    report = await asyncio.wait_for(handle.rebuild_report(), 30)
    return None if report is None else float(report.rebuild_ms)


async def _actor_rounds(stack: EmbeddedStack, load: Load, names: list[str], config: RecoveryBenchConfig,
                        progress: Any) -> dict[str, Any]:
    totals, restarts, rebuilds, turns, neighbours = [], [], [], [], []
    failures = 0
    for round_index in range(config.rounds):
        victim = names[round_index % len(names)]
        load.paused.add(victim)
        await asyncio.sleep(config.pause_ms / 1000 + 0.3)  # its turn in flight, if any, answered
        pid = await _holder_pid(stack, victim)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while True:
            response = await load.turn(victim, f"{victim} after kill {round_index}")
            if response is not None and response.status_code == 200:
                break
            if time.monotonic() - killed > config.timeout_s:
                failures += 1
                break
            await asyncio.sleep(0.05)
        total = time.monotonic() - killed
        if response is not None and response.status_code == 200:
            timing = server_timing(response.headers.get("server-timing", ""))
            rebuild = await _rebuild_ms(stack, victim)
            totals.append(total)
            turns.append(timing.get("actor", 0.0) / 1000)
            if rebuild is not None:
                rebuilds.append(rebuild / 1000)
            restarts.append(max(0.0, total - timing.get("actor", 0.0) / 1000 - (rebuild or 0.0) / 1000))
        neighbours.extend(load.latencies(killed, time.monotonic()))
        load.paused.discard(victim)
        progress(f"actor kill {round_index + 1}/{config.rounds}: next turn in {total:.2f} s")
        await asyncio.sleep(1.0)
    return {"rounds": config.rounds, "failed": failures, "next_turn_s": _summary(totals),
            "phases_s": {"until_a_live_process": _summary(restarts), "rebuild": _summary(rebuilds), "turn": _summary(turns)},
            "others_turn_s_meanwhile": _summary(neighbours)}


async def _ingester_rounds(stack: EmbeddedStack, load: Load, names: list[str], config: RecoveryBenchConfig,
                           progress: Any) -> dict[str, Any]:
    before_start = time.monotonic()
    await asyncio.sleep(3.0)
    before = load.latencies(before_start, time.monotonic())
    reads_back, during = [], []
    failures = 0
    for kill_index in range(config.ingester_kills):
        pid = await asyncio.to_thread(lambda: stack.ingesters[stack.runtime.shard_of(TENANT)].pid)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while True:
            response = await load.client.get(f"/v1/conversations/{names[0]}/events", params={"limit": 1})
            if response.status_code == 200:
                break
            if time.monotonic() - killed > config.timeout_s:
                failures += 1
                break
            await asyncio.sleep(0.05)
        reads_back.append(time.monotonic() - killed)
        await asyncio.sleep(2.0)
        during.extend(load.latencies(killed, time.monotonic()))
        progress(f"ingester kill {kill_index + 1}/{config.ingester_kills}: reads back in {reads_back[-1]:.2f} s")
        await asyncio.sleep(1.0)
    return {"kills": config.ingester_kills, "failed": failures, "reads_back_s": _summary(reads_back),
            "turn_s_before": _summary(before), "turn_s_after_kill": _summary(during)}


async def _measure(stack: EmbeddedStack, config: RecoveryBenchConfig) -> dict[str, Any]:
    def progress(line: str) -> None:
        if config.show_progress:
            print(line, flush=True)

    names = [f"recover-{index}" for index in range(config.conversations)]
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=config.timeout_s) as client:
        load = Load(client)
        for name in names:  # activated before the clock starts
            response = await load.turn(name, f"{name} opens")
            if response is None or response.status_code != 200:
                raise RuntimeError(f"{name} did not open: {None if response is None else response.text}")
        loops = [asyncio.create_task(load.loop(name, config.pause_ms / 1000)) for name in names]
        try:
            actor = await _actor_rounds(stack, load, names, config, progress)
            ingester = await _ingester_rounds(stack, load, names, config, progress)
        finally:
            load.stop.set()
            await asyncio.gather(*loops)
    return {"actor_kill": actor, "ingester_kill": ingester, "statuses": dict(load.statuses)}


def run_recovery_bench(config: RecoveryBenchConfig) -> dict[str, Any]:
    started = time.perf_counter()
    with sim_stack("recovery", config.llm_latency_ms, config.mode, placement=config.placement) as stack:
        result = asyncio.run(_measure(stack, config))
    return {"placement": config.placement, "conversations": config.conversations, "llm_latency_ms": config.llm_latency_ms,
            "pause_ms": config.pause_ms, **result, "elapsed_s": round(time.perf_counter() - started, 1)}
