"""`mirror bench reflection`: what reflection costs a long conversation, with it on and off in one run.

Production path: turns through the HTTP gateway of the embedded stack with memory and reflection
on (the defaults), the default reflection policy but for its hourly cap (lifted: see below).

One conversation of ``turns`` turns (1,000 by default) through the HTTP gateway of an embedded
stack, memory on, ``full`` mode, the simulator at ``llm_latency_ms`` (100 ms; its embedding
calls at 0 ms, as in ``bench turns``), and the same again on a fresh stack with reflection off:
the same scripted user (:mod:`._script`), the same seeded pauses. The user pauses 0.5–1.5 ×
``pause_ms`` before each turn, as a person reads and types; thinking (monologue, controller,
memory, and with reflection the insight and, when due, the reflection) runs meanwhile and may
still be running when the next turn arrives — reflection is never on a turn's path, and this
is where it would show if it were. ``wait_for_thinking`` instead waits for each turn's thinking
before the pause (every turn thought through: the reflections fall at the turns the policy
names, which the system test checks).

Per run: the client-observed turn latency (p50, p90) and Mirror's overhead over the Talker's
model call; CPU ms per turn by process role (:mod:`._cpu`: ``mirror`` is the conversations,
the gateway, the ingester and NATS; the simulator, Ray's own processes and the load generator
apart) from the first measured turn until the last turn's thinking is done and committed; the
model calls per turn (the simulator's counters); the events per turn; the thinking backlog when
the last reply arrived (turns not yet thought through, remembered, given an insight, reflected
on) and how long it took to drain. With reflection on, from the log: ``reflections``,
``rejected``, ``warnings``, ``overruled`` (decisions whose rule is not empty, by rule),
decayed and forgotten beliefs, the triggers and the turns reflected after.

The comparison: ``cpu_added_share`` = (on − off) / off of Mirror's CPU per turn as measured,
and ``cpu_added_share_above_idle`` the same once each role's idle rate (measured before and
after each run's turns, pooled) is taken off both: the stricter, on which the target (≤ 0.20)
is judged; ``latency_added_p50_ms`` (target ≤ 2 ms). ``added_per_turn`` says where the added
CPU went by role and what was added to do (model calls, events per turn); ``added_cost`` what
each added event cost the ingester and NATS and each added call the conversations' process,
and so ``insight_floor_ms_per_turn``: one more model call and one more event per turn, which
the insight alone brings.

The policy is the default one but for ``max_per_hour``: the run squeezes hours of a person's
conversation into minutes, and the hourly cap (a wall-clock runaway guard) would stop it at 6
reflections; the JSON names the policy used.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from mirror.actors.placement import conversation_handle
from mirror.cognition.http_transport import AiohttpTransport
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Insight, Reflection, ThinkerFailed, Turn
from mirror.harness.bench._cpu import CpuMeter, CpuSpent, settle
from mirror.harness.bench._hosts import progress_line
from mirror.harness.bench._script import script
from mirror.harness.bench._stats import percentile
from mirror.harness.bench.turns import server_timing, turn_phases
from mirror.processes import free_port
from mirror.projections.snapshot import state_from_snapshot
from mirror.projections.state import ConversationState
from mirror.stack.embedded import DEFAULT_TENANT, EmbeddedStack, StackSettings
from mirror.stack.processes import SimProcess

CPU_ADDED_SHARE_TARGET = 0.20
LATENCY_ADDED_P50_MS_TARGET = 2.0
CONVERSATION = "bench-reflection"


@dataclass(frozen=True, slots=True)
class ReflectionBenchConfig:
    turns: int = 1_000
    """Measured turns, after one warm-up turn that activates the conversation."""
    llm_latency_ms: float = 100.0
    pause_ms: float = 800.0
    """The user's mean pause before each turn (0.5–1.5 × this, seeded)."""
    wait_for_thinking: bool = False
    """Wait until the previous turn is thought through before the pause (every turn thought about)."""
    mode: str = "full"
    seed: int = 0
    max_per_hour: int = 1_000
    """The policy's hourly cap for this run (see the module docstring); the rest is the default policy."""
    compare: bool = True
    """Also run reflection off; False: reflection on alone (no comparison)."""
    placement: str = "hosted"
    idle_s: float = 15.0
    """Seconds the stack is measured idle before the turns and again after them (each role's CPU
    that ticks with time, not with turns: Ray's actors, polling consumers)."""
    drain_timeout_s: float = 600.0
    settle_at_most_s: float = 90.0
    """Between the runs, wait at most this long for the machine to be quiet (:func:`._cpu.settle`)."""
    show_progress: bool = False

    @property
    def policy(self) -> ReflectionPolicy:
        return replace(DEFAULT_POLICY, max_per_hour=self.max_per_hour)


