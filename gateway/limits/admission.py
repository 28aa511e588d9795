"""Where the limits are enforced: an ASGI middleware around every ``/v1`` request of a limited tenant.

A middleware, not a route's dependency, because it sees the whole of a request: it counts the
request before any route runs, adds the ``x-ratelimit-*`` headers to whatever answers, and frees a
turn's slot when the turn's response ends, however it ends (the last byte sent, a failure, a
client that left). Its refusals are answered through :mod:`mirror.gateway.error_table` (a
:class:`~mirror.gateway.errors.LimitReached` is a 429 with ``Retry-After``) in the route's body
shape: OpenAI's on ``/v1/chat/completions``, the native one elsewhere.

Costs: a request of a tenant with no limits (:attr:`TenantLimits.any` false) touches no shared
state — its limits are a dict lookup in the registry, re-read only when the file changes. A
limited tenant's request is one read-modify-write of its record (:mod:`.usage`) on the way in;
a turn another at its end (the slot) and one after its result (the tokens), neither delaying the
reply: the slot is freed just before the response's last body message, the tokens charged in
the background (the same gateway's next request of the tenant waits for that charge first).

Turns are ``POST /v1/conversations/{conversation}/turns`` and ``POST /v1/chat/completions``; a
turn's tokens reach :func:`metered` from :meth:`~mirror.gateway.runtime.GatewayRuntime.ask`
(plain and streamed turns both come back through it) through a context variable the middleware sets.
"""

from __future__ import annotations

import asyncio
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

from .usage import LEASE_S, Admitted, admit, charge, release, renew, usage_key

__all__ = ["CONVERSATION_HEADER", "Limiter", "LimitsMiddleware", "metered"]

log = logging.getLogger(__name__)

CONVERSATION_HEADER = "x-mirror-conversation"
"""The OpenAI route's header naming a conversation; the whole order is :mod:`mirror.gateway.openai.naming`'s."""
_NATIVE_TURN = re.compile(r"^/v1/conversations/([^/]+)/turns/?$")
_OPENAI_TURN = "/v1/chat/completions"


class Limiter:
    """One gateway app's side of the shared counts: admissions, slots and their leases, token charges."""

    def __init__(self, counters: Callable[[], Any], live_window_s: float, clock: Callable[[], float] = time.time) -> None:
        self._counters = counters
        """``await counters()``: the deployment's :class:`SharedCounters` (the runtime's connections' own)."""
        self.live_window_s = live_window_s
        self._clock = clock
        self._held: dict[str, set[str]] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._charges: dict[str, set[asyncio.Task[None]]] = {}

    async def _store(self) -> SharedCounters:
        store: SharedCounters = await self._counters()
        return store

    async def admit(self, tenant: str, limits: TenantLimits, *, turn: bool, conversation: str | None) -> tuple[str, Admitted]:
        """Count the request or raise :class:`LimitReached`; returns the slot's holder id and the admission."""
        pending = self._charges.get(tenant)
        if pending:  # this gateway's last turns' tokens count before its next request is judged
            await asyncio.gather(*pending, return_exceptions=True)
        holder = uuid.uuid4().hex[:16]
        store = await self._store()
        outcome = await store.change(usage_key(tenant), lambda data: admit(
            data, tenant=tenant, limits=limits, now=self._clock(), live_window_s=self.live_window_s, turn=turn,
            conversation=conversation, holder=holder))
        if isinstance(outcome, LimitReached):
            raise outcome
        if outcome.holds:
            self._held.setdefault(tenant, set()).add(holder)
            if self._renewer is None or self._renewer.done():
                self._renewer = asyncio.create_task(self._renew(), name="mirror-limits-renew")
        return holder, outcome

    async def release(self, tenant: str, holder: str) -> None:
        held = self._held.get(tenant)
        if held is not None:
            held.discard(holder)
            if not held:
                del self._held[tenant]
        await (await self._store()).change(usage_key(tenant), lambda data: release(data, holder=holder))

    def charge(self, tenant: str, tokens: int) -> None:
        """Add a finished turn's tokens to the tenant's day, in the background (see the module docstring)."""
        task = asyncio.create_task(self._charge(tenant, tokens), name=f"mirror-limits-charge-{tenant}")
        tasks = self._charges.setdefault(tenant, set())
        tasks.add(task)
        task.add_done_callback(lambda done: self._charged(tenant, done))

    async def _charge(self, tenant: str, tokens: int) -> None:
        await (await self._store()).change(usage_key(tenant), lambda data: charge(data, tokens=tokens, now=self._clock()))

    def _charged(self, tenant: str, task: asyncio.Task[None]) -> None:
        tasks = self._charges.get(tenant, set())
        tasks.discard(task)
        if not tasks:
            self._charges.pop(tenant, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a turn's tokens were not counted against %s's daily budget: %r", tenant, task.exception())

    async def _renew(self) -> None:
        """Renew this gateway's running turns' leases every third of a lease, while it holds any."""
        while self._held:
            await asyncio.sleep(LEASE_S / 3)
            for tenant, holders in list(self._held.items()):
                mine = frozenset(holders)

                def step(data: bytes | None, mine: frozenset[str] = mine) -> tuple[bytes | None, None]:
                    return renew(data, holders=mine, now=self._clock())
                try:
                    await (await self._store()).change(usage_key(tenant), step)
                except Exception as exc:  # the broker may be down a moment: the next round tries again
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
    meter = _METER.get()
    if meter is None or meter.charged or not isinstance(result, TurnResult):
        return
    meter.charged = True
    meter.limiter.charge(meter.tenant, result.prompt_tokens + result.completion_tokens)


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
        try:
            holder, admitted = await limiter.admit(tenant, limits, turn=turn, conversation=conversation)
        except Exception as exc:  # a refusal, or the broker down: answered by the one table
            metrics.limit_hit(tenant, exc)
            request = Request(scope)
            response = respond(request, answer(exc, request))
            return await response(scope, receive, send)
        freed = False

        async def free() -> None:
            nonlocal freed
            if admitted.holds and not freed:
                freed = True
                try:
                    await limiter.release(tenant, holder)
                except Exception as exc:  # its lease frees it in LEASE_S
                    log.warning("freeing a running turn's slot of %s failed: %r", tenant, exc)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                   *((k.encode(), v.encode()) for k, v in admitted.headers.items())]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await free()  # before the client has the whole answer, so its next turn finds the slot free
            await send(message)

        token = _METER.set(_Meter(limiter, tenant) if turn else None)
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            _METER.reset(token)
            if admitted.holds and not freed:  # failed, or the client left: freed even if this task is cancelled
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
