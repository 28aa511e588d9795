"""`mirror bench timetravel`: how long ``state_at`` takes, wherever in a long history it looks.

Production path: ``GET /v1/conversations/{id}/state?at=`` — the reader the gateway builds for a
shard, :func:`~mirror.replay.history.serving_history` (snapshots read and written through the
shard's log, the runtime's default interval, the latest position settled against the bus),
asking the ingester over NATS; the HTTP hop and the JSON of the answer are not timed.

One conversation of N events (turns, monologues, narratives, beliefs, edges) appended fenced
through JetStream and committed by an ingester process. Then the first look, at the last
position (``cold_first_call_ms``), folds the whole history and leaves a snapshot at every
interval (200 events), as the gateway's reader does for any history it folds further than one
interval — the same rows, at the same interval, a live conversation writes as it goes; the bench
then checks that every interval has its snapshot (``snapshots``), so what is timed next is the
state a user's stack is in. Every later look folds at most one interval, wherever it lands:
``p50_ms``/``p99_ms`` at random positions; ``ratio_deep_vs_shallow`` = p50 at position N-100 /
p50 at position 100.
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
from mirror.events.infrastructure import Connections
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.payloads import Belief, Edge, Monologue, Narrative, Turn
from mirror.harness.bench._stacks import nats_and_ingester
from mirror.harness.bench._stats import percentile
from mirror.projections.snapshot import PROJECTION_VERSION
from mirror.replay import History, serving_history
from mirror.replay.history import SNAPSHOT_EVERY

__all__ = ["TimeTravelBenchConfig", "bench_history", "history_events", "measure_timetravel", "run_timetravel_bench"]

TENANT = "bench"


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


def bench_history(connections: Connections, tenant: str = TENANT) -> History:
    """The reader the bench times: the gateway's own (``GatewayRuntime.history``), with the
    runtime's default snapshot interval (``RuntimeSettings.snapshot_every``), as a stack
    started with defaults has it, but keeping no looked-at state: the bench looks at the same
    positions again and again, and times the fold, not the answer kept from the last look."""
    history = serving_history(connections.log(tenant), connections.bus, snapshot_every=SNAPSHOT_EVERY)
    history.keep_states = 0
    return history


async def measure_timetravel(connections: Connections, config: TimeTravelBenchConfig) -> dict[str, Any]:
    """Append the history through ``connections``, wait until its log has committed it, and time
    ``state_at`` through :func:`bench_history` (see the module docstring)."""
    key = StreamKey(TENANT, "long-conversation")
    events = history_events(key, config.events)
    bus, log = connections.bus, connections.log(TENANT)
    head = (await bus.head(key)).with_last_seq(0)
    for start in range(0, len(events), 500):
        head = await bus.append(key, events[start:start + 500], head)
    if not await log.wait_committed(head.fence, timeout=120):
        raise RuntimeError("the log did not commit the history within 120 s")
    history = bench_history(connections)

    async def timed(seq: int) -> float:
        started = time.perf_counter()
        state = await history.state_at(key, seq)
        elapsed = (time.perf_counter() - started) * 1000
        if state.last_seq != seq:
            raise RuntimeError(f"state_at({seq}) answered the state at {state.last_seq}")
        return elapsed

    cold = await timed(config.events)
    snapshots = await _snapshots_in_place(history, key, config.events)
    rng = random.Random(config.seed)
    positions = [rng.randint(1, config.events) for _ in range(config.lookups)]
    times = [await timed(seq) for seq in positions]
    shallow = [await timed(min(100, config.events)) for _ in range(50)]
    deep = [await timed(max(1, config.events - 100)) for _ in range(50)]
    return {
        "benchmark": "timetravel",
        "events": config.events,
        "lookups": config.lookups,
        "snapshot_every": history.snapshot_every,
        "snapshots": snapshots,
        "cold_first_call_ms": round(cold, 2),
        "p50_ms": round(percentile(times, 0.5), 2),
        "p99_ms": round(percentile(times, 0.99), 2),
        "shallow_p50_ms": round(statistics.median(shallow), 2),
        "deep_p50_ms": round(statistics.median(deep), 2),
        "ratio_deep_vs_shallow": round(statistics.median(deep) / statistics.median(shallow), 3),
    }


async def _snapshots_in_place(history: History, key: StreamKey, events: int) -> int:
    """How many interval boundaries hold a snapshot; an error if one does not (the timed looks
    would then fold more than one interval, which no user's stack does)."""
    boundaries = range(history.snapshot_every, events + 1, history.snapshot_every)
    for boundary in boundaries:
        loaded = await history.log.load(key, projection_version=PROJECTION_VERSION, until_seq=boundary)
        if loaded.snapshot is None or loaded.snapshot.seq != boundary:
            found = None if loaded.snapshot is None else loaded.snapshot.seq
            raise RuntimeError(f"no snapshot at seq {boundary} after the first look (the newest before it: {found})")
    return len(boundaries)


async def _timetravel(config: TimeTravelBenchConfig, nats_url: str) -> dict[str, Any]:
    connections = await NatsInfrastructure(nats_url).connect(name="mirror-bench-timetravel")
    try:
        return await measure_timetravel(connections, config)
    finally:
        await connections.close()


def run_timetravel_bench(config: TimeTravelBenchConfig) -> dict[str, Any]:
    with nats_and_ingester() as log_stack:
        return asyncio.run(_timetravel(config, log_stack.url))
