"""`mirror bench tenants`: fair share between tenants, and overload, through the HTTP gateway.

Production path: ``POST /v1/conversations/{id}/turns`` over HTTP to the gateway of the embedded
stack ``mirror up`` runs (hosted placement, memory and reflection on, the fair share's defaults),
the simulator as the model at a fixed latency (its embedding calls at no latency: the chat
model's slots are the scarce resource, as a GPU's are). Two tenants, each with a token of its own
(added to the stack's tenants file as ``mirror tenants add`` does). One run, four phases:

1. **capacity** — tenant A in a closed loop of ``capacity_users`` conversations (each sends its
   next turn as soon as the previous is answered; a refused one waits ``refused_pause_ms``):
   the admitted turns per second is the stack's capacity, its sustained goodput. By default as
   many conversations as the stack holds Talker calls (hosts × model slots × 2: each slot busy
   and one call waiting for it), so the model is always busy and nearly nothing is refused: a
   closed loop of more measures the stack while it also answers a flood of refusals, which is
   the overload step's question, not this one's.
2. **B alone** — tenant B's ``b_users`` conversations, each pausing 0.5–1.5 × ``b_pause_ms``
   (seeded) before every turn: B's p50/p99 unloaded.
3. **B with A** — the same B again while A floods in a closed loop of ``a_users`` conversations
   that retry a refused turn after ``refused_pause_ms`` (an aggressive client: it ignores
   ``Retry-After``). Targets: B's p99 with A ≤ 1.5 × alone; A's goodput ≥ 80 % of capacity minus
   B's share — B's share of the model slots in this phase (its turns and its thinking, both on
   B's fair share, read from the hosts' slot-time metrics); A's offered rate ≥ 10 × B's. The
   reading with B's turns alone subtracted is reported beside it
   (``a_goodput_over_capacity_minus_b_turns``).
   Capacity and overload, the two phases compared, each start with no thinking left from the
   phase before (``thinking_drained_s``); ``slot_time`` says where each phase's slot-time went.
4. **overload** — turns offered open loop at ``overload`` × capacity (evenly spaced, each on a
   conversation not waiting for a reply). Targets: goodput ≥ 0.9 × capacity; admitted turns'
   p99 ≤ 2 × the unloaded p99 (phase 2's); refusals answered within 50 ms (p99), each with a
   ``Retry-After``; no time-out.

Where B's time goes with A: ``b_with_a.admission_wait_*`` is the Talker's wait for a model
slot (Server-Timing ``talk`` minus ``llm``: the talk phase is the model call and the prompt
around it); ``b_thinking_shed`` counts B's thinking steps the fair share skipped.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mirror.cognition.http_transport import AiohttpTransport, pool_limits
from mirror.gateway.tenants import TenantRegistry
from mirror.harness.bench._slot_time import drain_thinking, read_slot_time, slot_fractions
from mirror.harness.bench._stats import percentile
from mirror.harness.bench.turns import server_timing
from mirror.processes import free_port
from mirror.stack.embedded import EmbeddedStack, StackSettings
from mirror.stack.processes import SimProcess

TENANT_A, TENANT_B = "tenant-a", "tenant-b"
CLIENT_TIMEOUT_S = 60.0
"""A turn not answered in this long is a time-out (counted; the target is none)."""


@dataclass(frozen=True, slots=True)
class TenantsBenchConfig:
    llm_latency_ms: float = 400.0
    b_users: int = 5
    b_pause_ms: float = 1000.0
    a_users: int = 64
    capacity_users: int | None = None
    """None: hosts × model slots × 2 (see the module docstring)."""
    refused_pause_ms: float = 100.0
    overload: float = 2.0
    phase_s: float = 20.0
    """Each measured phase's length (capacity and overload take ``phase_s`` × 0.75)."""
    model_slots: int | None = 4
    """Model calls per conversation host (None: ``mirror up``'s default, 16). Fewer than the default,
    so that the model is what runs out, as a GPU's slots do long before a gateway's CPU; with 16
    on this 2-core machine the CPU saturates first and no scheduler of model calls can help."""
    seed: int = 0


