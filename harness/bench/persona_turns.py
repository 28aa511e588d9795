"""`mirror bench turns --mind persona`: what Mirror adds to a persona turn, and where its time goes.

Production path: ``POST /v1/conversations/{id}/turns`` of persona conversations over HTTP to
the gateway of the embedded stack (its defaults, the model aside: the simulator at a fixed
latency, or ``llm``).

C conversations × T turns of the persona mind through the HTTP gateway, each conversation made the
persona (a card object, with the order) by an untimed first turn that also activates its actor.
A persona turn's path makes four model calls (think, appraisal, plan, formulation) and, with an
embedder, one embedding for retrieval; the turn answer's ``llm_ms`` is the sum of the four calls
as Mirror timed them. So, as for the MIRROR mind's Talker, ``overhead = client-observed latency −
llm_ms``: the gateway, the Ray hop, the retrieval, prompt building, and the fenced append of the
path's five events.

``steps_p50_ms`` is each step's wall time on the path (the answer's ``steps_ms``: think,
retrieval, appraisal, plan, formulation). The background steps run after the reply, in the
conversation's think loop, overlapping the next turn (a closed loop sends it as soon as the
reply arrives): ``background_model_p50_ms`` is each step's model call (its event's provenance
``latency_ms``: emotion, relationship, goal, importance → ``episode``), and
``background_wall_p50_ms`` the time from the turn's append to its episode's (the four steps one
after another, queued behind the next turn's path where they meet).

The model is the bench's own simulator at a fixed latency L (as ``bench turns``), or ``llm``
(``local``: the offline model; a base URL), where L does not apply.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mirror.cognition.persona import read_persona, to_card
from mirror.harness.bench._stats import percentile
from mirror.processes import free_port
from mirror.stack.embedded import EmbeddedStack, StackSettings
from mirror.stack.processes import SimProcess

__all__ = ["BACKGROUND", "PATH_STEPS", "PersonaTurnsConfig", "background_times", "run_persona_turns_bench"]

PATH_STEPS = ("think", "retrieval", "appraisal", "plan", "formulation")
BACKGROUND = {"emotion": "emotion", "relationship": "relationship", "goal": "goal", "episode": "importance"}
"""The background steps' event types and the step each records."""
REQUEST_TIMEOUT_S = 1800.0  # the offline model: minutes per step on a small machine
SETTLE_TIMEOUT_S = 1800.0
MESSAGES = (
    "Good evening. I hope I'm not too late.",
    "I found this old pocket watch in my grandmother's things. It stopped during a storm.",
    "She never talked about the sea, but she kept this watch by her bed.",
    "Thank you for looking at it. It means a lot to me.",
    "Do you think it can be repaired?",
)
"""What the benchmark's user says, in turn (round again after the last)."""


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _config_note(llm: str | None, latency_ms: float) -> str:
    return f"the bench's simulator at fixed:{latency_ms:g} ms" if llm is None else f"--llm {llm}"


@dataclass(frozen=True, slots=True)
class PersonaTurnsConfig:
    conversations: int
    turns: int
    llm_latency_ms: float
    persona: Path
    order: str = "appraisal_first"
    llm: str | None = None
    """None: the bench's own simulator at ``llm_latency_ms``; else ``local`` or a base URL."""
    llm_model: str = ""
    memory: bool = True


async def _conversation(client: httpx.AsyncClient, name: str, card: dict[str, Any], order: str,
                        turns: int) -> list[tuple[float, dict[str, Any]]]:
    first = await client.post(f"/v1/conversations/{name}/turns", json={
        "message": MESSAGES[0], "mind": "persona", "persona": card, "order": order})
    first.raise_for_status()  # untimed: it makes the conversation the persona and activates its actor
    results = []
    for index in range(1, turns + 1):
        started = time.perf_counter()
        response = await client.post(f"/v1/conversations/{name}/turns", json={"message": MESSAGES[index % len(MESSAGES)]})
        elapsed = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        results.append((elapsed, response.json()))
    return results


