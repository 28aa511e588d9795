"""`mirror bench actors`: many conversations under a live cap, and what (re-)activation costs.

Production path: turns through the HTTP gateway of the embedded stack (``mirror up``'s), the
conversation hosts' placement and live cap, passivation to a snapshot and re-activation by
``History.rebuild``; the cap is set small (the default is 5,000 a host) so that crowding out
happens within the run.

N conversations (1,000 by default) on the embedded stack under a cap small enough that the
least recently used passivate as others activate: ``placement="hosted"`` (the default) with
``max_live_per_host`` = 32 in each host (``hosts``, 0: one per CPU, so 64 live on two cores),
or ``placement="dedicated"`` with ``max_live_actors`` = 64 (one Ray actor each, the directory
passivates). Their history is
seeded straight through the fenced bus (turns, monologues and narratives, as Mirror writes
them) and committed by the ingester: most conversations get a short history, a few a long one
(10 and 10,000 events by default).

1. Every conversation gets one turn through the HTTP gateway; ``errors`` counts turns that got
   no reply (a 429/503 with ``Retry-After`` is waited out and sent again, as the ``openai`` SDK
   does, and counted in ``refusals`` / ``unavailable``: :mod:`._refusals`). The measured conversations go first, so the other activations crowd them out and
   they passivate (finish thinking, snapshot, let go). Hosted, the bench then calls each
   measured conversation's ``passivate(key)`` on its host, which waits for an eviction still
   in progress (and passivates one the cap did not reach); dedicated, it waits until their
   actors are gone.
2. Each measured conversation is then sent a turn, one at a time, alternating short and long:
   re-activation = client-observed latency − the model calls as Mirror timed them (the Talker's
   and, with memory on, the message's embedding: both the simulator's fixed latency; process
   start when dedicated, rebuild, the fenced append, the gateway and the HTTP hop). ``ratio`` =
   long p50 / short p50; a rebuild from the snapshot alone makes it ~1 whatever the length.
3. ``samples`` brand-new conversations (no history) get their first turn, one at a time:
   ``activate_new_p50_ms`` / ``_p90_ms``, measured the same way.

The actors' own rebuild reports (snapshot seq, log tail, stream messages read, rebuild time)
are included, so a ratio above 1 can be traced to its cause; hosted, so are the hosts' stats
(resident memory, live conversations, evictions, passivations, mean activation time).
``hold`` > 0 runs :mod:`mirror.harness.bench.live_hold` instead: that many conversations live at
once.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import ray

from mirror.actors.conversation import RebuildReport
from mirror.actors.conversation_actor import actor_name
from mirror.actors.directory import DIRECTORY_NAME, NAMESPACE
from mirror.actors.handle import ConversationHandle
from mirror.actors.placement import DedicatedConversation, conversation_handle, placement_of
from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Monologue, Narrative, Provenance, Turn
from mirror.harness.bench._hosts import host_stats, hosts_figures, progress_line
from mirror.harness.bench._refusals import Refusals, post_retrying
from mirror.harness.bench._stacks import sim_stack
from mirror.harness.bench._stats import percentile
from mirror.harness.bench.turns import server_timing, turn_phases
from mirror.stack.embedded import DEFAULT_TENANT, EmbeddedStack


@dataclass(frozen=True, slots=True)
class ActorsBenchConfig:
    conversations: int = 1_000
    placement: str = "hosted"
    hosts: int = 0
    """Conversation hosts (hosted); 0: one per CPU of the Ray cluster."""
    max_live_per_host: int = 32
    """The cap per host (hosted): small, so the measured conversations are crowded out."""
    max_live_actors: int = 64
    """The cap per node (dedicated)."""
    long_conversations: int = 16
    short_events: int = 10
    long_events: int = 10_000
    samples: int = 16
    """Re-activations measured per history length (at most the conversations of that length)."""
    concurrency: int = 8
    """Turns in flight at once while activating every conversation."""
    llm_latency_ms: float = 20.0
    mode: str = "full"
    memory: bool = True
    timeout_s: float = 7_200.0
    show_progress: bool = False


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


_KINDS = ("short", "long", "new")
"""The conversations measured: re-activated with a short or a long history, or activated brand new."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """Who is seeded with how many events, who is measured, and the order of the first turns."""

    lengths: dict[str, int]
    """Every conversation's seeded history, in events."""
    long_names: list[str]
    short_names: list[str]
    new_names: list[str]

    @classmethod
    def of(cls, config: ActorsBenchConfig) -> _Plan:
        long_count = min(config.long_conversations, config.conversations)
        names = [f"actors-{index}" for index in range(config.conversations)]
        return cls(lengths={name: config.long_events if index < long_count else config.short_events
                            for index, name in enumerate(names)},
                   long_names=names[:long_count][:config.samples], short_names=names[long_count:][:config.samples],
                   new_names=[f"actors-new-{index}" for index in range(config.samples)])

    @property
    def measured(self) -> list[str]:
        """The conversations whose re-activation is measured (sorted)."""
        return sorted(self.long_names + self.short_names)

    @property
    def activation_order(self) -> list[str]:
        """The measured conversations first, so every later activation crowds them out."""
        measured = set(self.measured)
        names = list(self.lengths)
        return [name for name in names if name in measured] + [name for name in names if name not in measured]

    @property
    def sampled(self) -> list[tuple[str, str]]:
        """``(kind, name)`` in the order measured: short and long alternating (as many pairs as the shorter
        list), then the new ones."""
        pairs = [(kind, name) for pair in zip(self.short_names, self.long_names, strict=False)
                 for kind, name in zip(("short", "long"), pair, strict=True)]
        return pairs + [("new", name) for name in self.new_names]


