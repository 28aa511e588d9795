"""`mirror bench actors`: many conversations under a live-actor cap, and what re-activation costs.

N conversations (1,000 by default) on the embedded stack with ``max_live_actors`` = 64, so the
directory passivates the least recently used actors as others activate. Their history is
seeded straight through the fenced bus (turns, monologues and narratives, as Mirror writes
them) and committed by the ingester: most conversations get a short history, a few a long one
(10 and 10,000 events by default).

1. Every conversation gets one turn through the HTTP gateway; ``errors`` counts turns that got
   no reply. The measured conversations go first, so the other activations crowd them out and
   they passivate (finish thinking, snapshot, exit).
2. Each measured conversation is then sent a turn, one at a time, alternating short and long:
   re-activation = client-observed latency − the Talker's LLM call as Mirror timed it (process
   start, rebuild, the fenced append, the gateway and the HTTP hop). ``ratio`` = long p50 /
   short p50; a rebuild from the snapshot alone makes it ~1 whatever the history's length.

The actors' own rebuild reports (snapshot seq, log tail, stream messages read, rebuild time)
are included, so a ratio above 1 can be traced to its cause.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
import ray

from mirror.actors.bench._stacks import sim_stack
from mirror.actors.bench._stats import percentile
from mirror.actors.conversation import RebuildReport
from mirror.actors.directory import DIRECTORY_NAME, NAMESPACE
from mirror.actors.stack.embedded import DEFAULT_TENANT, EmbeddedStack
from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Monologue, Narrative, Provenance, Turn


@dataclass(frozen=True, slots=True)
class ActorsBenchConfig:
    conversations: int = 1_000
    max_live_actors: int = 64
    long_conversations: int = 16
    short_events: int = 10
    long_events: int = 10_000
    samples: int = 16
    """Re-activations measured per history length (at most the conversations of that length)."""
    concurrency: int = 8
    """Turns in flight at once while activating every conversation."""
    llm_latency_ms: float = 20.0
    mode: str = "full"
    timeout_s: float = 7_200.0


_PROVENANCE = Provenance(
    model="mirror-sim", prompt_set="bench", request_fingerprint="0" * 64,
    parameters={"temperature": 0.7, "max_tokens": 3000}, latency_ms=100.0, prompt_tokens=900, completion_tokens=120,
)


def seeded_history(key: StreamKey, events: int) -> list[Event]:
    """``events`` valid events for a new conversation: turn, monologue, narrative, turn, …"""
    history = []
    for seq in range(1, events + 1):
        turn, kind = divmod(seq - 1, 3)
        if kind == 0:
            payload: Any = Turn(f"user message {turn}: " + "tell me more " * 6, f"reply {turn}: " + "certainly " * 15,
                                narrative_seq=seq - 1 or None)
        elif kind == 1:
            payload = Monologue(f"I reason about turn {turn}.", f"I remember turn {turn - 1}.", "I aim to help.")
        else:
            payload = Narrative(f"After turn {turn} I know the user wants more detail. " * 4, monologue_seq=seq - 1)
        history.append(make_event(key, seq, payload, turn=turn, provenance=_PROVENANCE if kind else None))
    return history


async def seed(nats_url: str, histories: dict[StreamKey, int], *, shard: str = "0", timeout_s: float = 300.0) -> int:
    """Append each conversation's seeded history through the fenced bus; wait until the log has it.

    Returns the number of events appended. The conversations must be new (empty on the bus).
    """
    bus = await JetStreamBus.connect(nats_url)
    try:
        batches = [(key, seeded_history(key, length), Head(0, 0)) for key, length in histories.items()]
        results = await bus.append_many(batches)
        conflicts = [result for result in results if isinstance(result, AppendConflict)]
        if conflicts:
            raise conflicts[0]
        newest = max(result.fence for result in results if isinstance(result, Head))
        if not await LogClient(bus.nc, shard=shard).wait_committed(newest, timeout_s):
            raise TimeoutError(f"the log did not commit stream seq {newest} within {timeout_s}s")
    finally:
        await bus.close()
    return sum(len(events) for _, events, _ in batches)


async def _turn(client: httpx.AsyncClient, name: str, message: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = await client.post(f"/v1/conversations/{name}/turns", json={"message": message})
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed, response.json()


def _alive(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return False
    return True


async def _wait_passivated(names: list[str], timeout_s: float) -> list[str]:
    """Wait until none of ``names`` has a live actor; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    alive = list(names)
    while alive and time.monotonic() < deadline:
        alive = [name for name in alive if _alive(name)]
        if alive:
            await asyncio.sleep(0.2)
    return alive


def _report(name: str) -> RebuildReport | None:
    try:
        actor: Any = ray.get_actor(name, namespace=NAMESPACE)  # Any: Ray types its methods, found at run time, as Never
        report: RebuildReport = ray.get(actor.rebuild_report.remote(), timeout=60)
        return report
    except Exception:  # crowded out again already: the report went with it
        return None