@dataclass
class Outcomes:
    """What one phase's turns came to, from the client's side."""

    admitted_ms: list[float] = field(default_factory=list)
    refused_ms: list[float] = field(default_factory=list)
    refused_without_retry_after: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    timeouts: int = 0
    errors: int = 0
    admission_wait_ms: list[float] = field(default_factory=list)

    @property
    def offered(self) -> int:
        return len(self.admitted_ms) + len(self.refused_ms) + self.timeouts + self.errors

    def figures(self, seconds: float) -> dict[str, Any]:
        admitted = self.admitted_ms
        return {
            "seconds": round(seconds, 2), "offered": self.offered, "admitted": len(admitted),
            "refused": len(self.refused_ms), "timeouts": self.timeouts, "errors": self.errors,
            "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
            "offered_per_s": round(self.offered / seconds, 2), "goodput_per_s": round(len(admitted) / seconds, 2),
            "p50_ms": round(statistics.median(admitted), 1) if admitted else None,
            "p99_ms": round(percentile(admitted, 0.99), 1) if admitted else None,
            "refusal_p99_ms": round(percentile(self.refused_ms, 0.99), 1) if self.refused_ms else None,
            "refused_without_retry_after": self.refused_without_retry_after,
            "admission_wait_p50_ms": round(statistics.median(self.admission_wait_ms), 1) if self.admission_wait_ms else None,
            "admission_wait_p99_ms": (round(percentile(self.admission_wait_ms, 0.99), 1)
                                      if self.admission_wait_ms else None),
        }


async def _turn(client: httpx.AsyncClient, token: str, conversation: str, message: str, into: Outcomes) -> bool:
    """One turn; its outcome recorded in ``into``; whether it was admitted."""
    started = time.perf_counter()
    try:
        response = await client.post(f"/v1/conversations/{conversation}/turns", json={"message": message},
                                     headers={"Authorization": f"Bearer {token}"})
    except httpx.TimeoutException:
        into.timeouts += 1
        return False
    elapsed = (time.perf_counter() - started) * 1000
    into.statuses[response.status_code] = into.statuses.get(response.status_code, 0) + 1
    if response.status_code == 200:
        into.admitted_ms.append(elapsed)
        timing = server_timing(response.headers.get("server-timing", ""))
        if "talk" in timing and "llm" in timing:
            into.admission_wait_ms.append(max(0.0, timing["talk"] - timing["llm"]))
        return True
    if response.status_code in (429, 503):
        into.refused_ms.append(elapsed)
        into.refused_without_retry_after += "retry-after" not in response.headers
    elif response.status_code == 504:
        into.timeouts += 1
    else:
        into.errors += 1
    return False


async def _closed_loop(client: httpx.AsyncClient, token: str, names: list[str], until: float, into: Outcomes,
                       refused_pause_s: float) -> None:
    async def user(name: str) -> None:
        index = 0
        while time.perf_counter() < until:
            if not await _turn(client, token, name, f"turn {index} of {name}", into):
                await asyncio.sleep(refused_pause_s)
            index += 1

    await asyncio.gather(*(user(name) for name in names))


async def _paced(client: httpx.AsyncClient, token: str, names: list[str], until: float, into: Outcomes,
                 pause_ms: float, seed: str) -> None:
    async def user(name: str) -> None:
        rng = random.Random(f"{seed}:{name}")
        index = 0
        while True:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * pause_ms / 1000)
            if time.perf_counter() >= until:
                return
            await _turn(client, token, name, f"turn {index} of {name}", into)
            index += 1

    await asyncio.gather(*(user(name) for name in names))


