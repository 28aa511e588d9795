"""What a gateway process shares between its requests: one :class:`GatewayRuntime` on ``app.state``.

It holds the settings, the tenant registry, the process's connections (opened on first use
through the settings' :class:`~mirror.events.infrastructure.Infrastructure`: the bus and each
shard's log, through their ports), the cached conversation handles
(:class:`~mirror.actors.handle.ConversationHandle`), the time-travel reader of each shard, the
embedder of memory queries (made on first use) and the record of finished recompute jobs. Routes reach it through the :data:`Runtime` dependency and the tenant through
:data:`Tenant`; nothing else is shared, so two apps in one process never see each other's state.

Invariants: a handle is cached only until a call through it fails (the actor may have
passivated or died; the next call gets a fresh one), and the record of finished jobs never
holds more than ``settings.max_finished_jobs`` — running jobs are not in it at all: a running
job is its driver actor, found by name.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request

from mirror import metrics
from mirror.actors.errors import Fenced
from mirror.actors.handle import ConversationHandle
from mirror.cognition.embeddings import Embedder, OpenAIEmbedder
from mirror.events.bus import EventBus
from mirror.events.errors import BusError, BusUnavailable, LogError, LogUnavailable
from mirror.events.ids import MAIN_BRANCH, StreamKey, validate_identifier
from mirror.events.infrastructure import Connections
from mirror.events.log import LogAccess
from mirror.gateway.error_table import RETRY_AFTER_S, from_actor
from mirror.gateway.errors import (
    ConversationNotLive,
    ConversationRefencing,
    ConversationTimedOut,
    HostLost,
    UnknownConversation,
)
from mirror.gateway.limits import metered
from mirror.gateway.node_watch import NodeOf, NodeWatch
from mirror.gateway.personas import PersonaStore
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.slots import SlotView, viewed
from mirror.gateway.tenants import TenantRegistry
from mirror.replay import History, serving_history

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = [
    "ASK_ATTEMPTS", "BUS_CONNECT_TIMEOUT_S", "Conversations", "FinishedJobs", "RETRY_AFTER_S", "GatewayRuntime", "Runtime",
    "Tenant", "branch_key", "key_of", "require_tenant", "runtime_of",
]

BUS_CONNECT_TIMEOUT_S = 1.5
"""The gateway's first connection to the broker: past this a request gets a 503 (the next one tries again)."""
ASK_ATTEMPTS = 5
"""Calls of a conversation actor, in all, while it passivates or vanishes under us."""

Conversations = Callable[[StreamKey], ConversationHandle]
"""``conversations(key)``: a handle of the live conversation (:mod:`mirror.actors.placement`)."""


