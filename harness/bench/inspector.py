"""`mirror bench inspector`: what the inspector page asks of the gateway when a person opens a long
conversation and looks around, over real HTTP against a real stack.

Production path: the inspector page's own requests, in its order, over HTTP to the gateway of
an embedded stack (``mirror up``'s, the simulator as the model), whose states come from the
gateway's reader (:func:`~mirror.replay.history.serving_history`).

One conversation of ``turns`` turns through the gateway of an embedded stack (the simulator at
0 ms, memory and reflection on, the scripted user of ``bench reflection``), each turn with
``?sync=true`` so the thinking keeps up; then, once the last turn's thinking is committed, the
page's requests in the page's order (``gateway/inspector/static/js/``), each action ``repeat``
times:

- ``open`` (``openConversation``): at once ``GET /v1/conversations/{id}`` (its summary: mind and
  branches) and its ``timeline`` (every event's seq, type, turn and time); then ``select`` of the last
  seq, all at once: its ``state?at=``; the turns the dialogue shows around it
  (``events?type=turn`` over the range of the ``TURNS_BEFORE`` turns up to it and
  ``TURNS_AFTER`` after it, as ``dialogueWindow`` computes it from the timeline); the selected
  event itself (the line under the timeline; not asked when it is a turn the dialogue holds); the
  narrative event before the one in force and the reflections, ``REFLECTIONS_AT_ONCE`` at a time
  from the newest back, to the portrait before the one in force (the diffs' other sides). Total
  ms, bytes and requests, and each phase's ms (``parts_p50_ms``).
- ``step`` (``select``): one timeline move to a random seq the page has not seen (nor its
  events; its cache is per page view): the same asks.
- ``why_reply``: ``why?seq=`` a random turn's seq; ``why_belief``: ``why?belief=`` the most
  recalled belief with the page's first page of its recalls (``limit=RECALLS_PAGE``).
- ``compare`` (``runCompare``): two states and ``diff`` between two random seqs, all at once.

Each action's ms run from its first ask to its last answer parsed, as the page waits;
``client_json_p50_ms`` is how much of that this client spent parsing JSON (the browser's share,
not Mirror's). The raw limit, in the same run: ``healthz_p50_ms``, one ``GET /healthz`` round
trip (no token, no work), and ``open_floor_ms`` = open's requests × that: what opening would
cost if Mirror did no work at all. Each state is folded from the newest snapshot at or before it
(the gateway's reader leaves one every 200 events as it folds) plus the events after it, or on
from the state the reader last gave of the conversation when that is nearer (it keeps one per
conversation: a look at the same seq again, as each ``open`` makes, folds nothing); the first
open of the run (``open.first_ms``) may fold more.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from mirror.cognition.http_transport import AiohttpTransport
from mirror.cognition.reflection.policy import DEFAULT_POLICY
from mirror.harness.bench._hosts import progress_line
from mirror.harness.bench._script import script
from mirror.harness.bench._stacks import sim_stack
from mirror.harness.bench._stats import percentile

__all__ = ["ACTIONS", "InspectorBenchConfig", "run_inspector_bench"]

CONVERSATION = "bench-inspector"
PAGE = 1000
"""The page's page of events (``eventsBetween``), the log's largest."""
TURNS_BEFORE, TURNS_AFTER, REFLECTIONS_AT_ONCE = 20, 5, 4
"""The turns the page's dialogue shows up to the selected event and after it, and the reflections
it reads at once looking for the previous portrait (conversation.js)."""
RECALLS_PAGE = 50
"""The recalls the page's Why asks for at a time (why.js)."""
ACTIONS = ("open", "step", "why_reply", "why_belief", "compare")
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class InspectorBenchConfig:
    turns: int = 200
    repeat: int = 20
    seed: int = 7
    healthz_samples: int = 100
    max_per_hour: int = 1_000
    """Reflection's hourly cap for this run: the turns come in minutes, not the days a person would
    take, and the default cap (6) would stop reflection after six."""
    settle_timeout_s: float = 600.0
    show_progress: bool = False


@dataclass(slots=True)
class _Tally:
    """One action's requests, as the page makes them: ms from the first ask to the last answer."""

    client: httpx.AsyncClient
    requests: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.perf_counter)
    parts: dict[str, float] = field(default_factory=dict)
    """Ms of each phase so far (``mark``), for an action whose phases follow one another."""
    json_ms: float = 0.0
    """Ms this client spent parsing the answers (the page's ``response.json()``): the client's work, not Mirror's."""

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = await self.client.get(path, params=params)
        response.raise_for_status()
        self.requests += 1
        self.bytes += len(response.content)
        started = time.perf_counter()
        answer = response.json()
        self.json_ms += (time.perf_counter() - started) * 1000
        return answer

    def mark(self, phase: str) -> None:
        self.parts[phase] = (time.perf_counter() - self.started) * 1000 - sum(self.parts.values())

    def done(self) -> dict[str, Any]:
        return {"ms": (time.perf_counter() - self.started) * 1000, "bytes": self.bytes, "requests": self.requests,
                "parts": self.parts, "json_ms": self.json_ms}