async def _open_loop(client: httpx.AsyncClient, token: str, rate: float, seconds: float, into: Outcomes,
                     prefix: str) -> None:
    """``rate`` turns a second, evenly spaced, each on a conversation not waiting for a reply."""
    idle: deque[str] = deque()
    made = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one(name: str, index: int) -> None:
        await _turn(client, token, name, f"open turn {index}", into)
        idle.append(name)

    started = time.perf_counter()
    for index in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
        if not idle:
            idle.append(f"{prefix}-{made}")
            made += 1
        task = asyncio.create_task(one(idle.popleft(), index))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def _shed_steps(client: httpx.AsyncClient, token: str, names: list[str]) -> int:
    shed = 0
    for name in names:
        response = await client.get(f"/v1/conversations/{name}/events", params={"limit": 1000},
                                    headers={"Authorization": f"Bearer {token}"})
        if response.status_code == 200:
            shed += sum(1 for event in response.json()["events"] if event["type"] == "thinker_failed"
                        and event["payload"].get("error_type") == "ThinkingShed")
    return shed


def _target(value: float | None, limit: float, at_most: bool) -> dict[str, Any]:
    passed = value is not None and (value <= limit if at_most else value >= limit)
    return {"value": value, "target": f"{'≤' if at_most else '≥'} {limit:g}", "pass": passed}


async def _measure(url: str, tokens: dict[str, str], config: TenantsBenchConfig, stack_slots: int) -> dict[str, Any]:
    """The four phases; ``stack_slots``: the model slots of all hosts together."""
    capacity_users = config.capacity_users or 2 * stack_slots
    limits = pool_limits(config.a_users + capacity_users + config.b_users + 512)  # idle under the server's keep-alive
    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S, limits=limits,
                                 transport=AiohttpTransport(limits=limits)) as client:
        token_a, token_b = tokens[TENANT_A], tokens[TENANT_B]
        b_names = [f"b-{index}" for index in range(config.b_users)]
        a_names = [f"a-{index}" for index in range(config.a_users)]
        warm = Outcomes()  # activate the conversations (and the hosts' connections) first
        await asyncio.gather(*(_turn(client, token_b, name, "hello", warm) for name in b_names),
                             *(_turn(client, token_a, name, "hello", warm) for name in a_names))
        pause_s = config.refused_pause_ms / 1000
        short = config.phase_s * 0.75

        drained = {"capacity": await drain_thinking(client)}  # both phases that are compared start drained
        slot_time = {"start": await read_slot_time(client)}
        capacity = Outcomes()
        await _closed_loop(client, token_a, a_names[:capacity_users] if capacity_users <= len(a_names)
                           else [f"cap-{index}" for index in range(capacity_users)],
                           time.perf_counter() + short, capacity, pause_s)
        capacity_per_s = len(capacity.admitted_ms) / short
        slot_time["capacity"] = await read_slot_time(client)

        alone = Outcomes()
        await _paced(client, token_b, b_names, time.perf_counter() + config.phase_s, alone, config.b_pause_ms,
                     f"{config.seed}:alone")
        slot_time["b_alone"] = await read_slot_time(client)

        b_with_a, a_flood = Outcomes(), Outcomes()
        until = time.perf_counter() + config.phase_s
        await asyncio.gather(
            _paced(client, token_b, b_names, until, b_with_a, config.b_pause_ms, f"{config.seed}:with"),
            _closed_loop(client, token_a, a_names, until, a_flood, pause_s))
        slot_time["b_with_a"] = await read_slot_time(client)

        drained["overload"] = await drain_thinking(client)
        slot_time["b_with_a_end"] = await read_slot_time(client)
        overloaded = Outcomes()
        await _open_loop(client, token_a, config.overload * capacity_per_s, short, overloaded, "over")
        slot_time["overload"] = await read_slot_time(client)
        shed = await _shed_steps(client, token_b, b_names)

    alone_f, with_f = alone.figures(config.phase_s), b_with_a.figures(config.phase_s)
    flood_f, over_f = a_flood.figures(config.phase_s), overloaded.figures(short)
    b_rate = with_f["goodput_per_s"]
    # B's share is what B used of the model slots beside A's flood: its turns and its thinking (both
    # run on B's fair share); A's due is the capacity less that share. B's turns alone, the earlier
    # reading, leave B's thinking in A's due: reported beside it.
    beside = slot_fractions(slot_time["b_alone"], slot_time["b_with_a"])
    b_slots = beside.get(f"talker:{TENANT_B}", 0.0) + beside.get(f"thinker:{TENANT_B}", 0.0)
    a_share = max(capacity_per_s * (1 - b_slots), 1e-9)
    ratio = (round(with_f["p99_ms"] / alone_f["p99_ms"], 2) if with_f["p99_ms"] and alone_f["p99_ms"] else None)
    targets = {
        "b_p99_with_a_over_alone": _target(ratio, 1.5, at_most=True),
        "a_offered_over_b_rate": _target(round(flood_f["offered_per_s"] / max(b_rate, 1e-9), 1), 10, at_most=False),
        "a_goodput_over_capacity_minus_b": _target(round(flood_f["goodput_per_s"] / a_share, 3), 0.8, at_most=False),
        "overload_goodput_over_capacity": _target(round(over_f["goodput_per_s"] / max(capacity_per_s, 1e-9), 3), 0.9,
                                                  at_most=False),
        "overload_admitted_p99_over_unloaded_p99": _target(
            round(over_f["p99_ms"] / alone_f["p99_ms"], 2) if over_f["p99_ms"] and alone_f["p99_ms"] else None, 2,
            at_most=True),
        "overload_refusal_p99_ms": _target(over_f["refusal_p99_ms"] if over_f["refused"] else 0.0, 50, at_most=True),
        "overload_refusals_without_retry_after": _target(over_f["refused_without_retry_after"], 0, at_most=True),
        "timeouts": _target(sum(phase.timeouts for phase in (capacity, alone, b_with_a, a_flood, overloaded)), 0,
                            at_most=True),
    }
    return {
        "benchmark": "tenants",
        "llm_latency_ms": config.llm_latency_ms,
        "model_slots_per_host": config.model_slots,
        "capacity_turns_per_s": round(capacity_per_s, 2),
        "capacity_users": capacity_users,
        "capacity": capacity.figures(short),
        "b_alone": alone_f,
        "b_with_a": with_f,
        "a_flood": flood_f,
        "b_thinking_shed": shed,
        "overload": {"offered_multiple": config.overload, **over_f},
        "slot_time": {phase: slot_fractions(slot_time[before], slot_time[phase]) for before, phase in
                      (("start", "capacity"), ("capacity", "b_alone"), ("b_alone", "b_with_a"),
                       ("b_with_a_end", "overload"))},
        "thinking_drained_s": drained,
        "targets": targets,
        "b_slot_share_beside_a": round(b_slots, 3),
        "a_goodput_over_capacity_minus_b_turns": round(flood_f["goodput_per_s"] / max(capacity_per_s - b_rate, 1e-9), 3),
        "all_pass": all(target["pass"] for target in targets.values()),
    }