class FinishedJobs:
    """Final statuses of finished recompute jobs, by (tenant, job), at most ``limit`` of them.

    Each holds a whole report, and a gateway lives for weeks: the oldest finished job is
    forgotten first. Its driver is gone by then, so a forgotten job cannot be asked again.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._statuses: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._statuses)

    def get(self, tenant: str, job: str) -> dict[str, Any] | None:
        return self._statuses.get((tenant, job))

    def record(self, tenant: str, job: str, status: dict[str, Any]) -> None:
        self._statuses[(tenant, job)] = status
        self._statuses.move_to_end((tenant, job))
        while len(self._statuses) > self.limit:
            self._statuses.popitem(last=False)


def _ask_backoff(exc: BaseException, attempt: int) -> float:
    """A little longer after each passivating actor; none after a dead one (its name is free at once)."""
    return 0.0 if _died(exc) else 0.05 * attempt


def _died(exc: BaseException) -> bool:
    from ray.exceptions import (  # ray costs ~0.5 s to import: see routes/recompute.py
        ActorDiedError,
        ActorUnschedulableError,
    )

    # Unschedulable: a host pinned to a node that is gone (see actors/placement/host.py).
    return isinstance(exc, ActorDiedError | ActorUnschedulableError)


def _cut_off(exc: BaseException) -> bool:
    """Ray's word that a call's actor went away: died, unavailable, or (a host pinned to a node
    that died) unschedulable — what Ray fails a call in flight with when its node is declared
    dead, as it does a call sent to an actor already gone. On a node that is dead, the runtime
    cannot tell the two apart, and takes it that the call may have run."""
    from ray.exceptions import (  # imports ray: see routes/recompute.py
        ActorDiedError,
        ActorUnavailableError,
        ActorUnschedulableError,
    )

    return isinstance(exc, ActorDiedError | ActorUnavailableError | ActorUnschedulableError)


def _passivated(exc: BaseException) -> bool:
    from mirror.actors.conversation_actor import is_passivated  # imports ray: see routes/recompute.py

    return is_passivated(exc)


def _fenced(exc: BaseException) -> bool:
    """The conversation lost its fence: another writer moved on, or the stream went backwards
    under it. Either way the incarnation that met it is dropped, and the next one rebuilds from
    the log and re-fences; nothing of the refused call was appended, so asking again is safe."""
    return isinstance(exc, Fenced)


def _never_sent(exc: BaseException) -> bool:
    """A call refused before it was sent, its machine known dead: sending it elsewhere is safe."""
    return isinstance(exc, HostLost) and not exc.started


def _ask_again(exc: BaseException) -> bool:
    return _passivated(exc) or _fenced(exc) or _never_sent(exc)


def _retried(exc: BaseException) -> None:
    """Count a conversation asked again, by why (``mirror_conversation_retries_total``)."""
    metrics.conversation_retried("fenced" if isinstance(exc, Fenced) else "died" if _died(exc) else "passivated")


@dataclass
class GatewayRuntime:
    """The state every route of one gateway app shares (see the module docstring)."""

    settings: GatewaySettings
    registry: TenantRegistry
    conversations: Conversations
    """``conversations(key) -> handle``: the conversation's host or actor (:mod:`mirror.actors.placement`)."""
    finished_jobs: FinishedJobs
    _connections: Connections | None = None
    _histories: dict[str, History] = field(default_factory=dict)
    """The time-travel reader of each shard's log."""
    _embedder: Embedder | None = None
    _handles: dict[StreamKey, ConversationHandle] = field(default_factory=dict)
    _nodes: dict[StreamKey, NodeOf] = field(default_factory=dict)
    """The node of each cached handle's process (asked once per handle, in the background)."""
    node_watch: NodeWatch = field(default_factory=NodeWatch)
    """Ends the calls in flight to a machine Ray declared dead (:mod:`mirror.gateway.node_watch`)."""
    personas: PersonaStore = field(default_factory=PersonaStore)
    """The tenants' persona stores (:mod:`mirror.gateway.personas`)."""
    bus_ready: Callable[[], Awaitable[object]] | None = None
    """Awaited before every conversation call; raises while the broker is down. Default: the
    connections' :meth:`~mirror.events.infrastructure.Connections.ready` (tests may pass their own)."""

    @classmethod
    def build(cls, settings: GatewaySettings, conversations: Conversations | None = None, *,
              bus_ready: Callable[[], Awaitable[object]] | None = None) -> GatewayRuntime:
        """The runtime of a new app; ``conversations`` defaults to the Ray placement of the settings."""
        if conversations is None:
            from mirror.actors.placement import placement_of  # imports ray: see routes/recompute.py

            runtime = settings.runtime  # the hosts' slots, seen from here: most overload refused without a Ray hop
            conversations = viewed(placement_of(runtime).handle, SlotView(runtime.llm.max_concurrency, runtime.fair_share))

        return cls(settings, TenantRegistry(settings.tenants_file), conversations,
                   FinishedJobs(settings.max_finished_jobs), bus_ready=bus_ready)

    async def connections(self) -> Connections:
        """The gateway's connections; :class:`BusUnavailable` (a 503) at once while the broker is down.

        Every route but ``/healthz`` comes through here first (turns in :meth:`ask`, reads in
        :meth:`log`), so a broker that is gone costs a request at most the grace (the
        infrastructure's), not the publish and retry deadlines of the hosts behind it; the
        connection keeps reconnecting in the background meanwhile."""
        infrastructure = self.settings.runtime.infrastructure
        if self._connections is None:
            try:
                self._connections = await infrastructure.connect(name="mirror-gateway",
                                                                 first_connect_timeout_s=BUS_CONNECT_TIMEOUT_S)
            except BusError as exc:
                raise BusUnavailable(infrastructure.location, BUS_CONNECT_TIMEOUT_S) from exc
        await self._connections.ready()
        return self._connections

    async def bus(self) -> EventBus:
        """The bus (:meth:`connections`' checks first)."""
        return (await self.connections()).bus

    async def log(self, tenant: str) -> LogAccess:
        """The log of the shard that holds ``tenant``."""
        return (await self.connections()).log(tenant)

    async def history(self, tenant: str) -> History:
        """The time-travel reader of ``tenant``'s shard."""
        shard = self.settings.runtime.shard_of(tenant)
        if shard not in self._histories:
            self._histories[shard] = serving_history(await self.log(tenant), await self.bus(),
                                                     snapshot_every=self.settings.runtime.snapshot_every)
        return self._histories[shard]

    def embedder(self) -> Embedder:
        """The embedder of memory queries (``settings.embedder_settings()``), one per app."""
        if self._embedder is None:
            self._embedder = OpenAIEmbedder(self.settings.embedder_settings())
        return self._embedder

    async def settled(self, key: StreamKey) -> int:
        """The last seq of ``key`` the bus has acknowledged, once the log has committed it.

        The read-your-writes barrier: every read of a conversation passes it before it reads the
        log, so a seq a writer was answered with (a turn's) is in whatever the read returns. One
        bus head lookup, asked at once with the log's last seq; only when the log is behind (the
        ingester commits ~50 ms after an append at a trickle) a wait for the ingester's
        committed position to pass the head's, up to ``settings.read_settle_timeout_s``. Past
        that the read is a 503 with ``Retry-After``, never an answer missing an acknowledged seq.
        """
        event_log, bus = await self.log(key.tenant), await self.bus()
        committed, head = await asyncio.gather(event_log.last_seq(key), bus.head(key))
        if head.last_seq is None or head.last_seq <= committed:
            return committed
        timeout_s = self.settings.read_settle_timeout_s
        try:
            caught_up = await event_log.wait_committed(head.fence, timeout_s)
        except LogUnavailable:
            raise
        except LogError:  # a log whose owner ingests nothing (a file served read-only): it holds all it will
            return committed
        if not caught_up:
            log.warning("%s: the bus acknowledged seq %d but the log had not committed it after %g s; "
                        "answering 503", key, head.last_seq, timeout_s)
            raise HTTPException(503, f"the log of {key} is behind the stream: seq {head.last_seq} is acknowledged "
                                     f"but not committed after {timeout_s:g} s (is the ingester overloaded?); "
                                     "ask again", headers={"Retry-After": str(RETRY_AFTER_S)})
        return head.last_seq

    async def settled_tenant(self, tenant: str) -> None:
        """The barrier of a read across a tenant's conversations (its list): the log first commits
        everything the stream held when asked, within the same bound and with the same 503 past it."""
        event_log = await self.log(tenant)
        try:
            caught_up = await event_log.wait_caught_up(self.settings.read_settle_timeout_s)
        except LogUnavailable:
            raise
        except LogError:  # a log whose owner ingests nothing: it holds all it will
            return
        if not caught_up:
            log.warning("the log of tenant %s is behind the stream after %g s; answering 503", tenant,
                        self.settings.read_settle_timeout_s)
            raise HTTPException(503, f"the log is behind the stream after {self.settings.read_settle_timeout_s:g} s "
                                     "(is the ingester overloaded?); ask again",
                                headers={"Retry-After": str(RETRY_AFTER_S)})

    async def existing(self, key: StreamKey) -> int:
        """The last seq of ``key`` (a branch's, for a branch), :meth:`settled`; :class:`UnknownConversation`
        (a 404) when the conversation has no events (in the log or, not yet logged, the stream). A
        branch of an existing conversation that has none is 0: the route says what that means."""
        last_seq = await self.settled(key)
        if last_seq == 0 and (key.branch == MAIN_BRANCH or await self.settled(StreamKey(key.tenant, key.conversation)) == 0):
            raise UnknownConversation(key.conversation)
        return last_seq

    async def ask(self, key: StreamKey, call: Callable[[ConversationHandle], Awaitable[T]], *,
                  resend_safe: bool | Callable[[], bool] = False) -> T:
        """``call(handle)`` of the conversation; a passivating or vanished one is re-activated and asked again.

        At most :data:`ASK_ATTEMPTS` calls; then the last error is raised as it was, but a
        conversation still passivating or whose process is unavailable is :class:`ConversationNotLive`.
        A fenced conversation (another writer moved on, or the stream went backwards under it) is
        asked again too — its next incarnation rebuilds from the log and re-fences — and is
        :class:`ConversationRefencing` if it is still fenced after the last attempt. An error of the
        conversation's process that the error table answers ``from_actor`` (a setting conflict, the
        broker, a log or the model failing, a refused or failed reflection) is raised here as itself
        at once; no answer within the settings' ``actor_timeout_s`` is :class:`ConversationTimedOut`.

        A call whose machine Ray declares dead meanwhile (:mod:`mirror.gateway.node_watch`) is
        :class:`HostLost` within a poll of that: sent once more, to a host made anew elsewhere, when
        ``resend_safe`` (a read; a turn with an idempotency key, which the conversation answers
        from its log if it was appended; a callable is asked at that moment), raised otherwise.
        A call that was never sent, its machine known dead already, is always sent elsewhere.
        What each is answered with is :mod:`mirror.gateway.error_table`'s to say.
        """
        try:
            return await self._ask(key, call)
        except HostLost as lost:
            if not (resend_safe() if callable(resend_safe) else resend_safe):
                raise
            log.warning("%s: its machine was lost during the call (%s); sending it once more, elsewhere", key, lost)
            return await self._ask(key, call)

    async def _ask(self, key: StreamKey, call: Callable[[ConversationHandle], Awaitable[T]]) -> T:
        # A plain loop, not a retry library's: the first attempt is every turn's path, and it costs
        # no more than the call itself (issue 38).
        attempt = 1
        while True:
            try:
                result = await self._ask_once(key, call)
            except Exception as exc:
                if attempt < ASK_ATTEMPTS and _ask_again(exc):
                    _retried(exc)
                    await asyncio.sleep(_ask_backoff(exc, attempt))
                    attempt += 1
                    continue
                if isinstance(exc, Fenced):
                    raise ConversationRefencing(key, exc) from None
                if not _passivated(exc):
                    raise
                # Still passivating, or its process unavailable (a machine cut off or gone, and Ray
                # not yet done restarting its actors elsewhere): a dependency that is down, not a bug.
                raise ConversationNotLive(key, type(exc).__name__) from None
            metered(result)  # a limited tenant's turn: its tokens count against its day
            return result

    def cached_conversations(self, tenant: str) -> list[StreamKey]:
        """The keys of ``tenant`` whose handles this gateway holds (a forgotten tenant's to let go)."""
        return [key for key in self._handles if key.tenant == tenant]

    async def _ask_once(self, key: StreamKey, call: Callable[[ConversationHandle], Awaitable[T]]) -> T:
        await (self.bus_ready or self.connections)()  # a broker that is down: 503 now, not once the append gives up
        handle = self._handles.get(key)
        if handle is None:  # get-or-create is a round trip to Ray's control store: once per actor
            handle = self._handles[key] = self.conversations(key)
            self._nodes[key] = NodeOf(handle.node_id())  # in the background: the call does not wait for it
        node = self._nodes[key]
        try:
            async with self.node_watch.watching(node), asyncio.timeout(self.settings.actor_timeout_s):
                return await call(handle)  # a timeout, not wait_for: no task of its own per call
        except Exception as exc:
            self._handles.pop(key, None)
            self._nodes.pop(key, None)
            if isinstance(exc, HostLost) or (_cut_off(exc) and await self.node_watch.is_dead(node)):
                handle.forget()  # its host was pinned to the dead node: the next call makes it on a live one
                if isinstance(exc, HostLost):
                    raise
                raise HostLost(node.id or "?", started=True) from None  # Ray's own word on the dead node came first
            if _died(exc):
                handle.forget()  # a host killed for good: the next call makes a new one
                log.warning("the process running %s is gone (%s); its next call makes it again",
                            key, type(exc).__name__)
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, Fenced):
                log.warning("%s lost its fence (%s); asking a new incarnation", key, cause)
                raise cause from None
            if from_actor(cause):  # from inside the actor: answered as if here
                raise cause from None
            if isinstance(exc, TimeoutError):
                raise ConversationTimedOut(key, self.settings.actor_timeout_s) from None
            raise


