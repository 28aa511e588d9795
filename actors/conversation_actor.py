"""Conversations as Ray actors: one named actor per live conversation, get-or-create.

The actor is a thin async shell around :class:`~mirror.actors.conversation.Conversation`: it
rebuilds on (re)start, so Ray's ``max_restarts`` after a crash gives a conversation that
continues where the last one stopped. Names are ``<tenant>/<conversation>/<branch>`` in the
``mirror`` namespace — identifiers are validated, so they cannot collide or inject.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import ray

from mirror import tracing
from mirror.actors.conversation import Conversation, RebuildReport
from mirror.actors.directory import NAMESPACE, TOUCH_EVERY_S, directory
from mirror.actors.errors import Passivated
from mirror.actors.log_file import append_warnings_to
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.actors.token_stream import StreamItem, streamed_turn
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.projections.snapshot import snapshot_bytes


@ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=64)  # type: ignore[call-overload]  # Ray's typed overloads omit actor options such as max_concurrency
class ConversationActor:
    """A virtual actor: activated by its first message, passivated when idle or crowded out."""

    def __init__(self, tenant: str, conversation: str, branch: str, settings: RuntimeSettings) -> None:
        # Everything imported so far (Ray, Mirror, their libraries) lives as long as the process:
        # out of the collector's sight, so Ray's periodic collections and the one at exit do not
        # walk a million objects each (that was ~0.4 s of CPU per passivation).
        gc.freeze()
        append_warnings_to(settings.warnings_log)
        tracing.configure(settings.traces, "conversation")
        self.key = StreamKey(tenant, conversation, branch)
        self.name = actor_name(self.key)
        self.settings = settings
        self.conversation: Conversation | None = None
        self.directory = directory(settings.max_live_actors)
        self.last_active = 0.0
        self._touched = 0.0
        self._watchdog: Any = None

    async def _ready(self) -> Conversation:
        self.last_active = time.monotonic()
        if self.conversation is not None and self.conversation.fenced is not None:
            # It lost the fence (another writer, or a stream gone backwards): this incarnation
            # stops, and the one made below rebuilds from the log and re-fences.
            await self.conversation.stop()
            self.conversation = None
            if self._watchdog is not None:
                self._watchdog.cancel()
        if self.conversation is None:
            self.conversation = await Conversation(self.key, self.settings).start()
            await self.directory.register.remote(self.name, ray.get_runtime_context().get_node_id())
            self._touched = self.last_active
            self._watchdog = asyncio.create_task(self._passivate_when_idle())
        elif self.last_active - self._touched >= TOUCH_EVERY_S:
            # Fire and forget, at most once a second: recency at that grain is enough for LRU,
            # and a directory call per turn cost the directory and Ray more than the turn did.
            self._touched = self.last_active
            self.directory.touch.remote(self.name)
        return self.conversation

    async def _passivate_when_idle(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.settings.passivate_after_s / 2))
            idle = time.monotonic() - self.last_active
            if idle >= self.settings.passivate_after_s and self.conversation is not None \
                    and await self.conversation.wait_idle(0):
                await self.passivate()
                return

    async def turn(self, request: TurnRequest) -> TurnResult:
        return await (await self._ready()).turn(request)

    async def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        """A Ray streaming generator (``num_returns="streaming"``): the reply's pieces, then the TurnResult."""
        conversation = await self._ready()
        async for item in streamed_turn(lambda sink: conversation.turn(request.streamed(), sink)):
            yield item

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        return await (await self._ready()).choose(mind)

    async def reflect(self) -> ReflectionResult:
        return await (await self._ready()).reflect()

    async def summary(self) -> ConversationSummary:
        return (await self._ready()).summary()

    async def wait_idle(self, timeout: float | None = None) -> bool:
        return await (await self._ready()).wait_idle(timeout)

    async def state_bytes(self) -> bytes:
        return snapshot_bytes((await self._ready()).state)

    async def rebuild_report(self) -> RebuildReport | None:
        """How this incarnation rebuilt its state."""
        return (await self._ready()).rebuilt

    async def pid(self) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        """The node this incarnation runs on (a restart may move it: the gateway asks each new handle)."""
        return str(ray.get_runtime_context().get_node_id())

    async def passivate(self) -> None:
        """Finish thinking, snapshot, leave: the name is free and the next message re-activates."""
        if self.conversation is not None:
            await self.conversation.passivate()
            self.conversation = None
        await self.directory.unregister.remote(self.name)
        ray.actor.exit_actor()

    async def stop(self) -> None:
        if self.conversation is not None:
            await self.conversation.stop()
            self.conversation = None


def actor_name(key: StreamKey) -> str:
    return f"{key.tenant}/{key.conversation}/{key.branch}"


def conversation_actor(key: StreamKey, settings: RuntimeSettings) -> Any:
    """The live actor of ``key``, created if there is none (``get_if_exists``)."""
    return ConversationActor.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
        name=actor_name(key), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
    ).remote(key.tenant, key.conversation, key.branch, settings)


RETRYABLE = (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError)
"""Unschedulable: a conversation host pinned to a node that is gone (``actors/placement/host.py``);
asked again, it is made anew on a live node."""


def is_passivated(exc: BaseException) -> bool:
    """A call that met an actor passivating or just gone: ask a fresh handle again."""
    return isinstance(exc, RETRYABLE) or isinstance(getattr(exc, "cause", None), Passivated)


__all__ = ["ConversationActor", "RETRYABLE", "actor_name", "conversation_actor", "is_passivated"]
