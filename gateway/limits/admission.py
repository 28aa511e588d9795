"""Where the limits are enforced: an ASGI middleware around every ``/v1`` request of a limited tenant.

A middleware, not a route's dependency, because it sees the whole of a request: it counts the
request before any route runs, adds the ``x-ratelimit-*`` headers to whatever answers, and frees a
turn's slot when the turn's response ends, however it ends (the last byte sent, a failure, a
client that left). Its refusals are answered through :mod:`mirror.gateway.error_table` (a
:class:`~mirror.gateway.errors.LimitReached` is a 429 with ``Retry-After``) in the route's body
shape: OpenAI's on ``/v1/chat/completions``, the native one elsewhere.

Costs: a request of a tenant with no limits (:attr:`TenantLimits.any` false) touches no shared
state — its limits are a dict lookup in the registry, re-read only when the file changes. A
limited tenant's request is decided on what this gateway holds (:class:`Limiter`): requests of
the minute leased ``rpm // 50`` at a time, freed slots kept a moment when the limit is large,
conversations already marked live, the record as last read (re-read in the background each
second), its own turns' tokens; only what it does not hold costs a read-modify-write of the
record (:mod:`.usage`) on the request's path. Tokens are charged in the background (the turns
that end within :data:`CHARGE_LINGER_S` in one write), kept slots given back by one sweep, slots
of a small limit just before the response's last body message.

Turns are ``POST /v1/conversations/{conversation}/turns`` and ``POST /v1/chat/completions``; a
turn's tokens reach :func:`metered` from :meth:`~mirror.gateway.runtime.GatewayRuntime.ask`
(plain and streamed turns both come back through it), a front end's background task's (a chat
completion answered statelessly, :mod:`mirror.gateway.openai.background`) :func:`metered_tokens`,
through a context variable the middleware sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirror import metrics
from mirror.actors.results import TurnResult
from mirror.events.counters import SharedCounters
from mirror.gateway.error_table import answer
from mirror.gateway.errors import LimitReached
from mirror.gateway.failures import respond
from mirror.gateway.openai.naming import first_name, path_name_of
from mirror.gateway.tenants import TenantLimits

from .usage import LEASE_S, Usage, charge, lease, ratelimit_headers, release, renew, usage_key

__all__ = ["CONVERSATION_HEADER", "Limiter", "LimitsMiddleware", "metered", "metered_tokens"]

log = logging.getLogger(__name__)

CONVERSATION_HEADER = "x-mirror-conversation"
"""The OpenAI route's header naming a conversation; the whole order is :mod:`mirror.gateway.openai.naming`'s."""
_NATIVE_TURN = re.compile(r"^/v1/conversations/([^/]+)/turns/?$")
_OPENAI_TURN = "/v1/chat/completions"


REQUEST_LEASE_SHARE = 50
"""A gateway takes a tenant's requests of a minute ``requests_per_minute // 50`` at a time (at least one)."""
IDLE_SLOT_SHARE = 10
"""A gateway keeps up to ``concurrent_turns // 10`` freed slots of a tenant for its next turns (none below 10)."""
IDLE_SLOT_S = 1.0
"""How long a kept slot stays with its gateway unused before it is given back to the shared count
(one sweep for all of a gateway's kept slots, not a timer per turn)."""
CHARGE_LINGER_S = 0.25
"""A finished turn's tokens wait this long before they are written, so the turns that finish
meanwhile share one read-modify-write (at ten turns a second, one write for two or three turns
rather than one each). This gateway counts them at once (its next requests are judged with
them); other gateways see them up to this much later than they otherwise would. A budget
they may have spent is decided on the record after writing them at once, without the wait."""
KNOWN_FRESH_S = 1.0
"""The record a gateway decides on is read again (in the background) once it is older than this:
what other gateways counted meanwhile (tokens above all) reaches it within about this long."""
LIVE_MARGIN_S = 30.0
"""A conversation this gateway marked live counts as live without a round trip until this long
before its mark leaves the window (later turns' times are written with the leases' renewal)."""