@dataclass(slots=True)
class _Tally:
    """Turns answered, and the errors of those that were not (and of anything else that went wrong)."""

    turns: int = 0
    errors: list[str] = field(default_factory=list)
    refusals: Refusals = field(default_factory=Refusals)
    """Refusals waited out as the ``openai`` SDK does (:mod:`._refusals`): not errors."""


@dataclass(slots=True)
class _Samples:
    """Per kind (:data:`_KINDS`): latency less the model calls, the reply with its timings, the rebuild reports."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {kind: [] for kind in _KINDS})
    replies: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=lambda: {kind: [] for kind in _KINDS})
    reports: dict[str, list[RebuildReport]] = field(default_factory=lambda: {kind: [] for kind in _KINDS})

    def add(self, kind: str, elapsed: float, reply: dict[str, Any], report: RebuildReport | None) -> None:
        # Both model calls are the simulator's fixed latency (the message's embedding too, with memory on).
        self.latencies[kind].append(elapsed - reply["llm_ms"] - reply["timings"].get("embed", 0.0))
        self.replies[kind].append((elapsed, reply))
        if report is not None:
            self.reports[kind].append(report)


# The gateway: one turn over HTTP.

def _gateway(stack: EmbeddedStack, concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=300,
                             limits=httpx.Limits(max_connections=concurrency + 4))


async def _turn(client: httpx.AsyncClient, name: str, message: str, refusals: Refusals) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = await post_retrying(client, f"/v1/conversations/{name}/turns", {"message": message}, refusals)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    reply: dict[str, Any] = response.json()
    reply["timings"] = server_timing(response.headers.get("server-timing", ""))
    return elapsed, reply


async def _counted_turn(client: httpx.AsyncClient, name: str, message: str,
                        tally: _Tally) -> tuple[float, dict[str, Any]] | None:
    """:func:`_turn`, counted in ``tally``: None (and the error recorded) when it got no reply."""
    try:
        answered = await _turn(client, name, message, tally.refusals)
    except Exception as exc:
        tally.errors.append(f"{name}: {exc!r}")
        return None
    tally.turns += 1
    return answered


# The bench's calls on a conversation (its rebuild report, its passivation), and on the directory's actors.

def _conversation(stack: EmbeddedStack, name: str) -> ConversationHandle:
    """The default tenant's conversation ``name`` as the stack's placement holds it (activated on first call)."""
    return conversation_handle(StreamKey(DEFAULT_TENANT, name), stack.runtime)


async def _report(stack: EmbeddedStack, name: str) -> RebuildReport | None:
    try:
        conversation: ConversationHandle
        if stack.runtime.placement == "hosted":  # still live in its host: nothing else came in since its turn
            conversation = _conversation(stack, name)
        else:  # by name, so a dedicated actor crowded out already is not started again
            key = StreamKey(DEFAULT_TENANT, name)
            conversation = DedicatedConversation(key, ray.get_actor(actor_name(key), namespace=NAMESPACE))
        return await asyncio.wait_for(conversation.rebuild_report(), 60)
    except Exception:  # crowded out again already: the report went with it
        return None


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


async def _passivated(stack: EmbeddedStack, names: list[str], timeout_s: float) -> list[str]:
    """Make sure ``names`` are passivated; returns those still live at the deadline."""
    if stack.runtime.placement == "dedicated":
        return await _wait_passivated([f"{DEFAULT_TENANT}/{name}/main" for name in names], timeout_s)
    conversations = [_conversation(stack, name) for name in names]
    await asyncio.wait_for(asyncio.gather(*(conversation.passivate() for conversation in conversations)), timeout_s)
    live = {key.conversation for host in placement_of(stack.runtime).all_hosts() for key in ray.get(host.live.remote())}
    return [name for name in names if name in live]


# The phases: seed, activate every conversation, crowd the measured ones out, measure.

async def _seed(stack: EmbeddedStack, plan: _Plan) -> tuple[int, float]:
    """Seed every conversation's history; the events appended and the seconds it took."""
    started = time.perf_counter()
    seeded = await seed(stack.nats_url, {StreamKey(DEFAULT_TENANT, name): length for name, length in plan.lengths.items()})
    return seeded, time.perf_counter() - started


