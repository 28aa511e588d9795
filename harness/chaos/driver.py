"""The load: N conversations × T turns over HTTP, closed loop, recording exactly what was acknowledged.

Each conversation sends its next turn when the previous one is answered. A turn that fails (an
HTTP error status or a transport exception) is recorded with its kind and time, and tried again
after a short pause *with a new message* (``… try 2``): messages are unique per attempt, so the
checker can tell an acknowledged turn from an attempt that reached the log without an answer.
A turn is acknowledged only by a 200 carrying its ``seq``; turns not acknowledged by the
deadline are counted, never guessed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from mirror.harness.chaos.checker import Acknowledged

__all__ = ["Driver", "Failure", "error_detail", "error_kind"]


@dataclass(frozen=True)
class Failure:
    conversation: str
    kind: str
    """``http 503``, or the exception's class (``ReadTimeout``, ``ConnectError``…)."""
    at_s: float
    sent_s: float
    detail: str = ""
    """What an HTTP error's body said was wrong (its ``detail``, shortened), so a run tells what was down."""


DETAIL_CHARS = 100


def error_detail(response: httpx.Response) -> str:
    """The ``detail`` of a FastAPI error body (else the text), on one line, at most :data:`DETAIL_CHARS`."""
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text
    text = " ".join(str(detail).split())
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 1] + "…"


def error_kind(error: httpx.Response | BaseException) -> str:
    if isinstance(error, httpx.Response):
        return f"http {error.status_code}"
    return type(error).__name__


@dataclass
class Driver:
    client: httpx.AsyncClient
    run_id: str
    conversations: int
    turns: int
    started: float
    """``time.monotonic()`` at the run's start: every time recorded is seconds since then."""
    deadline: float
    retry_pause_s: float = 0.2
    pause_s: float = 0.0
    """The user's pause before each turn (not before a retry)."""
    on_ack: Callable[[Acknowledged], None] = lambda ack: None
    acknowledged: list[Acknowledged] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    unacknowledged: dict[str, int] = field(default_factory=dict)
    """Per conversation, the turns still not acknowledged when the deadline passed."""

    def conversation_ids(self) -> list[str]:
        return [f"chaos-{self.run_id}-{index}" for index in range(self.conversations)]

    def message_prefix(self) -> str:
        return f"chaos {self.run_id} "

    def now(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> None:
        await asyncio.gather(*(self._conversation(conversation) for conversation in self.conversation_ids()))

    async def _conversation(self, conversation: str) -> None:
        for turn in range(1, self.turns + 1):
            await asyncio.sleep(self.pause_s)
            if not await self.turn(conversation, f"turn {turn}"):
                self.unacknowledged[conversation] = self.turns - turn + 1
                return

    async def turn(self, conversation: str, label: str, *, deadline: float | None = None) -> Acknowledged | None:
        """Send ``label`` until acknowledged (a new message per attempt) or the deadline passes."""
        attempt = 0
        while time.monotonic() < (self.deadline if deadline is None else deadline):
            attempt += 1
            message = f"{self.message_prefix()}{conversation} {label} try {attempt}"
            sent = self.now()
            try:
                response = await self.client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})
            except httpx.HTTPError as exc:
                self.failures.append(Failure(conversation, error_kind(exc), self.now(), sent))
            else:
                if response.status_code == 200:
                    ack = Acknowledged(conversation, int(response.json()["seq"]), message, sent, self.now())
                    self.acknowledged.append(ack)
                    self.on_ack(ack)
                    return ack
                self.failures.append(Failure(conversation, error_kind(response), self.now(), sent, error_detail(response)))
            await asyncio.sleep(self.retry_pause_s)
        return None
