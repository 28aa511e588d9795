"""One way to reach a live conversation, wherever it is placed: ``conversation_ref(key, settings)``.

``dedicated`` gives the conversation's own actor handle (``ConversationActor``); ``hosted``
gives a :class:`HostedRef` with the same interface (``ref.turn.remote(message, sync)``),
which calls the conversation's host with the key first. Callers (the gateway, tests,
benchmarks) cannot tell the two apart, which is what lets one runtime test suite run on both.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

from mirror.actors.conversation import RuntimeSettings
from mirror.actors.conversation_actor import actor_name, conversation_actor
from mirror.events.ids import StreamKey

from .host import conversation_host
from .routing import host_for

__all__ = ["HostedRef", "Placement", "conversation_ref", "default_host_count", "placement_of"]


@dataclass(frozen=True)
class _HostedMethod:
    placement: Placement
    slot: int
    key: StreamKey
    method: str

    def remote(self, *args: Any) -> Any:
        return getattr(self.placement.host(self.slot), self.method).remote(self.key, *args)


@dataclass(frozen=True)
class HostedRef:
    """A hosted conversation, shaped like its dedicated actor's handle."""

    placement: Placement
    slot: int
    key: StreamKey

    def __getattr__(self, method: str) -> _HostedMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _HostedMethod(self.placement, self.slot, self.key, method)

    @property
    def host(self) -> Any:
        """The host actor's handle (to kill it in a test, or ask its ``stats``)."""
        return self.placement.host(self.slot)

    def forget(self) -> None:
        """The host died for good (killed without restart): the next call gets a new one."""
        self.placement.forget(self.slot)


class Placement:
    """The hosts of one settings, as handles cached per process (a host survives its restarts)."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._hosts: dict[int, Any] = {}
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

    def ref(self, key: StreamKey) -> Any:
        if self.settings.placement == "dedicated":
            return conversation_actor(key, self.settings)
        return HostedRef(self, host_for(actor_name(key), self.hosts), key)

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


def conversation_ref(key: StreamKey, settings: RuntimeSettings) -> Any:
    """The live conversation ``key`` as the settings place it (created or activated on first call)."""
    return placement_of(settings).ref(key)
