"""`mirror bench timetravel`: how long ``state_at`` takes, wherever in a long history it looks.

One conversation of N events (turns, monologues, narratives, beliefs, edges) appended fenced
through JetStream and committed by an ingester process; then ``state_at`` at random positions
through the log's NATS read API — the path the gateway's ``/state`` takes. The first look folds
the whole history once and leaves a snapshot every 200 events (reported as
``cold_first_call_ms``); every later look folds at most one interval, wherever it lands.
``ratio_deep_vs_shallow`` = p50 at position N-100 / p50 at position 100.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Belief, Edge, Monologue, Narrative, Turn
from mirror.harness.bench._stacks import nats_and_ingester
from mirror.harness.bench._stats import percentile
from mirror.replay import History

__all__ = ["TimeTravelBenchConfig", "history_events", "run_timetravel_bench"]


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
        "p50_ms": round(percentile(times, 0.5), 2),
        "p99_ms": round(percentile(times, 0.99), 2),
        "shallow_p50_ms": round(statistics.median(shallow), 2),
        "deep_p50_ms": round(statistics.median(deep), 2),
        "ratio_deep_vs_shallow": round(statistics.median(deep) / statistics.median(shallow), 3),
    }


def run_timetravel_bench(config: TimeTravelBenchConfig) -> dict[str, Any]:
    with nats_and_ingester() as log_stack:
        return asyncio.run(_timetravel(config, log_stack.url))
