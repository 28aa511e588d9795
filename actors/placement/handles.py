"""One way to reach a live conversation, wherever it is placed: ``conversation_handle(key, settings)``.

``dedicated`` gives a :class:`DedicatedConversation` (the conversation's own Ray actor);
``hosted`` gives a :class:`HostedConversation`, which calls the conversation's host with the key
first. Both are :class:`~mirror.actors.handle.ConversationHandle`: callers (the gateway, tests,
benchmarks) cannot tell them apart, which is what lets one runtime test suite run on both.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mirror import tracing
from mirror.actors.conversation import RebuildReport
from mirror.actors.conversation_actor import actor_name, conversation_actor
from mirror.actors.handle import ConversationHandle
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.actors.token_stream import StreamItem
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey

from .host import conversation_host
from .routing import host_for

__all__ = [
    "DedicatedConversation", "HostedConversation", "Placement", "conversation_handle", "default_host_count",
    "placement_of",
]


@dataclass(frozen=True)
class HostedConversation:
    """A hosted conversation: its host's methods, called with the key first."""

    placement: Placement
    slot: int
    key: StreamKey

    @property
    def host(self) -> Any:
        """The host actor's handle (to kill it in a test, or ask its ``stats``)."""
        return self.placement.host(self.slot)

    async def turn(self, request: TurnRequest) -> TurnResult:
        result: TurnResult = await self.host.turn.remote(self.key, tracing.carried(request))
        return result

    async def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        refs = self.host.turn_stream.options(num_returns="streaming").remote(self.key, tracing.carried(request.streamed()))
        async for ref in refs:
            yield await ref

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        result: ConversationSummary = await self.host.choose.remote(self.key, mind)
        return result

    async def reflect(self) -> ReflectionResult:
        result: ReflectionResult = await self.host.reflect.remote(self.key)
        return result

    async def summary(self) -> ConversationSummary:
        result: ConversationSummary = await self.host.summary.remote(self.key)
        return result

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        return bool(await self.host.wait_idle.remote(self.key, timeout))

    async def state_bytes(self) -> bytes:
        return bytes(await self.host.state_bytes.remote(self.key))

    async def rebuild_report(self) -> RebuildReport | None:
        result: RebuildReport | None = await self.host.rebuild_report.remote(self.key)
        return result

    async def passivate(self) -> None:
        await self.host.passivate.remote(self.key)

    async def pid(self) -> int:
        return int(await self.host.pid.remote(self.key))

    async def node_id(self) -> str | None:
        return await self.placement.node_id(self.slot)

    def forget(self) -> None:
        """The host died for good (killed without restart): the next call gets a new one."""
        self.placement.forget(self.slot)


@dataclass(frozen=True)
class DedicatedConversation:
    """A conversation in a Ray actor of its own (``ConversationActor``)."""

    key: StreamKey
    actor: Any
    """The actor's Ray handle (to kill it in a test)."""

    async def turn(self, request: TurnRequest) -> TurnResult:
        result: TurnResult = await self.actor.turn.remote(tracing.carried(request))
        return result

    async def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        refs = self.actor.turn_stream.options(num_returns="streaming").remote(tracing.carried(request.streamed()))
        async for ref in refs:
            yield await ref

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        result: ConversationSummary = await self.actor.choose.remote(mind)
        return result

    async def reflect(self) -> ReflectionResult:
        result: ReflectionResult = await self.actor.reflect.remote()
        return result

    async def summary(self) -> ConversationSummary:
        result: ConversationSummary = await self.actor.summary.remote()
        return result

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        return bool(await self.actor.wait_idle.remote(timeout))

    async def state_bytes(self) -> bytes:
        return bytes(await self.actor.state_bytes.remote())

    async def rebuild_report(self) -> RebuildReport | None:
        result: RebuildReport | None = await self.actor.rebuild_report.remote()
        return result

    async def passivate(self) -> None:
        await self.actor.passivate.remote()

    async def pid(self) -> int:
        return int(await self.actor.pid.remote())

    async def node_id(self) -> str | None:
        return str(await self.actor.node_id.remote())

    def forget(self) -> None:
        """Nothing is cached: the next handle gets (or creates) the actor by name."""


class Placement:
    """The hosts of one settings, as handles cached per process (a host survives its restarts)."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._hosts: dict[int, Any] = {}
        self._nodes: dict[int, str] = {}
        """The node of each slot's host, asked once: a host is pinned to its node (:mod:`.host`)."""
        self._count = settings.hosts
        self._lock = threading.Lock()

    @property
    def hosts(self) -> int:
        """How many host slots: ``settings.hosts``, else one per CPU of the Ray cluster (fixed at first use)."""
        if self._count == 0:
            self._count = default_host_count()
        return self._count

    def host(self, slot: int) -> Any:
        handle = self._hosts.get(slot)
        if handle is None:
            with self._lock:
                handle = self._hosts.get(slot)
                if handle is None:
                    handle = self._hosts[slot] = conversation_host(slot, self.settings)
        return handle

    def forget(self, slot: int) -> None:
        self._hosts.pop(slot, None)
        self._nodes.pop(slot, None)

    async def node_id(self, slot: int) -> str:
        """The node host ``slot`` runs on: asked of the host once, then known until it is forgotten."""
        node = self._nodes.get(slot)
        if node is None:
            host = self.host(slot)
            node = str(await host.node_id.remote())
            if self._hosts.get(slot) is host:  # not forgotten meanwhile
                self._nodes[slot] = node
        return node

    def handle(self, key: StreamKey) -> ConversationHandle:
        if self.settings.placement == "dedicated":
            return DedicatedConversation(key, conversation_actor(key, self.settings))
        return HostedConversation(self, host_for(actor_name(key), self.hosts), key)

    def all_hosts(self) -> list[Any]:
        return [self.host(slot) for slot in range(self.hosts)]


def default_host_count() -> int:
    """One host per CPU of the Ray cluster this process is connected to (at least one)."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


@functools.lru_cache(maxsize=16)
def placement_of(settings: RuntimeSettings) -> Placement:
    """The process's :class:`Placement` for ``settings`` (one per distinct settings)."""
    return Placement(settings)


def conversation_handle(key: StreamKey, settings: RuntimeSettings) -> ConversationHandle:
    """The live conversation ``key`` as the settings place it (created or activated on first call)."""
    return placement_of(settings).handle(key)