@contextmanager
def _stack(config: TenantsBenchConfig) -> Iterator[tuple[EmbeddedStack, dict[str, str]]]:
    """The embedded stack against a simulator of our own (embeddings at no latency), and a token per tenant."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-tenants-") as data:
        sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}", embedding_latency="fixed:0",
                         log_path=Path(data) / "sim-llm.log").start()
        try:
            settings = StackSettings(data_dir=Path(data), llm=sim.base_url, llm_model="mirror-sim",
                                     gateway_port=free_port(), nats_port=free_port(), model_slots=config.model_slots)
            with EmbeddedStack(settings) as stack:
                registry = TenantRegistry(Path(data) / "tenants.json")  # as `mirror tenants add` does
                yield stack, {tenant: registry.add(tenant) for tenant in (TENANT_A, TENANT_B)}
        finally:
            sim.stop()


def run_tenants_bench(config: TenantsBenchConfig) -> dict[str, Any]:
    with _stack(config) as (stack, tokens):
        slots = stack.runtime.hosts * stack.runtime.llm.max_concurrency
        result = asyncio.run(_measure(stack.url, tokens, config, slots))
        result["hosts"] = stack.runtime.hosts
        result["model_slots_per_host"] = stack.runtime.llm.max_concurrency
        return result


__all__ = ["TENANT_A", "TENANT_B", "TenantsBenchConfig", "run_tenants_bench"]