async def runtime_of(request: Request) -> GatewayRuntime:
    """The app's :class:`GatewayRuntime` (async: see :func:`require_tenant`)."""
    return request.app.state.runtime


Runtime = Annotated[GatewayRuntime, Depends(runtime_of)]


async def require_tenant(request: Request, runtime: Runtime) -> str:
    """The tenant of the request's bearer token; 401 without a valid one.

    Async on purpose: FastAPI runs a plain ``def`` dependency on a worker thread, a hop that
    cost more per request than the check itself.
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    registry = runtime.registry
    owner = registry.tenant_of(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if owner is None:
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
    return owner


Tenant = Annotated[str, Depends(require_tenant)]


def key_of(tenant_id: str, conversation: str) -> StreamKey:
    """The tenant's conversation (main branch); :class:`~mirror.events.errors.InvalidIdentifier` (a 400,
    :mod:`mirror.gateway.error_table`) for an identifier that is not one.

    With :func:`branch_key`, the one way a route turns its ``conversation`` and ``branch`` parameters
    into a key: every route calls them before it looks anything up or reads its body's other fields, so
    a bad id is the same 400 everywhere, ``{"detail": "invalid conversation …"}`` (the words of
    :class:`~mirror.events.errors.InvalidIdentifier`, which the CLI prints too)."""
    return StreamKey(tenant_id, validate_identifier("conversation", conversation))


def branch_key(key: StreamKey, branch: str) -> StreamKey:
    """``key`` on ``branch``; a 400 for a branch name that is not an identifier (see :func:`key_of`)."""
    return StreamKey(key.tenant, key.conversation, validate_identifier("branch", branch))