# ---------------------------------------------------------------------------- figures (pure)

def latency_figures(answered: Sequence[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """Client latency and Mirror's overhead over the Talker's call, p50 and p90, and the phases' medians."""
    latencies = [elapsed for elapsed, _ in answered]
    overheads = [elapsed - reply["llm_ms"] for elapsed, reply in answered]
    return {
        "latency_p50_ms": round(statistics.median(latencies), 2),
        "latency_p90_ms": round(percentile(latencies, 0.9), 2),
        "overhead_p50_ms": round(statistics.median(overheads), 2),
        "overhead_p90_ms": round(percentile(overheads, 0.9), 2),
        "llm_call_p50_ms": round(statistics.median(reply["llm_ms"] for _, reply in answered), 2),
        "phases_p50_ms": turn_phases([list(answered)]),
    }


def backlog(state: ConversationState) -> dict[str, int]:
    """Turns the newest one is ahead of each stage: not thought through, not remembered, without
    an insight; and turns not yet reflected on (since the last reflection)."""
    newest = state.turn_count - 1

    def behind(done: int | None) -> int:
        return max(0, newest - (-1 if done is None else done))

    return {
        "thinking": behind(state.thought_turn),
        "memory": behind(state.memory_turn),
        "insight": behind(state.insight_turn) if state.reflection else 0,
        "not_reflected_on": state.counters.turns_since_reflection if state.reflection else 0,
    }


def reflection_figures(events: Sequence[Event]) -> dict[str, Any]:
    """What the log says reflection did: counts, overrulings by rule, triggers, the turns reflected after."""
    reflections = [event.payload for event in events if isinstance(event.payload, Reflection)]
    decisions = [decision for reflection in reflections for decision in reflection.decisions]
    overruled = Counter(rule for _, _, _, rule in decisions if rule)
    failures = Counter(event.payload.stage for event in events if isinstance(event.payload, ThinkerFailed))
    model_ms = sum(event.provenance.latency_ms for event in events
                   if event.provenance is not None and isinstance(event.payload, (Insight, Reflection)))
    model_ms += sum(reflection.decay_ms for reflection in reflections)
    return {
        "reflections": len(reflections),
        "rejected": sum(1 for reflection in reflections if not reflection.accepted),
        "warnings": sum(1 for reflection in reflections if reflection.warning),
        "overruled": sum(overruled.values()),
        "overruled_by_rule": dict(sorted(overruled.items())),
        "decisions": len(decisions),
        "decayed": sum(1 for decision in decisions if decision[2] == "decay"),
        "forgotten": sum(1 for decision in decisions if decision[2] == "forget"),
        "triggers": dict(sorted(Counter(trigger for reflection in reflections for trigger in reflection.triggers).items())),
        "reflection_turns": [reflection.for_turn for reflection in reflections],
        "rejected_reasons": dict(Counter(reflection.reason for reflection in reflections if not reflection.accepted)),
        "insights": sum(1 for event in events if isinstance(event.payload, Insight)),
        "failures_by_stage": dict(sorted(failures.items())),
        "reflection_model_ms": round(model_ms, 1),
    }


def answered_late_share(events: Sequence[Event]) -> float:
    """The share of turns (after the first) whose Talker saw a narrative older than the previous
    turn's: they arrived while the previous turn's thinking was still running."""
    turn_of_narrative = {event.seq: event.turn for event in events if event.type == "narrative"}
    late = total = 0
    for event in events:
        if not isinstance(event.payload, Turn) or not event.turn:
            continue
        total += 1
        seen = event.payload.narrative_seq
        if seen is None or turn_of_narrative.get(seen, -1) < event.turn - 1:
            late += 1
    return round(late / total, 3) if total else 0.0


def above_idle(run: dict[str, Any], idle_ms_per_s: dict[str, float]) -> dict[str, float]:
    """A run's CPU ms per turn by role less ``idle_ms_per_s`` over its window (``mirror`` and ``all`` too)."""
    seconds_per_turn = run["cpu_window_s"] / run["turns"]
    return {role: round(ms - idle_ms_per_s.get(role, 0.0) * seconds_per_turn, 2) for role, ms in run["cpu_ms_per_turn"].items()}


def _share(on: float, off: float) -> float | None:
    return round((on - off) / off, 3) if off > 0 else None


def _per(ms: float, units: float) -> float | None:
    return round(ms / units, 2) if units > 0 else None


def comparison(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    """What reflection added: Mirror's CPU per turn, as measured and above idle; latency p50/p90;
    per turn the CPU by role, model calls and events; what each added event and call cost, and
    so the floor of one insight (a call and an event) per turn; whether the targets were met.

    Idle is each role's rate with no turn running, pooled over both runs' samples (the stack is
    the same; one 15 s sample alone is noisy), taken off both runs over their windows: the
    difference stays as measured, the base loses the work no turn caused, so the share above
    idle is the stricter of the two and the CPU target is judged on it."""
    roles = on["cpu_idle_ms_per_s"].keys() | off["cpu_idle_ms_per_s"].keys()
    idle = {role: round((on["cpu_idle_ms_per_s"].get(role, 0.0) + off["cpu_idle_ms_per_s"].get(role, 0.0)) / 2, 2)
            for role in sorted(roles)}
    cpu_on, cpu_off = on["cpu_ms_per_turn"], off["cpu_ms_per_turn"]
    active_on, active_off = above_idle(on, idle), above_idle(off, idle)
    share, active_share = _share(cpu_on["mirror"], cpu_off["mirror"]), _share(active_on["mirror"], active_off["mirror"])
    latency_added = round(on["latency_p50_ms"] - off["latency_p50_ms"], 2)
    added_cpu = {role: round(active_on[role] - active_off.get(role, 0.0), 2) for role in active_on}
    added_calls = round(on["chat_calls_per_turn"] - off["chat_calls_per_turn"], 3)
    added_events = round(on["events_per_turn"] - off["events_per_turn"], 3)
    ingester, nats = (_per(added_cpu[role], added_events) for role in ("ingester", "nats"))
    per_call = _per(added_cpu["conversations"], added_calls)
    floor = None if ingester is None or nats is None or per_call is None else round(ingester + nats + per_call, 2)
    return {
        "cpu_ms_per_turn_on": cpu_on["mirror"],
        "cpu_ms_per_turn_off": cpu_off["mirror"],
        "cpu_added_share": share,
        "cpu_ms_per_turn_above_idle_on": active_on["mirror"],
        "cpu_ms_per_turn_above_idle_off": active_off["mirror"],
        "cpu_added_share_above_idle": active_share,
        "latency_p50_ms_on": on["latency_p50_ms"],
        "latency_p50_ms_off": off["latency_p50_ms"],
        "latency_added_p50_ms": latency_added,
        "latency_p90_ms_on": on["latency_p90_ms"],
        "latency_p90_ms_off": off["latency_p90_ms"],
        "latency_added_p90_ms": round(on["latency_p90_ms"] - off["latency_p90_ms"], 2),
        "overhead_added_p50_ms": round(on["overhead_p50_ms"] - off["overhead_p50_ms"], 2),
        "idle_cpu_ms_per_s": idle,
        "added_per_turn": {"cpu_ms_by_role": added_cpu, "chat_calls": added_calls, "events": added_events,
                           "embedding_calls": round(on["embedding_calls_per_turn"] - off["embedding_calls_per_turn"], 3)},
        "added_cost": {
            "ingester_ms_per_added_event": ingester, "nats_ms_per_added_event": nats,
            "conversations_ms_per_added_chat_call": per_call,
            "insight_floor_ms_per_turn": floor,
            "insight_floor_share_above_idle": None if floor is None or not active_off["mirror"] else round(floor / active_off["mirror"], 3),
        },
        "targets": {
            "cpu_added_share_at_most": CPU_ADDED_SHARE_TARGET,
            "latency_added_p50_ms_at_most": LATENCY_ADDED_P50_MS_TARGET,
            "cpu_met": active_share is not None and active_share <= CPU_ADDED_SHARE_TARGET,
            "cpu_met_as_measured": share is not None and share <= CPU_ADDED_SHARE_TARGET,
            "latency_met": latency_added <= LATENCY_ADDED_P50_MS_TARGET,
        },
    }


# ---------------------------------------------------------------------------- one run

@contextmanager
def _stack(config: ReflectionBenchConfig, reflection: bool, data: Path) -> Iterator[tuple[EmbeddedStack, SimProcess]]:
    """The embedded stack against a simulator of our own (its embedding calls at 0 ms)."""
    sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}", embedding_latency="fixed:0",
                     log_path=data / "sim-llm.log").start()
    try:
        settings = StackSettings(
            data_dir=data, llm=sim.base_url, llm_model="mirror-sim", mode=config.mode, memory=True,
            reflection=reflection, reflection_policy=config.policy, gateway_port=free_port(), nats_port=free_port(),
            placement=config.placement,
        )
        with EmbeddedStack(settings) as stack:
            yield stack, sim
    finally:
        sim.stop()


async def _turn(client: httpx.AsyncClient, message: str, reflection: bool) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = await client.post(f"/v1/conversations/{CONVERSATION}/turns",
                                 json={"message": message, "reflection": reflection})
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    reply: dict[str, Any] = response.json()
    reply["timings"] = server_timing(response.headers.get("server-timing", ""))
    return elapsed, reply


async def _committed(stack: EmbeddedStack, key: StreamKey, last_seq: int, timeout_s: float) -> None:
    """Wait until the log has committed the conversation's ``last_seq``."""
    connections = await stack.runtime.infrastructure.connect(name="mirror-bench-reflection")
    try:
        log = connections.log(key.tenant)
        deadline = time.monotonic() + timeout_s
        while await log.last_seq(key) < last_seq:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the log did not commit seq {last_seq} of {key} within {timeout_s}s")
            await asyncio.sleep(0.1)
    finally:
        await connections.close()


async def _events(stack: EmbeddedStack, key: StreamKey, last_seq: int) -> list[Event]:
    """The conversation's events up to ``last_seq`` (committed), read after the CPU window closed."""
    connections = await stack.runtime.infrastructure.connect(name="mirror-bench-reflection")
    try:
        log = connections.log(key.tenant)
        events: list[Event] = []
        while len(events) < last_seq:
            page = await log.read(key, after_seq=len(events), until_seq=last_seq, limit=2_000)
            if not page:
                raise RuntimeError(f"the log holds {len(events)} events of {key}, not {last_seq}")
            events += page
        return events
    finally:
        await connections.close()


async def _idle(seconds: float) -> CpuSpent:
    """What every process spends over ``seconds`` with nothing to do."""
    meter = CpuMeter().start()
    await asyncio.sleep(seconds)
    return meter.stop()


async def _drive(stack: EmbeddedStack, sim: SimProcess, config: ReflectionBenchConfig, reflection: bool) -> dict[str, Any]:
    messages = script(config.turns + 1, config.seed)
    rng = random.Random(f"{config.seed}:pauses")  # the same pauses in both runs
    key = StreamKey(DEFAULT_TENANT, CONVERSATION)
    conversation = conversation_handle(key, stack.runtime)
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=120,
                                 transport=AiohttpTransport()) as client, \
            httpx.AsyncClient(base_url=sim.url, timeout=10) as sim_admin:
        await _turn(client, messages[0], reflection)  # activates the conversation: neither timed nor counted
        await conversation.wait_idle(timeout=config.drain_timeout_s)
        idle = await _idle(config.idle_s)
        (await sim_admin.post("/_sim/reset")).raise_for_status()
        meter = CpuMeter().start()
        started = time.perf_counter()
        answered = []
        label = f"reflection {'on' if reflection else 'off'}"
        with progress_line(label, config.turns, config.show_progress) as advance:
            for message in messages[1:]:
                if config.wait_for_thinking:
                    await conversation.wait_idle(timeout=config.drain_timeout_s)
                await asyncio.sleep(rng.uniform(0.5, 1.5) * config.pause_ms / 1000)
                answered.append(await _turn(client, message, reflection))
                advance()
        at_end = backlog(state_from_snapshot(await conversation.state_bytes()))
        drain_started = time.perf_counter()
        drained = await conversation.wait_idle(timeout=config.drain_timeout_s)
        drain_s = time.perf_counter() - drain_started
        state = state_from_snapshot(await conversation.state_bytes())
        await _committed(stack, key, state.last_seq, config.drain_timeout_s)
        cpu = meter.stop()
        seconds = time.perf_counter() - started
        calls = (await sim_admin.get("/_sim/stats")).raise_for_status().json()
        idle = idle.plus(await _idle(config.idle_s))
    events = await _events(stack, key, state.last_seq)
    return _run_figures(config, reflection, answered, cpu, idle, calls, state, events, at_end,
                        drained=drained, drain_s=drain_s, seconds=seconds)


