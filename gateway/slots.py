"""The gateway's view of each conversation host's model slots: most overload refused here, with no Ray hop.

A host's fair share (:mod:`mirror.cognition.fair_share`) is the authority on who gets a model
slot; it refuses a Talker call whose queue is full with
:class:`~mirror.cognition.errors.AdmissionRefused`. Asking it costs a refusal an HTTP request, a
Ray call to the host and back (an exception carried across Ray), and the conversation's
activation: tens of milliseconds when the stack is at its limit, which is exactly when refusals
come by the hundred. So the gateway keeps a view of each host it sends turns to, and refuses
here what the host would refuse, with the same error (429 or 503 with ``Retry-After``):

- **Its own turns in flight**, per host and tenant. A host holds at most ``slots`` calls running
  and ``talker_queue`` of a tenant's Talker calls waiting (``stack_queue`` of all tenants'), so a
  gateway that alone has ``slots + talker_queue`` of a tenant's turns in flight to a host (or
  ``slots + stack_queue`` in all) knows the next would be refused. Other gateways only add load,
  so this holds across any number of them.
- **What the host said last.** When a host refuses a tenant's turn while this gateway had ``n``
  of that tenant's turns in flight to it, the gateway refuses that tenant's next turns to the host
  while it still has ``n`` or more in flight, for one turn's time (the mean of its turns to the
  host): a turn of its own that ends makes room for one more, and when the time is up the next
  turn goes to the host, which says again. The host's verdict, not a guess, sets the bound; it
  can be stale by at most one turn's time, which is the tolerance of the view across gateways
  (another gateway's turns ending meanwhile may free room this one does not see).

A turn with an ``Idempotency-Key`` is never refused here: it may be the retry of a turn already
answered, which the conversation replays without a model call. Only hosted conversations are
viewed (a dedicated conversation's actor has slots of its own).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from mirror.actors.conversation import RebuildReport
from mirror.actors.handle import ConversationHandle
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.token_stream import StreamItem
from mirror.cognition.errors import AdmissionRefused
from mirror.cognition.fair_share import FIRST_CALL_ESTIMATE_S, FairShareSettings
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey

__all__ = ["SlotView", "ViewedConversation", "viewed"]

TURN_TIME_SMOOTHING = 0.1
"""The weight of the newest turn in the moving average of a host's turn durations."""


@dataclass
class _Host:
    """One host as this gateway sees it."""

    in_flight: dict[str, int] = field(default_factory=dict)
    total: int = 0
    turn_s: float = FIRST_CALL_ESTIMATE_S
    refused: dict[str, tuple[int, float, AdmissionRefused]] = field(default_factory=dict)
    """tenant -> (its turns in flight when the host refused one, until when that bound holds, the refusal)."""


