"""A conversation's own CPU per thought-through turn, in one process: the host's share of a turn.

Why a probe of its own: ``mirror bench reflection`` measures the conversations' processes by
``/proc`` over a paced run of a whole stack, and on a shared 2-core machine that figure moves by
a fifth from run to run (the machine's other work, Ray's and NATS's timing). This probe keeps
only what a conversation host runs itself — the turn (recall, the Talker), the Thinker's stages
(thinking, memory, the insight, reflections when due), the fenced appends and their folds, the
model client's calls — and takes ``time.process_time`` around ``turns`` turns, each waiting for
its thinking (``sync``), after a warm-up: CPU, not wall time, so another process's load moves it
little. What it leaves out: Ray's calls into the host, the JetStream client and the broker (the
in-memory bus and log stand in, :class:`~mirror.events.memory_infrastructure.InMemoryInfrastructure`,
whose log ingests inside each append: the same work in every run).

Production path: the conversation of a :class:`~mirror.actors.placement.local.LocalPlacement`
(the same :class:`~mirror.actors.placement.table.HostedConversations` a host runs) with the
runtime's defaults (memory and reflection on), the simulator in its own process
(:class:`~mirror.stack.processes.SimProcess`, zero latency), the scripted user of ``bench
reflection`` (:mod:`._script`).

Run: ``python -m mirror.harness.bench.host_turn [turns] [warm_up_turns]`` (JSON on stdout:
``cpu_ms_per_turn``, the model calls and events per turn). It imports nothing newer than the
placement's port, so the same file run by an older checkout's Python measures that checkout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.harness.bench._script import script
from mirror.stack.processes import SimProcess

KEY = StreamKey("bench", "host-turn")


async def measure(base_url: str, turns: int, warm_up: int) -> dict[str, Any]:
    """CPU ms per thought-through turn over ``turns`` turns after ``warm_up`` ones, and the log's events."""
    infrastructure = InMemoryInfrastructure()
    local = LocalPlacement(RuntimeSettings(infrastructure, LLMSettings(base_url=base_url, model="mirror-sim")))
    messages = script(warm_up + turns)
    try:
        conversation = local.handle(KEY)
        for message in messages[:warm_up]:
            await conversation.turn(TurnRequest(message, sync=True))
        before = len(await infrastructure.event_log.read(KEY))
        cpu, wall = time.process_time(), time.perf_counter()
        for message in messages[warm_up:]:
            await conversation.turn(TurnRequest(message, sync=True))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        events = len(await infrastructure.event_log.read(KEY)) - before
    finally:
        await local.close()
    return {"cpu_ms_per_turn": round(cpu / turns * 1000, 2), "wall_ms_per_turn": round(wall / turns * 1000, 2),
            "events_per_turn": round(events / turns, 2)}


def main(argv: list[str]) -> None:
    turns = int(argv[0]) if argv else 60
    warm_up = int(argv[1]) if len(argv) > 1 else 10
    sim = SimProcess().start()
    try:
        figures = asyncio.run(measure(sim.base_url, turns, warm_up))
        calls = sim.stats()
    finally:
        sim.stop()
    per_turn = {f"{kind}_per_turn": round(calls[kind] / (turns + warm_up), 2) for kind in ("chat_calls", "embedding_calls")}
    print(json.dumps({"turns": turns, "warm_up_turns": warm_up, **figures, **per_turn}))


__all__ = ["main", "measure"]

if __name__ == "__main__":
    main(sys.argv[1:])