def _run_figures(config: ReflectionBenchConfig, reflection: bool, answered: list[tuple[float, dict[str, Any]]],
                 cpu: CpuSpent, idle: CpuSpent, calls: dict[str, Any], state: ConversationState, events: list[Event],
                 at_end: dict[str, int], *, drained: bool, drain_s: float, seconds: float) -> dict[str, Any]:
    turns = len(answered)
    measured = [event for event in events if event.turn is not None and event.turn >= 1]
    figures = {
        "reflection": reflection,
        "turns": turns,
        **latency_figures(answered),
        "cpu_ms_per_turn": cpu.ms_per(turns),
        "cpu_idle_ms_per_s": idle.ms_per_second(),
        "cpu_ms_per_turn_above_idle": cpu.above(idle).ms_per(turns),
        "cpu_processes_exited": cpu.exited,
        "cpu_window_s": round(cpu.wall_s, 1),
        "chat_calls_per_turn": round(calls["chat_calls"] / turns, 3),
        "embedding_calls_per_turn": round(calls["embedding_calls"] / turns, 3),
        "events_per_turn": round(len(measured) / turns, 3),
        "events_by_type": dict(sorted(Counter(event.type for event in measured).items())),
        "thinking_backlog_at_end": at_end,
        "drained": drained,
        "drain_s": round(drain_s, 2),
        "thinking_backlog_after_drain": backlog(state),
        "answered_late_share": answered_late_share(events),
        "beliefs_at_end": len(state.beliefs),
        "seconds": round(seconds, 1),
    }
    if reflection:
        figures.update(reflection_figures(measured))
        figures["portrait_chars"] = len(state.portrait or "")
        figures["reflection_model_ms_per_turn"] = round(figures["reflection_model_ms"] / turns, 2)
    return figures