class SlotView:
    """This gateway's view of every host's slots (see the module docstring); one per gateway app."""

    def __init__(self, slots: int, settings: FairShareSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.talker_queue, self.stack_queue, _ = settings.queues(slots)
        self._clock = clock
        self._hosts: dict[int, _Host] = {}
        self.refused_here = 0
        self.refused_by_host = 0

    def check(self, host: int, tenant: str) -> None:
        """Raise the :class:`AdmissionRefused` the host would answer a turn of ``tenant`` with now, if sure of it."""
        state = self._hosts.get(host)
        if state is None:
            return
        mine = state.in_flight.get(tenant, 0)
        learned = state.refused.get(tenant)
        if learned is not None:
            bound, until, refusal = learned
            if self._clock() >= until:
                del state.refused[tenant]
            elif mine >= bound:
                self.refused_here += 1
                raise self._refusal(tenant, refusal.scope, refusal.retry_after_s, refusal.waiting)
        if mine >= self.slots + self.talker_queue:
            others = any(count for name, count in state.in_flight.items() if name != tenant)
            self.refused_here += 1
            raise self._refusal(tenant, "tenant" if others else "stack", self._retry_after(state), self.talker_queue)
        if state.total >= self.slots + self.stack_queue:
            self.refused_here += 1
            raise self._refusal(tenant, "stack", self._retry_after(state), mine)

    def began(self, host: int, tenant: str) -> float:
        """A turn of ``tenant`` was sent to ``host``; returns its start time for :meth:`ended`."""
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host()
        state.in_flight[tenant] = state.in_flight.get(tenant, 0) + 1
        state.total += 1
        return self._clock()

    def ended(self, host: int, tenant: str, started: float, error: BaseException | None = None) -> None:
        """The turn is answered (``error``: how it failed); a refusal by the host sets the tenant's bound."""
        state = self._hosts[host]
        state.in_flight[tenant] -= 1
        state.total -= 1
        mine = state.in_flight[tenant]
        if not mine:
            del state.in_flight[tenant]
        refusal = _refusal_in(error)
        if refusal is not None:
            self.refused_by_host += 1
            state.refused[tenant] = (max(1, mine), self._clock() + state.turn_s, refusal)
            return
        if error is None:
            state.turn_s += TURN_TIME_SMOOTHING * (self._clock() - started - state.turn_s)

    def _refusal(self, tenant: str, scope: str, retry_after_s: int, waiting: int) -> AdmissionRefused:
        refused = AdmissionRefused(tenant, scope, retry_after_s, waiting, self.slots)
        refused.during("talker")
        return refused

    def _retry_after(self, state: _Host) -> int:
        return max(1, math.ceil(state.turn_s))

    def figures(self) -> dict[str, Any]:
        """What the view holds: per host, this gateway's turns in flight by tenant, and the refusals."""
        return {"refused_here": self.refused_here, "refused_by_host": self.refused_by_host,
                "hosts": {host: {"in_flight": dict(state.in_flight), "turn_s_mean": round(state.turn_s, 4),
                                 "held": sorted(state.refused)} for host, state in sorted(self._hosts.items())}}


def _refusal_in(error: BaseException | None) -> AdmissionRefused | None:
    """The host's refusal in ``error`` (raised here, or carried across Ray as its ``cause``)."""
    if error is None:
        return None
    cause = getattr(error, "cause", None) or error
    return cause if isinstance(cause, AdmissionRefused) else None


@dataclass(frozen=True)
class ViewedConversation:
    """A hosted conversation's handle whose turns pass the gateway's :class:`SlotView` first."""

    handle: ConversationHandle
    view: SlotView
    host: int

    @property
    def key(self) -> StreamKey:
        return self.handle.key

    async def turn(self, request: TurnRequest) -> TurnResult:
        tenant = self.key.tenant
        if request.idempotency_key is None:
            self.view.check(self.host, tenant)
        started = self.view.began(self.host, tenant)
        try:
            result = await self.handle.turn(request)
        except BaseException as exc:
            self.view.ended(self.host, tenant, started, exc)
            raise
        self.view.ended(self.host, tenant, started)
        return result

    async def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        tenant = self.key.tenant
        if request.idempotency_key is None:
            self.view.check(self.host, tenant)
        started = self.view.began(self.host, tenant)
        failed: BaseException | None = None
        try:
            async for item in self.handle.turn_stream(request):
                yield item
        except BaseException as exc:
            failed = exc
            raise
        finally:
            self.view.ended(self.host, tenant, started, failed)

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        return await self.handle.choose(mind)

    async def reflect(self) -> ReflectionResult:
        return await self.handle.reflect()

    async def summary(self) -> ConversationSummary:
        return await self.handle.summary()

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        return await self.handle.wait_idle(timeout=timeout)

    async def state_bytes(self) -> bytes:
        return await self.handle.state_bytes()

    async def rebuild_report(self) -> RebuildReport | None:
        return await self.handle.rebuild_report()

    async def passivate(self) -> None:
        await self.handle.passivate()

    async def pid(self) -> int:
        return await self.handle.pid()

    async def node_id(self) -> str | None:
        return await self.handle.node_id()

    def forget(self) -> None:
        self.handle.forget()


def viewed(conversations: Callable[[StreamKey], ConversationHandle], view: SlotView) -> Callable[[StreamKey], ConversationHandle]:
    """``conversations`` whose hosted handles (those with an int ``slot``: their host) pass ``view`` first."""
    def handle(key: StreamKey) -> ConversationHandle:
        found = conversations(key)
        host = getattr(found, "slot", None)
        return ViewedConversation(found, view, host) if isinstance(host, int) else found

    return handle
