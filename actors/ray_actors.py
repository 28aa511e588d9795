"""Conversations as Ray actors: one named actor per live conversation, get-or-create.

The actor is a thin async shell around :class:`~mirror.actors.conversation.Conversation`: it
rebuilds on (re)start, so Ray's ``max_restarts`` after a crash gives a conversation that
continues where the last one stopped. Names are ``<tenant>/<conversation>/<branch>`` in the
``mirror`` namespace — identifiers are validated, so they cannot collide or inject.
"""

from __future__ import annotations

from typing import Any

import ray

from mirror.events.ids import StreamKey

from .conversation import Conversation, RuntimeSettings

NAMESPACE = "mirror"


@ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=64)
class ConversationActor:
    def __init__(self, tenant: str, conversation: str, branch: str, settings: RuntimeSettings) -> None:
        self.key = StreamKey(tenant, conversation, branch)
        self.settings = settings
        self.conversation: Conversation | None = None

    async def _ready(self) -> Conversation:
        if self.conversation is None:
            self.conversation = await Conversation(self.key, self.settings).start()
        return self.conversation

    async def turn(self, message: str, sync: bool = False) -> dict[str, Any]:
        return await (await self._ready()).turn(message, sync=sync)

    async def summary(self) -> dict[str, Any]:
        return (await self._ready()).summary()

    async def wait_idle(self, timeout: float | None = None) -> bool:
        return await (await self._ready()).wait_idle(timeout)

    async def state_bytes(self) -> bytes:
        from mirror.projections.snapshot import snapshot_bytes

        return snapshot_bytes((await self._ready()).state)

    async def pid(self) -> int:
        import os

        return os.getpid()

    async def stop(self) -> None:
        if self.conversation is not None:
            await self.conversation.stop()
            self.conversation = None


def actor_name(key: StreamKey) -> str:
    return f"{key.tenant}/{key.conversation}/{key.branch}"


def conversation_actor(key: StreamKey, settings: RuntimeSettings) -> Any:
    """The live actor of ``key``, created if there is none (``get_if_exists``)."""
    return ConversationActor.options(  # type: ignore[attr-defined]
        name=actor_name(key), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
    ).remote(key.tenant, key.conversation, key.branch, settings)


def call(method: Any, *args: Any, retry_for_s: float = 30.0, **kwargs: Any) -> Any:
    """``ray.get(method.remote(...))``, retried while the actor is restarting after a crash.

    Only calls that are safe to repeat should go through here: a turn is, because its append
    is fenced and a retried turn after a crash is a new turn the caller asked for again.
    """
    import time

    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            return ray.get(method.remote(*args, **kwargs))
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