def _conversation(what: str = "") -> str:
    return f"/v1/conversations/{CONVERSATION}" + (f"/{what}" if what else "")


async def _state(tally: _Tally, seq: int) -> dict[str, Any]:
    state: dict[str, Any] = await tally.get(_conversation("state"), {"at": seq, "branch": "main"})
    return state


async def _events(tally: _Tally, after: int, until: int | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """Events in (after, until] (of ``kind``), paged as ``eventsBetween`` pages them."""
    events: list[dict[str, Any]] = []
    while True:
        params = {"after": after, "limit": PAGE, **({"until": until} if until is not None else {}),
                  **({"type": kind} if kind else {})}
        page = await tally.get(_conversation("events"), params)
        events += page["events"]
        if len(page["events"]) < PAGE:
            return events
        after = page["next_after"]


@dataclass(frozen=True, slots=True)
class _Timeline:
    seqs: list[int]
    of_type: dict[str, list[int]]

    def up_to(self, kind: str, seq: int) -> list[int]:
        """The seqs of events of ``kind`` at or before ``seq`` (``seqsUpTo``)."""
        seqs = self.of_type.get(kind, [])
        return seqs[: bisect.bisect_right(seqs, seq)]


async def _timeline(tally: _Tally) -> _Timeline:
    index = await tally.get(_conversation("timeline"))
    of_type: dict[str, list[int]] = {}
    for seq, kind in zip(index["seq"], index["type"], strict=True):
        of_type.setdefault(index["types"][kind], []).append(seq)
    return _Timeline(index["seq"], of_type)


def _dialogue(timeline: _Timeline, seq: int) -> list[int]:
    """The turns' seqs the dialogue shows around ``seq`` (``dialogueWindow``)."""
    turns = timeline.of_type.get("turn", [])
    reached = bisect.bisect_right(turns, seq)
    return turns[max(0, reached - TURNS_BEFORE): reached + TURNS_AFTER]


async def _previous_portrait(tally: _Tally, reflections: list[int]) -> None:
    """``previousPortrait``: reflections read REFLECTIONS_AT_ONCE at a time from the newest back
    until the second accepted one (the first is the portrait in force)."""
    accepted = 0
    for end in range(len(reflections), 0, -REFLECTIONS_AT_ONCE):
        chunk = reflections[max(0, end - REFLECTIONS_AT_ONCE): end]
        for event in reversed(await _events(tally, chunk[0] - 1, chunk[-1], "reflection")):
            accepted += bool(event["payload"]["accepted"])
            if accepted == 2:
                return


async def _select(tally: _Tally, timeline: _Timeline, seq: int) -> None:
    """``select(seq)`` on a page that has read none of it, everything at once: the state, the
    dialogue's turns, the event itself, the narrative before the one in force and the
    reflections back to the portrait before the one in force (the diffs' other sides)."""
    turns = _dialogue(timeline, seq)
    narratives = timeline.up_to("narrative", seq)
    asks: list[Awaitable[Any]] = [_state(tally, seq), _previous_portrait(tally, timeline.up_to("reflection", seq))]
    if turns:
        asks.append(_events(tally, turns[0] - 1, turns[-1], "turn"))
    if seq not in turns:
        asks.append(_events(tally, seq - 1, seq))
    if len(narratives) > 1:
        asks.append(_events(tally, narratives[-2] - 1, narratives[-2]))
    await asyncio.gather(*asks)
    tally.mark("select")


async def _open(client: httpx.AsyncClient) -> dict[str, Any]:
    tally = _Tally(client)
    summary, timeline = await asyncio.gather(tally.get(_conversation()), _timeline(tally))
    assert "main" in summary["branches"], "the conversation's summary names no main branch"
    tally.mark("summary_and_timeline")
    await _select(tally, timeline, timeline.seqs[-1])
    return tally.done()


async def _step(client: httpx.AsyncClient, timeline: _Timeline, seq: int) -> dict[str, Any]:
    tally = _Tally(client)
    await _select(tally, timeline, seq)
    return tally.done()


async def _why(client: httpx.AsyncClient, question: dict[str, Any]) -> dict[str, Any]:
    tally = _Tally(client)
    answer = await tally.get(_conversation("why"), {**question, "branch": "main", "limit": RECALLS_PAGE})
    return {**tally.done(), "recalls": (answer.get("recalls") or {}).get("total")}


async def _compare(client: httpx.AsyncClient, left: int, right: int) -> dict[str, Any]:
    tally = _Tally(client)
    await asyncio.gather(_state(tally, left), _state(tally, right), tally.get(_conversation("diff"), {
        "from": left, "to": right, "from_branch": "main", "to_branch": "main"}))
    return tally.done()


def _figures(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    times = [sample["ms"] for sample in samples]
    sizes = [sample["bytes"] for sample in samples]
    requests = [sample["requests"] for sample in samples]
    return {
        "p50_ms": round(percentile(times, 0.5), 2), "p95_ms": round(percentile(times, 0.95), 2),
        "bytes_p50": int(percentile(sizes, 0.5)), "bytes_p95": int(percentile(sizes, 0.95)),
        "requests": int(percentile(requests, 0.5)),
        "client_json_p50_ms": round(percentile([sample["json_ms"] for sample in samples], 0.5), 2),
    }


# ---------------------------------------------------------------------------- building the conversation

async def _build(client: httpx.AsyncClient, config: InspectorBenchConfig) -> None:
    with progress_line(f"{config.turns} turns", config.turns, config.show_progress) as advance:
        for message in script(config.turns, config.seed):
            answer = await client.post(_conversation("turns"), params={"sync": "true"}, json={"message": message})
            answer.raise_for_status()
            advance()


async def _settled(client: httpx.AsyncClient, timeout_s: float) -> int:
    """The last seq, once the conversation has stopped thinking and the log has committed it all."""
    deadline = time.monotonic() + timeout_s
    while True:
        summary = (await client.get(_conversation())).raise_for_status().json()
        last = summary["last_seq"]
        if not summary["thinking"]:
            tail = (await client.get(_conversation("events"), params={"after": last - 1, "limit": 1})).raise_for_status()
            if [event["seq"] for event in tail.json()["events"]] == [last]:
                return int(last)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{CONVERSATION}: its thinking did not finish and commit within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------- measuring

async def _measure(client: httpx.AsyncClient, config: InspectorBenchConfig) -> dict[str, Any]:
    rng = random.Random(config.seed)
    last_seq = await _settled(client, config.settle_timeout_s)
    first_open = await _open(client)
    timeline = await _timeline(_Tally(client))
    last_state = await _state(_Tally(client), last_seq)
    turn_seqs = timeline.of_type.get("turn", [])
    beliefs = last_state["beliefs"]
    most_recalled = max(beliefs, key=lambda belief: (belief["recall_count"], belief["belief_id"])) if beliefs else None

    def pair() -> tuple[int, int]:
        left, right = sorted(rng.sample(range(1, last_seq + 1), 2))
        return left, right

    actions: dict[str, Callable[[], Any]] = {
        "open": lambda: _open(client),
        "step": lambda: _step(client, timeline, rng.randint(1, last_seq)),
        "why_reply": lambda: _why(client, {"seq": rng.choice(turn_seqs)}),
        "compare": lambda: _compare(client, *pair()),
    }
    if most_recalled is not None:
        actions["why_belief"] = lambda: _why(client, {"belief": most_recalled["belief_id"]})
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in actions}
    with progress_line("inspector requests", config.repeat * len(actions), config.show_progress) as advance:
        for _ in range(config.repeat):  # the actions take turns, so a slow moment of the machine is shared
            for name, action in actions.items():
                samples[name].append(await action())
                advance()
    healthz = []
    for _ in range(config.healthz_samples):
        started = time.perf_counter()
        (await client.get("/healthz")).raise_for_status()
        healthz.append((time.perf_counter() - started) * 1000)
    healthz_p50 = percentile(healthz, 0.5)
    figures = {name: _figures(values) for name, values in samples.items()}
    opened = figures["open"]
    opened.update(first_ms=round(first_open["ms"], 2),
                  parts_p50_ms={phase: round(percentile([sample["parts"][phase] for sample in samples["open"]], 0.5), 2)
                                for phase in samples["open"][0]["parts"]})
    if most_recalled is not None:
        figures["why_belief"].update(recall_count=most_recalled["recall_count"],
                                     recalls_total=samples["why_belief"][0]["recalls"])
    return {
        "turns": len(turn_seqs), "events": len(timeline.seqs), "last_seq": last_seq,
        "narrative_seq": last_state["narrative_seq"], "portrait_seq": last_state.get("portrait_seq"),
        "beliefs": len(beliefs), "reflections": last_state.get("reflections", 0),
        **{name: figures.get(name) for name in ACTIONS},
        "healthz_p50_ms": round(healthz_p50, 2),
        "open_floor_ms": round(opened["requests"] * healthz_p50, 2),
        "open_over_floor": round(opened["p50_ms"] / (opened["requests"] * healthz_p50), 1) if healthz_p50 else None,
    }


async def _run(url: str, token: str, config: InspectorBenchConfig) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S,
                                 transport=AiohttpTransport()) as client:
        started = time.perf_counter()
        await _build(client, config)
        built_s = time.perf_counter() - started
        figures = await _measure(client, config)
    return {**figures, "build_s": round(built_s, 1)}


def run_inspector_bench(config: InspectorBenchConfig) -> dict[str, Any]:
    """Start the stack, make the conversation, measure; one JSON-ready dict."""
    load_before = os.getloadavg()[0]
    policy = replace(DEFAULT_POLICY, max_per_hour=config.max_per_hour)
    with sim_stack("inspector", 0.0, "full", memory=True, reflection=True, reflection_policy=policy) as stack:
        figures = asyncio.run(_run(stack.url, stack.token, config))
    return {
        "benchmark": "inspector", "repeat": config.repeat, "seed": config.seed, **figures,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