async def _activate_all(client: httpx.AsyncClient, plan: _Plan, config: ActorsBenchConfig, tally: _Tally) -> float:
    """One turn for every conversation, ``concurrency`` at once, in the plan's order; returns the seconds."""
    slots = asyncio.Semaphore(config.concurrency)

    async def first_turn(name: str, advance: Any) -> None:
        async with slots:
            await _counted_turn(client, name, "first message after the history", tally)
            advance()

    order = plan.activation_order
    started = time.perf_counter()
    with progress_line("activating", len(order), config.show_progress) as advance:
        await asyncio.gather(*(first_turn(name, advance) for name in order))
    return time.perf_counter() - started


async def _crowd_out(stack: EmbeddedStack, plan: _Plan, tally: _Tally) -> None:
    """Make sure every measured conversation is passivated; those that are not are an error."""
    still_alive = await _passivated(stack, plan.measured, timeout_s=300)
    if still_alive:
        tally.errors.append(f"{len(still_alive)} measured conversations never passivated: {still_alive[:3]}")


async def _sample(client: httpx.AsyncClient, stack: EmbeddedStack, plan: _Plan, tally: _Tally) -> _Samples:
    """One turn for each sampled conversation, one at a time, with what its activation cost."""
    samples = _Samples()
    for kind, name in plan.sampled:
        answered = await _counted_turn(client, name, "a message after passivation", tally)
        if answered is not None:
            samples.add(kind, *answered, await _report(stack, name))
    return samples


# The figures.