@dataclass
class _Held:
    """What this gateway holds of one tenant's limits between round trips (see the module docstring)."""

    known: Usage = field(default_factory=Usage)
    """The record as this gateway last read or wrote it."""
    read_at: float | None = None
    """When ``known`` was read or written (None: never, so the first request reads it on its path)."""
    reading: asyncio.Task[None] | None = None
    unsent_tokens: int = 0
    """Finished turns' tokens not yet written (:meth:`Limiter.charge`)."""
    charging: asyncio.Task[None] | None = None
    flush: asyncio.Event = field(default_factory=asyncio.Event)
    """Set: write the unsent tokens now, not after :data:`CHARGE_LINGER_S`."""
    minute: int = -1
    requests: int = 0
    """Requests of ``minute`` leased and not yet used (the record counts them as used)."""
    idle: dict[str, float] = field(default_factory=dict)
    """Slots leased with no turn running: holder -> since when."""
    busy: set[str] = field(default_factory=set)
    live: dict[str, float] = field(default_factory=dict)
    """Conversations marked live in the record by this gateway: name -> the time written."""
    later: dict[str, float] = field(default_factory=dict)
    """Their later turns' times, written with the next renewal."""

    @property
    def holders(self) -> frozenset[str]:
        return frozenset(self.idle) | frozenset(self.busy)


