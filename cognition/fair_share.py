"""Fair share of the model: per-tenant, weighted admission to a process's model slots.

The scarce resource of a Mirror process is its model calls in flight: every conversation a
conversation host runs shares one chat client, at most ``slots`` requests at once (the client's
``max_concurrency``). Without a scheduler in front of it, calls queue first come first served,
so one tenant flooding the stack queues every other tenant's turns behind its own, and its
thinking on top. :class:`FairShare` decides who gets the next free slot, and who is refused:

- **Weighted fair queueing between tenants** (start-time fair queueing). Each tenant has a
  virtual finish tag; admitting one of its calls moves the tag on by ``1 / weight``; a freed
  slot goes to the waiting tenant whose next tag is smallest (the earlier arrival on a tie). A
  tenant that starts a backlog starts from the shared virtual clock (the start tag of the last
  call admitted) if it is behind it. Two backlogged tenants of weights 2 and 1 are admitted A, A, B, A, A, B…; a tenant
  that was idle gets no banked credit (its tag restarts at the clock), and one alone gets every
  slot. A call costs one unit whatever its size: the slots, not tokens, are what is scarce.
- **The Talker before the Thinker, within a tenant.** A user waits on a Talker call; thinking
  is background. A tenant's freed share goes to its waiting Talker calls first. Across tenants
  the share decides, so a flood of one tenant's Talker calls cannot starve another's thinking.
- **Bounded queues, refused at once.** A Talker call finding its tenant's queue
  (``talker_queue``) or the stack's (``stack_queue``) full is refused before anything is sent:
  :class:`~mirror.cognition.errors.AdmissionRefused` with a ``Retry-After`` estimate (``scope``
  ``tenant`` — a 429 — when other tenants are being served, ``stack`` — a 503 — otherwise). A
  Thinker call finding its tenant's thinking queue (``thinker_queue``) full, or waiting longer
  than ``thinker_wait_s``, is shed (:class:`~mirror.cognition.errors.ThinkingShed`): the step
  becomes a ``thinker_failed`` event, nothing else changes. Nothing waits without a bound, so an
  overloaded process keeps serving what it can and answers the rest in milliseconds.

:class:`AdmittedLLM` is the LLM port through a :class:`FairShare`, for one tenant and one
priority: a conversation holds one for its Talker and one for its Thinker. The scheduler is
plain asyncio and per process (each conversation host has its own, sized to its client): the
stack's share is the sum of its hosts'.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from .errors import AdmissionRefused, ThinkingShed
from .llm import LLM, ChatRequest, ChatResponse, TokenSink, chat_to
from .talker_first import TalkerFirst

Priority = Literal["talker", "thinker"]
TALKER: Priority = "talker"
THINKER: Priority = "thinker"
FIRST_CALL_ESTIMATE_S = 1.0
"""What a model call is taken to last before one has been timed (for ``Retry-After``)."""
CALL_TIME_SMOOTHING = 0.1
"""The weight of the newest call in the moving average of call durations."""


@dataclass(frozen=True, slots=True)
class FairShareSettings:
    """How a process shares its model slots between tenants; built once at the edge.

    ``tenant_weights``: ``(tenant, weight)`` pairs (a tenant not named weighs ``default_weight``);
    a tenant of weight 2 gets twice the slots of one of weight 1 when both want more than there
    is. Queue bounds count calls waiting for a slot (0: derived from the slots):
    ``talker_queue`` per tenant (default: as many as the slots, so an admitted Talker call waits
    about one call's time at most), ``stack_queue`` for all tenants' Talker calls together
    (default: 4 × the slots), ``thinker_queue`` per tenant (default: 2 × the slots).
    ``thinker_wait_s``: the longest a thinking call waits before it is shed.
    """

    tenant_weights: tuple[tuple[str, float], ...] = ()
    default_weight: float = 1.0
    talker_queue: int = 0
    stack_queue: int = 0
    thinker_queue: int = 0
    thinker_wait_s: float = 30.0

    def __post_init__(self) -> None:
        for tenant, weight in self.tenant_weights:
            if not (isinstance(weight, int | float) and math.isfinite(weight) and weight > 0):
                raise ValueError(f"the weight of tenant {tenant!r} is {weight!r}; a weight is a number > 0")
        if not (math.isfinite(self.default_weight) and self.default_weight > 0):
            raise ValueError(f"default_weight is {self.default_weight!r}; a weight is a number > 0")
        if min(self.talker_queue, self.stack_queue, self.thinker_queue) < 0 or not self.thinker_wait_s > 0:
            raise ValueError("talker_queue, stack_queue and thinker_queue must be ≥ 0 (0: derived from the slots) "
                             f"and thinker_wait_s > 0, not {self.thinker_wait_s!r}")

    def weight(self, tenant: str) -> float:
        return dict(self.tenant_weights).get(tenant, self.default_weight)

    def queues(self, slots: int) -> tuple[int, int, int]:
        """``(talker_queue, stack_queue, thinker_queue)`` for ``slots`` model slots, the derived
        defaults filled in (the gateway's view of a host's slots reads the same bounds)."""
        return self.talker_queue or slots, self.stack_queue or 4 * slots, self.thinker_queue or 2 * slots


def parse_tenant_weights(entries: Sequence[str]) -> tuple[tuple[str, float], ...]:
    """``["acme=2", "demo=0.5"]`` → ``(("acme", 2.0), ("demo", 0.5))``; a ``ValueError`` naming the bad entry."""
    from mirror.events.ids import validate_identifier

    weights: dict[str, float] = {}
    for entry in entries:
        tenant, equals, number = entry.partition("=")
        try:
            weight = float(number)
        except ValueError:
            weight = math.nan
        if not equals or not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"tenant weight {entry!r} is not TENANT=WEIGHT with a weight > 0 (e.g. acme=2)")
        validate_identifier("tenant", tenant)
        weights[tenant] = weight
    return tuple(weights.items())


@dataclass
class _Tenant:
    """One tenant's place in the scheduler: its tag, its two queues and its counts."""

    weight: float
    finish: float = 0.0
    talkers: deque[tuple[int, asyncio.Future[float]]] = field(default_factory=deque)
    thinkers: deque[tuple[int, asyncio.Future[float]]] = field(default_factory=deque)
    running: int = 0
    admitted: int = 0
    refused: int = 0
    shed: int = 0
    held_s: dict[Priority, float] = field(default_factory=dict)
    """Slot-seconds its calls that ended held, by priority (from admission to release)."""
    holding: dict[Priority, tuple[int, float]] = field(default_factory=dict)
    """Its calls holding a slot now, by priority: (how many, the sum of their admission times)."""

    def slot_seconds(self, priority: Priority, now: float) -> float:
        """Slot-seconds its calls of ``priority`` have held, the running ones up to ``now``."""
        count, admitted_sum = self.holding.get(priority, (0, 0.0))
        return self.held_s.get(priority, 0.0) + count * now - admitted_sum

    @property
    def waiting(self) -> int:
        return len(self.talkers) + len(self.thinkers)


class FairShare:
    """``slots`` model calls at once, shared between tenants by weight (see the module docstring)."""

    def __init__(self, slots: int, settings: FairShareSettings | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError(f"slots is {slots}; a fair share needs at least one model slot")
        self.slots = slots
        self.settings = settings = settings or FairShareSettings()
        self.talker_queue, self.stack_queue, self.thinker_queue = settings.queues(slots)
        self._clock = clock
        self._free = slots
        self._idle_s = 0.0
        self._idle_since = clock()
        self._virtual = 0.0
        self._arrivals = itertools.count()
        self._tenants: dict[str, _Tenant] = {}
        self._call_s = FIRST_CALL_ESTIMATE_S

    # ------------------------------------------------------------------------ the one entry

    @asynccontextmanager
    async def slot(self, tenant: str, priority: Priority) -> AsyncIterator[None]:
        """Hold one model slot for ``tenant`` while the block runs; refused or shed at once
        (:class:`AdmissionRefused`, :class:`ThinkingShed`) when its queue is full."""
        started = await self._acquire(tenant, priority)
        try:
            yield
        finally:
            state = self._tenants[tenant]
            now = self._clock()
            held = now - started
            self._call_s += CALL_TIME_SMOOTHING * (held - self._call_s)
            count, admitted_sum = state.holding[priority]
            state.holding[priority] = (count - 1, admitted_sum - started)
            state.held_s[priority] = state.held_s.get(priority, 0.0) + held
            state.running -= 1
            self._release()

    async def _acquire(self, tenant: str, priority: Priority) -> float:
        """Wait for a slot (or be refused); the time it was admitted at."""
        state = self._tenant(tenant)
        if not state.waiting:  # it starts a backlog now: its tag from here, no credit for time it was idle
            state.finish = max(state.finish, self._virtual)
        if self._free > 0 and not self.waiting:
            self._take_free()
            return self._admit(state, priority)
        self._check_room(tenant, state, priority)
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        queue = state.talkers if priority == TALKER else state.thinkers
        entry = (next(self._arrivals), future)
        queue.append(entry)
        try:
            if priority == TALKER:
                return await future
            async with asyncio.timeout(self.settings.thinker_wait_s):
                return await future
        except BaseException as exc:
            if future.done() and not future.cancelled():  # the slot was handed over as the wait ended: pass it on
                admitted = future.result()
                count, admitted_sum = state.holding[priority]
                state.holding[priority] = (count - 1, admitted_sum - admitted)
                state.held_s[priority] = state.held_s.get(priority, 0.0) + self._clock() - admitted
                state.running -= 1
                self._release()
            else:
                future.cancel()
                if entry in queue:  # not when a freed slot came for it as it was cancelled (then passed on)
                    queue.remove(entry)
            if isinstance(exc, TimeoutError):
                state.shed += 1
                raise ThinkingShed(tenant, "stack", self._retry_after(len(queue)), len(queue), self.slots,
                                   f"shed: backlog: a thinking call of tenant {tenant!r} waited "
                                   f"{self.settings.thinker_wait_s:g} s for one of {self.slots} model slot(s); "
                                   "this thinking step is skipped, the next turn thinks again") from None
            raise

    def _check_room(self, tenant: str, state: _Tenant, priority: Priority) -> None:
        others = any(other is not state and (other.running or other.waiting) for other in self._tenants.values())
        if priority == THINKER:
            if len(state.thinkers) >= self.thinker_queue:
                state.shed += 1
                raise ThinkingShed(tenant, "tenant" if others else "stack", self._retry_after(len(state.thinkers)),
                                   len(state.thinkers), self.slots)
            return
        if len(state.talkers) >= self.talker_queue:
            state.refused += 1
            raise AdmissionRefused(tenant, "tenant" if others else "stack", self._retry_after(len(state.talkers)),
                                   len(state.talkers), self.slots)
        talkers = sum(len(other.talkers) for other in self._tenants.values())
        if talkers >= self.stack_queue:
            state.refused += 1
            raise AdmissionRefused(tenant, "stack", self._retry_after(talkers), len(state.talkers), self.slots)

    def check(self, tenant: str, priority: Priority) -> None:
        """Raise now what :meth:`slot` would refuse with now (nothing when it would admit or queue):
        a turn checks before its recall and prompt building, so a refusal costs them nothing."""
        state = self._tenant(tenant)
        if not (self._free > 0 and not self.waiting):
            self._check_room(tenant, state, priority)

    def _admit(self, state: _Tenant, priority: Priority) -> float:
        """``state``'s call of ``priority`` holds a slot from now; the time it was admitted at."""
        start = state.finish
        state.finish = start + 1 / state.weight
        self._virtual = max(self._virtual, start)
        state.running += 1
        state.admitted += 1
        now = self._clock()
        count, admitted_sum = state.holding.get(priority, (0, 0.0))
        state.holding[priority] = (count + 1, admitted_sum + now)
        return now

    def _take_free(self) -> None:
        self._count_idle()
        self._free -= 1

    def _count_idle(self) -> None:
        now = self._clock()
        self._idle_s += self._free * (now - self._idle_since)
        self._idle_since = now

    def _release(self) -> None:
        """A slot came free: to the waiting call the shares say is next, else back to the pool."""
        while (chosen := self._next()) is not None:
            state, priority, future = chosen
            if not future.done():  # done: its waiter was cancelled just now, and leaves on its own
                future.set_result(self._admit(state, priority))
                return
        self._count_idle()
        self._free += 1

    def _next(self) -> tuple[_Tenant, Priority, asyncio.Future[float]] | None:
        best: tuple[float, int, _Tenant] | None = None
        for state in self._tenants.values():
            queue = state.talkers or state.thinkers
            if not queue:
                continue
            rank = (state.finish + 1 / state.weight, queue[0][0], state)
            if best is None or rank[:2] < best[:2]:
                best = rank
        if best is None:
            return None
        state = best[2]
        priority = TALKER if state.talkers else THINKER
        _, future = (state.talkers or state.thinkers).popleft()
        return state, priority, future

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(self.settings.weight(tenant))
        return state

    def _retry_after(self, ahead: int) -> int:
        """Whole seconds until the calls ahead are likely through (at least 1)."""
        return max(1, math.ceil(self._call_s * (ahead / self.slots + 1)))

    # ------------------------------------------------------------------------ reading

    @property
    def waiting(self) -> int:
        return sum(state.waiting for state in self._tenants.values())

    def figures(self) -> dict[str, object]:
        """What an operator graphs: slots, free, and per tenant running, waiting, admitted, refused,
        shed; and where the slots' time went: ``idle_s`` (slot-seconds no call held) and per tenant
        ``talker_s`` / ``thinker_s`` (slot-seconds its calls held, by priority). Together they are
        ``slots`` × the time since the share was made: the difference of two readings says how a
        stretch of load was spent."""
        now = self._clock()
        return {
            "slots": self.slots, "free": self._free, "call_s_mean": round(self._call_s, 4),
            "idle_s": round(self._idle_s + self._free * (now - self._idle_since), 4),
            "tenants": {name: {"weight": state.weight, "running": state.running, "waiting_talker": len(state.talkers),
                               "waiting_thinker": len(state.thinkers), "admitted": state.admitted,
                               "refused": state.refused, "shed": state.shed,
                               "talker_s": round(state.slot_seconds(TALKER, now), 4),
                               "thinker_s": round(state.slot_seconds(THINKER, now), 4)}
                        for name, state in list(self._tenants.items())},
        }


class AdmittedLLM:
    """The LLM port through a :class:`FairShare`: each chat call holds a slot of ``tenant`` at
    ``priority`` while it runs (embeddings go straight through: they are the embedder's, not the
    chat model's, and cost the model no slot here).

    With the process's :class:`~mirror.cognition.talker_first.TalkerFirst`, a Talker call is the
    turn waiting (not busy: thinking may run meanwhile), and a Thinker call that has answered
    returns once no turn is busy (its answer is parsed and written after theirs)."""

    def __init__(self, llm: LLM, share: FairShare, tenant: str, priority: Priority,
                 talker_first: TalkerFirst | None = None) -> None:
        self.llm, self.share, self.tenant, self.priority = llm, share, tenant, priority
        self.talker_first = talker_first

    def __repr__(self) -> str:
        return f"AdmittedLLM({self.llm!r}, tenant={self.tenant!r}, priority={self.priority!r})"

    async def chat(self, request: ChatRequest) -> ChatResponse:
        with self._waiting():
            async with self.share.slot(self.tenant, self.priority):
                response = await self.llm.chat(request)
        await self._after()
        return response

    async def chat_streamed(self, request: ChatRequest, on_token: TokenSink) -> ChatResponse:
        with self._waiting():
            async with self.share.slot(self.tenant, self.priority):
                response = await chat_to(self.llm, request, on_token)  # streamed when the model streams
        await self._after()
        return response

    def _waiting(self) -> contextlib.AbstractContextManager[None]:
        """A Talker call: its turn waits, not busy."""
        if self.talker_first is None or self.priority != TALKER:
            return contextlib.nullcontext()
        return self.talker_first.waiting()

    async def _after(self) -> None:
        """A Thinker call answered: the busy turns first."""
        if self.talker_first is not None and self.priority == THINKER:
            await self.talker_first.quiet()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.llm.embed(texts)

    def check(self) -> None:
        """Refuse at once what a call now would be refused (:meth:`FairShare.check`)."""
        try:
            self.share.check(self.tenant, self.priority)
        except AdmissionRefused as refused:
            raise refused.during(self.priority) from None


def weights_table(weights: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """A mapping of weights as :attr:`FairShareSettings.tenant_weights` holds them (sorted, hashable)."""
    return tuple(sorted(weights.items()))


__all__ = ["AdmittedLLM", "FairShare", "FairShareSettings", "Priority", "TALKER", "THINKER", "parse_tenant_weights",
           "weights_table"]