async def _settled(client: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    """The conversation's events once its background steps are done and committed."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        summary = (await client.get(f"/v1/conversations/{name}")).json()
        events = (await client.get(f"/v1/conversations/{name}/events", params={"limit": 1000})).json()["events"]
        last = events[-1]["seq"] if events else 0
        if not summary["thinking"] and last >= summary["last_seq"]:
            return events
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: the background steps did not finish in {SETTLE_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.2)


def background_times(events: list[dict[str, Any]], first_turn: int = 1) -> tuple[dict[str, list[float]], list[float]]:
    """Each background step's model time (provenance ``latency_ms``) and, per turn from
    ``first_turn``, the ms from the turn's append to its episode's."""
    model: dict[str, list[float]] = {step: [] for step in BACKGROUND.values()}
    turn_at: dict[int, float] = {}
    wall: list[float] = []
    for event in events:
        payload, kind = event.get("payload") or {}, event["type"]
        if kind == "turn":
            turn_at[event["turn"]] = event["ts"]
            continue
        if kind not in BACKGROUND:
            continue
        turn = payload.get("for_turn", payload.get("turn"))
        if turn is None or turn < first_turn:
            continue
        if event.get("provenance"):
            model[BACKGROUND[kind]].append(float(event["provenance"]["latency_ms"]))
        if kind == "episode" and turn in turn_at:
            wall.append((event["ts"] - turn_at[turn]) * 1000)
    return model, wall


async def _measure(url: str, token: str, config: PersonaTurnsConfig) -> dict[str, Any]:
    card = to_card(read_persona(config.persona))
    limits = httpx.Limits(max_connections=config.conversations + 4)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=REQUEST_TIMEOUT_S,
                                 limits=limits) as client:
        names = [f"persona-bench-{index}" for index in range(config.conversations)]
        started = time.perf_counter()
        runs = await asyncio.gather(*(_conversation(client, name, card, config.order, config.turns) for name in names))
        wall_s = time.perf_counter() - started
        logs = await asyncio.gather(*(_settled(client, name) for name in names))
    answers = [(elapsed, reply) for run in runs for elapsed, reply in run]
    latencies = [elapsed for elapsed, _ in answers]
    model = [reply["llm_ms"] for _, reply in answers]
    overheads = [elapsed - reply["llm_ms"] for elapsed, reply in answers]
    steps = {step: [reply["steps_ms"][step] for _, reply in answers if step in (reply.get("steps_ms") or {})]
             for step in PATH_STEPS}
    background: dict[str, list[float]] = {step: [] for step in BACKGROUND.values()}
    background_wall: list[float] = []
    for events in logs:
        by_step, wall = background_times(events)
        for step, values in by_step.items():
            background[step].extend(values)
        background_wall.extend(wall)
    failures = sum(1 for events in logs for event in events if event["type"] == "thinker_failed")
    return {
        "benchmark": "turns",
        "mind": "persona",
        "persona": card["data"]["name"],
        "order": config.order,
        "model": _config_note(config.llm, config.llm_latency_ms),
        "conversations": config.conversations,
        "turns": len(latencies),
        "latency_p50_ms": _p50(latencies),
        "latency_p99_ms": round(percentile(latencies, 0.99), 2),
        "path_model_p50_ms": _p50(model),
        "overhead_p50_ms": _p50(overheads),
        "overhead_p99_ms": round(percentile(overheads, 0.99), 2),
        "latency_over_model": round(statistics.median(latencies) / statistics.median(model), 3) if model and statistics.median(model) else None,
        "steps_p50_ms": {step: _p50(values) for step, values in steps.items()},
        "background_model_p50_ms": {step: _p50(values) for step, values in background.items()},
        "background_wall_p50_ms": _p50(background_wall),
        "background_failures": failures,
        "turns_per_s": round(len(latencies) / wall_s, 2) if wall_s else None,
        "memory": config.memory,
    }


@contextmanager
def _stack(config: PersonaTurnsConfig) -> Iterator[EmbeddedStack]:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-persona-") as data:
        sim = None
        if config.llm is None:
            sim = SimProcess(latency=f"fixed:{config.llm_latency_ms:g}", embedding_latency="fixed:0",
                             log_path=Path(data) / "sim-llm.log").start()
        try:
            settings = StackSettings(
                data_dir=Path(data), llm=sim.base_url if sim is not None else config.llm,  # type: ignore[arg-type]  # one of the two is set
                llm_model="mirror-sim" if sim is not None else config.llm_model, memory=config.memory,
                gateway_port=free_port(), nats_port=free_port())
            with EmbeddedStack(settings) as stack:
                yield stack
        finally:
            if sim is not None:
                sim.stop()


def run_persona_turns_bench(config: PersonaTurnsConfig) -> dict[str, Any]:
    with _stack(config) as stack:
        return asyncio.run(_measure(stack.url, stack.token, config))