def _p(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    return round(statistics.median(values) if fraction == 0.5 else percentile(values, fraction), 1)


def _rebuild_p50(reports: list[RebuildReport]) -> float | None:
    return round(statistics.median(r.rebuild_ms for r in reports), 2) if reports else None


def _activation_figures(config: ActorsBenchConfig, tally: _Tally, samples: _Samples, seeded: int) -> dict[str, Any]:
    return {
        "benchmark": "actors",
        "placement": config.placement,
        "mode": config.mode,
        "memory": config.memory,
        "conversations": config.conversations,
        "turns": tally.turns,
        "errors": len(tally.errors),
        **tally.refusals.figures(),
        "seeded_events": seeded,
        "activate_new_p50_ms": _p(samples.latencies["new"], 0.5),
        "activate_new_p90_ms": _p(samples.latencies["new"], 0.9),
        "activate_new_rebuild_p50_ms": _rebuild_p50(samples.reports["new"]),
        # Where a (re-)activation's time goes: gateway_to_actor holds the Ray hop and the activation.
        "activate_new_phases_p50_ms": turn_phases([samples.replies["new"]]),
        "reactivate_phases_p50_ms": turn_phases([samples.replies["short"] + samples.replies["long"]]),
    }


def _placement_figures(config: ActorsBenchConfig, stack: EmbeddedStack) -> dict[str, Any]:
    """Dedicated: the directory's cap, passivations and live actors; hosted: the hosts' memory and counters."""
    if config.placement == "dedicated":
        directory_actor: Any = ray.get_actor(DIRECTORY_NAME, namespace=NAMESPACE)  # Any: as in _report
        directory: dict[str, Any] = ray.get(directory_actor.stats.remote())
        return {"max_live_actors": config.max_live_actors, "passivations": directory["passivations"],
                "live_at_end": directory["live"]}
    return {"max_live_per_host": config.max_live_per_host, **hosts_figures(host_stats(stack.runtime))}


def _reactivation_figures(config: ActorsBenchConfig, samples: _Samples) -> dict[str, Any]:
    """Per history length: re-activation p50/p90, rebuild p50, snapshot size, how many came from the snapshot
    alone; then ``ratio`` = long p50 / short p50."""
    figures: dict[str, Any] = {}
    for kind, events in (("short", config.short_events), ("long", config.long_events)):
        values, rebuilt = samples.latencies[kind], samples.reports[kind]
        figures[f"reactivate_p50_ms_{events}"] = _p(values, 0.5)
        figures[f"reactivate_p90_ms_{events}"] = _p(values, 0.9)
        figures[f"rebuild_p50_ms_{events}"] = _rebuild_p50(rebuilt)
        figures[f"snapshot_bytes_max_{events}"] = max((r.snapshot_bytes for r in rebuilt), default=None)
        figures[f"from_snapshot_{events}"] = sum(
            r.snapshot_seq is not None and r.log_tail_events == 0 and r.stream_messages_read == 0
            for r in rebuilt)
        figures[f"measured_{events}"] = len(values)
    short_p50, long_p50 = figures[f"reactivate_p50_ms_{config.short_events}"], figures[f"reactivate_p50_ms_{config.long_events}"]
    figures["ratio"] = round(long_p50 / short_p50, 3) if short_p50 and long_p50 is not None else None
    return figures


async def _measure(stack: EmbeddedStack, config: ActorsBenchConfig) -> dict[str, Any]:
    plan = _Plan.of(config)
    tally = _Tally()
    started = time.perf_counter()
    seeded, seed_s = await _seed(stack, plan)
    async with _gateway(stack, config.concurrency) as client:
        activate_s = await _activate_all(client, plan, config, tally)
        await _crowd_out(stack, plan, tally)
        samples = await _sample(client, stack, plan, tally)
    seconds = time.perf_counter() - started
    result = {**_activation_figures(config, tally, samples, seeded), **_placement_figures(config, stack),
              **_reactivation_figures(config, samples),
              "seed_s": round(seed_s, 1), "activate_s": round(activate_s, 1), "seconds": round(seconds, 1)}
    if tally.errors:
        result["first_errors"] = tally.errors[:3]
    return result


def run_actors_bench(config: ActorsBenchConfig) -> dict[str, Any]:
    with sim_stack("actors", config.llm_latency_ms, config.mode, memory=config.memory, placement=config.placement,
                   hosts=config.hosts, max_live_per_host=config.max_live_per_host,
                   max_live_actors=config.max_live_actors) as stack:
        return asyncio.run(asyncio.wait_for(_measure(stack, config), config.timeout_s))


__all__ = ["ActorsBenchConfig", "run_actors_bench", "seed", "seeded_history"]
