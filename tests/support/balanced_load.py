"""Closed-loop turns over several gateways, as a client behind a load balancer sends them.

Each conversation (of its tenant, with that tenant's token) sends its next turn when the previous
one is acknowledged, after a short pause. Attempts rotate over the gateways: a turn that fails
(an HTTP error status, a refused or timed-out connection) is sent again, as a new numbered
message, to the next gateway — what a load balancer with retries does when a machine is gone.
Acknowledgements and failures are recorded as ``mirror chaos`` records them
(:class:`~mirror.harness.chaos.checker.Acknowledged`, :class:`~mirror.harness.chaos.driver.Failure`),
so its checker and recovery figures apply; conversation names are unique across tenants.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from mirror.harness.chaos.checker import Acknowledged
from mirror.harness.chaos.driver import Failure, error_detail, error_kind
from mirror.harness.chaos.report import recovery

REQUEST_TIMEOUT = httpx.Timeout(30.0, connect=2.0)
"""A cut-off machine answers nothing: a connection attempt gives up after 2 s and goes to the next gateway."""


@dataclass(frozen=True)
class Conversation:
    tenant: str
    name: str


@dataclass
class BalancedLoad:
    gateways: Sequence[str]
    """Base URLs (``http://10.77.0.1:8080``), one per machine."""
    tokens: dict[str, str]
    """Tenant → bearer token."""
    conversations: Sequence[Conversation]
    run_id: str
    pause_s: float = 0.3
    retry_pause_s: float = 0.2
    started: float = field(default_factory=time.monotonic)
    acknowledged: list[Acknowledged] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    failed_gateways: Counter[str] = field(default_factory=Counter)
    gateway_of: dict[str, str] = field(default_factory=dict)
    """Each acknowledged message → the gateway that acknowledged it."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _attempts: Counter[str] = field(default_factory=Counter)

    def now(self) -> float:
        return time.monotonic() - self.started

    async def turn(self, client: httpx.AsyncClient, conversation: Conversation, label: str, *,
                   deadline: float | None = None, gateway: str | None = None) -> Acknowledged | None:
        """Send ``label`` until acknowledged (a new message and the next gateway per attempt), the
        load is stopped, or ``deadline`` (monotonic) passes. ``gateway``: that one only."""
        attempt = 0
        while (deadline is None and not self.stop.is_set()) or (deadline is not None and time.monotonic() < deadline):
            attempt += 1
            index = self._attempts[conversation.name] + self.conversations.index(conversation)
            self._attempts[conversation.name] += 1
            url = gateway or self.gateways[index % len(self.gateways)]
            message = f"machines {self.run_id} {conversation.name} {label} try {attempt}"
            sent = self.now()
            try:
                response = await client.post(f"{url}/v1/conversations/{conversation.name}/turns", json={"message": message},
                                             headers={"Authorization": f"Bearer {self.tokens[conversation.tenant]}"})
            except httpx.HTTPError as exc:
                self.failures.append(Failure(conversation.name, error_kind(exc), self.now(), sent, url))
                self.failed_gateways[url] += 1
            else:
                if response.status_code == 200:
                    ack = Acknowledged(conversation.name, int(response.json()["seq"]), message, sent, self.now())
                    self.acknowledged.append(ack)
                    self.gateway_of[message] = url
                    return ack
                self.failures.append(Failure(conversation.name, error_kind(response), self.now(), sent,
                                             f"{url}: {error_detail(response)}"))
                self.failed_gateways[url] += 1
            await asyncio.sleep(self.retry_pause_s)
        return None

    async def loop(self, client: httpx.AsyncClient, conversation: Conversation) -> None:
        turn = 0
        while not self.stop.is_set():
            turn += 1
            await self.turn(client, conversation, f"turn {turn}")
            await asyncio.sleep(self.pause_s)

    def answered_since(self, moment: float) -> set[str]:
        """The conversations with a turn sent after ``moment`` (seconds since the start) acknowledged."""
        return {ack.conversation for ack in self.acknowledged if ack.sent_s >= moment}

    def answered_between(self, start: float, end: float) -> set[str]:
        """The conversations with a turn sent after ``start`` acknowledged by ``end``."""
        return {ack.conversation for ack in self.acknowledged if ack.sent_s >= start and ack.acked_s <= end}

    def figures_since(self, moment: float, until: float | None = None) -> dict[str, Any]:
        """What a fault at ``moment`` cost: time until a turn sent after it was answered (the first
        conversation, every conversation), and the attempts that failed meanwhile, by kind and each
        as ``[conversation, kind, gateway address, sent, failed]`` (seconds after ``moment``)."""
        first, every = recovery(moment, self.acknowledged)
        end = until if until is not None else (moment + every if every is not None else self.now())
        failed = [failure for failure in self.failures if moment <= failure.at_s <= end]
        answered = {}
        for ack in self.acknowledged:
            if ack.sent_s >= moment and ack.conversation not in answered:
                answered[ack.conversation] = round(ack.acked_s - moment, 2)
        return {"first_answer_s": first, "every_conversation_answers_s": every,
                "answer_again_s": dict(sorted(answered.items())),
                "turns_failed_then_retried": len(failed),
                "conversations_with_a_failed_turn": len({failure.conversation for failure in failed}),
                "failed_by_kind": dict(Counter(failure.kind for failure in failed)),
                "failed": [[failure.conversation, failure.kind, failure.detail.split("//")[-1].split(":")[0],
                            round(failure.sent_s - moment, 1), round(failure.at_s - moment, 1)] for failure in failed]}

    def acks_of(self, conversation: str) -> list[Acknowledged]:
        return [ack for ack in self.acknowledged if ack.conversation == conversation]


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=httpx.Limits(max_connections=64))


__all__ = ["REQUEST_TIMEOUT", "BalancedLoad", "Conversation", "client"]