async def _measure(stack: EmbeddedStack, config: ActorsBenchConfig) -> dict[str, Any]:
    long_count = min(config.long_conversations, config.conversations)
    names = [f"actors-{index}" for index in range(config.conversations)]
    lengths = {name: config.long_events if index < long_count else config.short_events
               for index, name in enumerate(names)}
    long_names = names[:long_count][:config.samples]
    short_names = names[long_count:][:config.samples]
    measured = set(long_names + short_names)
    # The measured conversations activate first, so every later activation crowds them out.
    order = [name for name in names if name in measured] + [name for name in names if name not in measured]

    started = time.perf_counter()
    seeded = await seed(stack.nats_url, {StreamKey(DEFAULT_TENANT, name): length for name, length in lengths.items()})
    seed_s = time.perf_counter() - started

    errors: list[str] = []
    turns = 0
    limits = httpx.Limits(max_connections=config.concurrency + 4)
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"},
                                 timeout=300, limits=limits) as client:
        slots = asyncio.Semaphore(config.concurrency)

        async def first_turn(name: str) -> None:
            nonlocal turns
            async with slots:
                try:
                    await _turn(client, name, "first message after the history")
                    turns += 1
                except Exception as exc:
                    errors.append(f"{name}: {exc!r}")

        activate_started = time.perf_counter()
        await asyncio.gather(*(first_turn(name) for name in order))
        activate_s = time.perf_counter() - activate_started

        still_alive = await _wait_passivated(sorted(measured), timeout_s=300)
        if still_alive:
            errors.append(f"{len(still_alive)} measured conversations never passivated: {still_alive[:3]}")

        reactivations: dict[str, list[float]] = {"short": [], "long": []}
        reports: dict[str, list[RebuildReport]] = {"short": [], "long": []}
        pairs = [(kind, name) for pair in zip(short_names, long_names, strict=False) for kind, name in zip(("short", "long"), pair, strict=True)]
        for kind, name in pairs:
            try:
                elapsed, reply = await _turn(client, name, "a message after passivation")
                turns += 1
            except Exception as exc:
                errors.append(f"{name}: {exc!r}")
                continue
            reactivations[kind].append(elapsed - reply["llm_ms"])
            report = _report(f"{DEFAULT_TENANT}/{name}/main")
            if report is not None:
                reports[kind].append(report)
    seconds = time.perf_counter() - started

    directory_actor: Any = ray.get_actor(DIRECTORY_NAME, namespace=NAMESPACE)  # Any: as in _report
    directory: dict[str, Any] = ray.get(directory_actor.stats.remote())
    short_p50 = statistics.median(reactivations["short"]) if reactivations["short"] else float("nan")
    long_p50 = statistics.median(reactivations["long"]) if reactivations["long"] else float("nan")
    result: dict[str, Any] = {
        "benchmark": "actors",
        "conversations": config.conversations,
        "max_live_actors": config.max_live_actors,
        "turns": turns,
        "errors": len(errors),
        "seeded_events": seeded,
        "passivations": directory["passivations"],
        "live_at_end": directory["live"],
    }
    for kind, events in (("short", config.short_events), ("long", config.long_events)):
        values, rebuilt = reactivations[kind], reports[kind]
        result[f"reactivate_p50_ms_{events}"] = round(statistics.median(values), 1) if values else None
        result[f"reactivate_p90_ms_{events}"] = round(percentile(values, 0.9), 1) if values else None
        result[f"rebuild_p50_ms_{events}"] = (
            round(statistics.median(r.rebuild_ms for r in rebuilt), 2) if rebuilt else None)
        result[f"snapshot_bytes_max_{events}"] = max((r.snapshot_bytes for r in rebuilt), default=None)
        result[f"from_snapshot_{events}"] = sum(
            r.snapshot_seq is not None and r.log_tail_events == 0 and r.stream_messages_read == 0
            for r in rebuilt)
        result[f"measured_{events}"] = len(values)
    result["ratio"] = round(long_p50 / short_p50, 3) if reactivations["short"] and reactivations["long"] else None
    result.update({"seed_s": round(seed_s, 1), "activate_s": round(activate_s, 1), "seconds": round(seconds, 1)})
    if errors:
        result["first_errors"] = errors[:3]
    return result


def run_actors_bench(config: ActorsBenchConfig) -> dict[str, Any]:
    with sim_stack("actors", config.llm_latency_ms, config.mode, max_live_actors=config.max_live_actors) as stack:
        return asyncio.run(asyncio.wait_for(_measure(stack, config), config.timeout_s))


__all__ = ["ActorsBenchConfig", "run_actors_bench", "seed", "seeded_history"]