def _run(config: ReflectionBenchConfig, reflection: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-reflection-") as data, \
            _stack(config, reflection, Path(data)) as (stack, sim):
        return asyncio.run(_drive(stack, sim, config, reflection))


def run_reflection_bench(config: ReflectionBenchConfig) -> dict[str, Any]:
    """Reflection off (unless ``compare`` is False), then on, each on a fresh stack; the comparison."""
    head = {
        "benchmark": "reflection", "turns": config.turns, "llm_latency_ms": config.llm_latency_ms,
        "pause_ms": config.pause_ms, "wait_for_thinking": config.wait_for_thinking, "mode": config.mode,
        "memory": True, "placement": config.placement, "seed": config.seed,
        "policy": {name: value for name, value in asdict(config.policy).items() if name != "protected_terms"},
    }
    off = _run(config, reflection=False) if config.compare else None
    settled_s = settle(at_most_s=config.settle_at_most_s) if config.compare else 0.0
    on = _run(config, reflection=True)
    summary = {name: on[name] for name in ("reflections", "rejected", "warnings", "overruled", "overruled_by_rule",
                                            "decayed", "forgotten", "thinking_backlog_at_end")}
    result: dict[str, Any] = {**head, **summary}
    if off is not None:
        result.update(comparison(on, off))
        result["settled_between_runs_s"] = settled_s
    result["reflection_on"] = on
    if off is not None:
        result["reflection_off"] = off
    return result


__all__ = [
    "CPU_ADDED_SHARE_TARGET", "LATENCY_ADDED_P50_MS_TARGET", "ReflectionBenchConfig", "above_idle", "answered_late_share",
    "backlog",
    "comparison", "latency_figures", "reflection_figures", "run_reflection_bench",
]
