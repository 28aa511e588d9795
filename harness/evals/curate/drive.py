"""Driving one dialogue through the gateway over HTTP, as a client of the real stack.

Every turn is ``POST /v1/conversations/{id}/turns`` with ``{"message": …, "mode": …}`` and, when
the run sets it, ``"memory"`` (the first turn fixes both for the conversation; later ones repeat them). ``sync`` timing adds ``?sync=true``,
so each turn waits for the previous turn's thinking (the papers' benchmark); ``human`` timing
posts without it and pauses between turns as a person would (:class:`~.timing.HumanPacing`).

After the final turn the conversation's events are read back (``GET …/events``, once the log
holds the final turn) for what they say about the model's work: tokens and latency from every
event's provenance (Talker and Thinker alike, as far as the log holds them when the dialogue
ends: thinking that follows the final turn may not be counted), and the Talker's share apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from mirror.harness._http_events import read_events
from mirror.harness.evals.curate.errors import CurateDriveError
from mirror.harness.evals.curate.timing import HumanPacing

__all__ = ["Driven", "conversation_events", "drive_dialogue"]

TURN_TIMEOUT_S = 660.0
EVENTS_WAIT_S = 30.0


@dataclass
class Driven:
    """What driving one dialogue gave: the replies and the model's work as the log recorded it."""

    conversation: str
    replies: list[str] = field(default_factory=list)
    last_seq: int = 0
    talker_llm_ms: float = 0.0
    """The sum of the turns' ``llm_ms`` (the Talker's model time, as the gateway reported it)."""
    tokens_in: int = 0
    tokens_out: int = 0
    talker_tokens_in: int = 0
    talker_tokens_out: int = 0
    model_ms: float = 0.0
    """The sum of ``latency_ms`` over every logged event's provenance (Talker and Thinker)."""
    paused_s: float = 0.0
    talker_model: str = ""
    """The model the Talker's provenance names (what a running stack serves, which the eval is not told)."""

    @property
    def final_answer(self) -> str:
        return self.replies[-1] if self.replies else ""


async def post_turn(client: httpx.AsyncClient, conversation: str, number: int, message: str, mode: str,
                    sync: bool, memory: bool | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "mode": mode}
    if memory is not None:
        body["memory"] = memory
    try:
        response = await client.post(f"/v1/conversations/{conversation}/turns", json=body,
                                     params={"sync": "true" if sync else "false"}, timeout=TURN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise CurateDriveError(conversation, number, f"{type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise CurateDriveError(conversation, number, f"HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


async def conversation_events(client: httpx.AsyncClient, conversation: str, through: int = 0,
                              wait_s: float = EVENTS_WAIT_S) -> list[dict[str, Any]]:
    """Every logged event of the conversation's main branch, once the log holds seq ``through``
    (the ingester lags the stream a little); after ``wait_s``, whatever it holds."""
    deadline = time.monotonic() + wait_s
    while True:
        events = await read_events(client, conversation)
        if (events and events[-1]["seq"] >= through) or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.1)


def count_work(driven: Driven, events: Sequence[dict[str, Any]]) -> None:
    for event in events:
        provenance = event.get("provenance")
        if not provenance:
            continue
        prompt, completion = int(provenance.get("prompt_tokens") or 0), int(provenance.get("completion_tokens") or 0)
        driven.tokens_in += prompt
        driven.tokens_out += completion
        driven.model_ms += float(provenance.get("latency_ms") or 0.0)
        if event.get("type") == "turn":
            driven.talker_model = str(provenance.get("model") or driven.talker_model)
            driven.talker_tokens_in += prompt
            driven.talker_tokens_out += completion


async def drive_dialogue(client: httpx.AsyncClient, conversation: str, turns: Sequence[str], mode: str, *,
                         timing: str, pacing: HumanPacing | None = None, memory: bool | None = None) -> Driven:
    """Send ``turns`` in order (see the module docstring); raises :class:`CurateDriveError` on a failed turn."""
    driven = Driven(conversation)
    sync = timing == "sync"
    for number, message in enumerate(turns, start=1):
        if number > 1 and pacing is not None and not sync:
            pause = pacing.pause_s(driven.replies[-1], message)
            driven.paused_s += pause
            await asyncio.sleep(pause)
        answer = await post_turn(client, conversation, number, message, mode, sync, memory)
        driven.replies.append(str(answer["reply"]))
        driven.last_seq = int(answer["seq"])
        driven.talker_llm_ms += float(answer.get("llm_ms") or 0.0)
    count_work(driven, await conversation_events(client, conversation, driven.last_seq))
    return driven