class Limiter:
    """One gateway app's side of the shared counts: leases of requests and slots, live marks, token charges."""

    def __init__(self, counters: Callable[[], Any], live_window_s: float, clock: Callable[[], float] = time.time) -> None:
        self._counters = counters
        """``await counters()``: the deployment's :class:`SharedCounters` (the runtime's connections' own)."""
        self.live_window_s = live_window_s
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.round_trips = 0
        """Read-modify-writes of the shared record made on a request's path (the bench reads it)."""

    async def _store(self) -> SharedCounters:
        store: SharedCounters = await self._counters()
        return store

    async def admit(self, tenant: str, limits: TenantLimits, *, turn: bool, conversation: str | None) -> tuple[str | None, dict[str, str]]:
        """Count the request or raise :class:`LimitReached`; returns the turn's slot (None: no slot
        limit or no turn) and the ``x-ratelimit-*`` headers. No round trip when what this gateway
        holds admits it; else one read-modify-write that leases more."""
        now = self._clock()
        held = self._held.setdefault(tenant, _Held())
        if held.read_at is None:
            self.round_trips += 1
            await self._read(tenant, held)
        elif now - held.read_at > KNOWN_FRESH_S and (held.reading is None or held.reading.done()):
            held.reading = asyncio.create_task(self._read(tenant, held), name=f"mirror-limits-read-{tenant}")
        minute = int(now // 60)
        if held.minute != minute:
            held.minute, held.requests = minute, 0
        known = held.known.current(now, self.live_window_s)
        rpm, slots, live = limits.requests_per_minute, limits.concurrent_turns, limits.live_conversations
        budget = limits.tokens_per_day
        requests = max(1, rpm // REQUEST_LEASE_SHARE) if rpm is not None and held.requests < 1 else 0
        holder = uuid.uuid4().hex[:16] if turn and slots is not None and not held.idle else None
        marked = held.live.get(conversation, 0.0) if conversation is not None else 0.0
        mark = (conversation if turn and live is not None and marked <= now - self.live_window_s + LIVE_MARGIN_S
                else None)
        # This gateway's own turns' tokens count before its next request is judged, written or not;
        # a budget they would spend is decided again on the current record, once they are written.
        spent = turn and budget is not None and known.tokens + held.unsent_tokens >= budget
        if spent and held.charging is not None:
            held.flush.set()
            await asyncio.gather(held.charging, return_exceptions=True)
        if requests or holder is not None or mark is not None or spent:
            self.round_trips += 1
            outcome = await (await self._store()).change(usage_key(tenant), lambda data: lease(
                data, tenant=tenant, limits=limits, now=now, live_window_s=self.live_window_s, turn=turn,
                requests=requests, holder=holder, conversation=mark))
            if isinstance(outcome, LimitReached):
                raise outcome
            known = held.known = outcome.usage
            held.read_at = now
            if outcome.minute == minute:
                held.requests += outcome.requests
            if holder is not None:
                held.idle[holder] = now
            if mark is not None:
                held.live[mark] = now
        if rpm is not None:
            held.requests -= 1
        slot = None
        if turn and slots is not None:
            slot = next(iter(held.idle))
            del held.idle[slot]
            held.busy.add(slot)
        if turn and live is not None and conversation is not None and mark is None:
            held.later[conversation] = now
        if held.busy or held.idle or held.later:
            self._keep_renewing()
        return slot, ratelimit_headers(limits, known, now, turn, unused_requests=max(0, held.requests),
                              idle_slots=len(held.idle))

    async def _read(self, tenant: str, held: _Held) -> None:
        read_at = self._clock()
        try:
            held.known = Usage.decode(await (await self._store()).read(usage_key(tenant)))
        except Exception as exc:
            if held.read_at is None:
                raise  # on the request's path: answered by the one table (the broker down: 503)
            log.warning("reading %s's use of its limits failed: %r", tenant, exc)
            return
        held.read_at = read_at

    async def release(self, tenant: str, limits: TenantLimits, holder: str) -> None:
        """A turn's slot is free: kept a moment for this gateway's next turn when the limit is large
        (:data:`IDLE_SLOT_SHARE`), else given back at once (one round trip)."""
        held = self._held.get(tenant)
        if held is None or holder not in held.busy:
            return
        held.busy.discard(holder)
        slots = limits.concurrent_turns or 0
        if len(held.idle) < slots // IDLE_SLOT_SHARE:
            held.idle[holder] = self._clock()
            if self._sweeper is None or self._sweeper.done():
                self._sweeper = asyncio.create_task(self._sweep_idle(), name="mirror-limits-idle")
            return
        await self._give_back(tenant, holder)

    async def _give_back(self, tenant: str, holder: str) -> None:
        held = self._held.setdefault(tenant, _Held())
        held.known = await (await self._store()).change(usage_key(tenant), lambda data: release(data, holder=holder))

    async def _sweep_idle(self) -> None:
        """While this gateway keeps idle slots: each one unused for :data:`IDLE_SLOT_S` is given back
        (a slot taken by a turn meanwhile is no longer idle; freed again, its time starts anew)."""
        while True:
            oldest = min((since for held in self._held.values() for since in held.idle.values()), default=None)
            if oldest is None:
                return
            await asyncio.sleep(max(0.0, oldest + IDLE_SLOT_S - self._clock()))
            now = self._clock()
            for tenant, held in list(self._held.items()):
                for holder, since in list(held.idle.items()):
                    if now - since < IDLE_SLOT_S or held.idle.get(holder) != since:
                        continue
                    del held.idle[holder]
                    try:
                        await self._give_back(tenant, holder)
                    except Exception as exc:  # its lease frees it in LEASE_S
                        log.warning("giving back an idle slot of %s failed: %r", tenant, exc)

    def charge(self, tenant: str, tokens: int) -> None:
        """Add a finished turn's tokens to the tenant's day, in the background: the turns finished
        within :data:`CHARGE_LINGER_S`, or while one write is under way, are added together by one
        write (one writer per tenant)."""
        held = self._held.setdefault(tenant, _Held())
        held.unsent_tokens += tokens
        if held.charging is None or held.charging.done():
            held.charging = asyncio.create_task(self._charge(tenant, held), name=f"mirror-limits-charge-{tenant}")

    async def _charge(self, tenant: str, held: _Held) -> None:
        if not held.flush.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(held.flush.wait(), CHARGE_LINGER_S)
        held.flush.clear()
        while held.unsent_tokens:
            tokens = held.unsent_tokens

            def step(data: bytes | None, tokens: int = tokens) -> tuple[bytes | None, Usage]:
                return charge(data, tokens=tokens, now=self._clock())
            try:
                usage = await (await self._store()).change(usage_key(tenant), step)
            except Exception as exc:
                log.warning("%d tokens of %s's turns were not counted against its daily budget: %r", tokens, tenant, exc)
                held.unsent_tokens -= tokens
                return
            held.unsent_tokens -= tokens
            held.known, held.read_at = usage, self._clock()

    def _keep_renewing(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew(), name="mirror-limits-renew")

    async def _renew(self) -> None:
        """Every third of a lease, while this gateway holds any slot or has live marks to write:
        its slots' leases renewed, its turns' later times of live conversations written."""
        while any(held.busy or held.idle or held.later for held in self._held.values()):
            await asyncio.sleep(LEASE_S / 3)
            for tenant, held in list(self._held.items()):
                mine, later = held.holders, held.later
                if not mine and not later:
                    continue
                held.later = {}

                def step(data: bytes | None, mine: frozenset[str] = mine,
                         later: dict[str, float] = later) -> tuple[bytes | None, Usage]:
                    return renew(data, holders=mine, now=self._clock(), live=later)
                try:
                    held.known = await (await self._store()).change(usage_key(tenant), step)
                    held.live.update({name: at for name, at in later.items() if name in held.known.live})
                except Exception as exc:  # the broker may be down a moment: the next round tries again
                    held.later = {**later, **held.later}
                    log.warning("renewing %s's running turns failed: %r", tenant, exc)


@dataclass
class _Meter:
    """A turn's request: where :func:`metered` sends its tokens."""

    limiter: Limiter
    tenant: str
    charged: bool = field(default=False)


_METER: contextvars.ContextVar[_Meter | None] = contextvars.ContextVar("mirror_limits_meter", default=None)


def metered(result: object) -> None:
    """Count a turn's tokens against its tenant's day, if the request is a limited tenant's turn."""
    if isinstance(result, TurnResult):
        metered_tokens(result.prompt_tokens + result.completion_tokens)


def metered_tokens(tokens: int) -> None:
    """Count ``tokens`` of the request's model call against its tenant's day, if the request is a
    limited tenant's turn: a turn's (:func:`metered`) or a front end's background task's
    (:mod:`mirror.gateway.openai.background`), through the same writer; once per request."""
    meter = _METER.get()
    if meter is None or meter.charged:
        return
    meter.charged = True
    meter.limiter.charge(meter.tenant, tokens)


class LimitsMiddleware:
    """The enforcement point (see the module docstring); the app's runtime is ``scope["app"].state.runtime``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._limiter: Limiter | None = None

    def _limiter_of(self, runtime: Any) -> Limiter:
        if self._limiter is None:
            async def counters() -> SharedCounters:
                store: SharedCounters = (await runtime.connections()).counters()
                return store

            self._limiter = Limiter(counters, runtime.settings.runtime.passivate_after_s)
        return self._limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(("/v1/", "/c/")):
            return await self.app(scope, receive, send)
        runtime = scope["app"].state.runtime
        tenant = _tenant(scope, runtime)
        limits = runtime.registry.limits_of(tenant) if tenant is not None else None
        if tenant is None or limits is None or not limits.any:
            return await self.app(scope, receive, send)  # no limits: no shared state touched
        limiter = self._limiter_of(runtime)
        turn, conversation = _turn_of(scope)
        if turn and conversation is None and limits.live_conversations is not None:
            conversation, receive = await _body_user(receive)
        started = time.perf_counter()
        try:
            holder, headers = await limiter.admit(tenant, limits, turn=turn, conversation=conversation)
            headers = {**headers, "server-timing": f"limits;dur={(time.perf_counter() - started) * 1000:.3f}"}
        except Exception as exc:  # a refusal, or the broker down: answered by the one table
            metrics.limit_hit(tenant, exc)
            request = Request(scope)
            response = respond(request, answer(exc, request))
            return await response(scope, receive, send)
        freed = False

        async def free() -> None:
            nonlocal freed
            if holder is not None and not freed:
                freed = True
                try:
                    await limiter.release(tenant, limits, holder)
                except Exception as exc:  # its lease frees it in LEASE_S
                    log.warning("freeing a running turn's slot of %s failed: %r", tenant, exc)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                   *((k.encode(), v.encode()) for k, v in headers.items())]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await free()  # before the client has the whole answer, so its next turn finds the slot free
            await send(message)

        token = _METER.set(_Meter(limiter, tenant) if turn else None)
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            _METER.reset(token)
            if holder is not None and not freed:  # failed, or the client left: freed even if this task is cancelled
                await asyncio.shield(asyncio.ensure_future(free()))


def _tenant(scope: Scope, runtime: Any) -> str | None:
    """The tenant of the request's bearer token (the route's own check answers a missing or bad one)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return runtime.registry.tenant_of(token) if scheme.lower() == "bearer" and token else None
    return None


def _turn_of(scope: Scope) -> tuple[bool, str | None]:
    """Whether the request is a turn, and its conversation when its path or header names it."""
    if scope["method"] != "POST":
        return False, None
    path = scope["path"]
    found = _NATIVE_TURN.match(path)
    if found:
        return True, found.group(1)
    if path == _OPENAI_TURN or path_name_of(path) is not None:  # named as the route names it: openai/naming.py
        return True, first_name(path, {name.decode("latin-1").lower(): value.decode("latin-1")
                                       for name, value in scope["headers"]}, {})
    return False, None


async def _body_user(receive: Receive) -> tuple[str | None, Receive]:
    """A chat completion's ``user`` (its conversation), read from the body; the body is then given again to the route."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    try:
        user = first_name("", {}, json.loads(b"".join(chunks)))
    except (ValueError, AttributeError):
        user = None  # the route answers a body that does not parse

    async def again() -> Message:
        return messages.pop(0) if messages else await receive()

    return (user if isinstance(user, str) else None), again
