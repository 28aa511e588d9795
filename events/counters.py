"""The shared-counters port: small records that every process of a deployment reads and changes atomically.

The gateway's per-tenant limits (:mod:`mirror.gateway.limits`) keep their use here — requests
this minute, tokens today, turns running, live conversations — so a limit holds across every
gateway of a deployment, not per process. A record is a few hundred bytes under a key; what it
means is its caller's business, this port only promises:

- :meth:`SharedCounters.change` is an atomic read-modify-write: ``step(current)`` returns the
  new value (``None``: leave it as it is) and an outcome, and no other change of the same key
  lands between the read ``step`` saw and the write. ``step`` may be called more than once (a
  concurrent writer won the race, so it runs again on the newer value): it must be pure;
- a write is durable on the broker (it survives the processes that made it).

Adapters: :class:`InMemoryCounters` (this process's dict: tests, the in-memory infrastructure) and
:class:`~mirror.events.nats.counters.JetStreamCounters` (a JetStream key-value bucket, on file
storage, changed by compare-and-set on the key's revision).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

__all__ = ["InMemoryCounters", "SharedCounters", "Step"]

T = TypeVar("T")

Step = Callable[[bytes | None], tuple[bytes | None, T]]
"""``step(current) -> (new or None, outcome)``: pure, since it may run again on a newer value."""


@runtime_checkable
class SharedCounters(Protocol):
    """Atomically changed records under keys ``[-_=.a-zA-Z0-9]+`` (see the module docstring)."""

    async def read(self, key: str) -> bytes | None:
        """The key's current value (None: never written)."""
        ...

    async def change(self, key: str, step: Step[T]) -> T:
        """Apply ``step`` to the key's current value atomically; returns ``step``'s outcome."""
        ...

    async def keys(self) -> list[str]:
        """Every key written, sorted."""
        ...

    async def erase(self, key: str) -> None:
        """Remove the key and every byte of its values (a forgotten tenant's record)."""
        ...


class InMemoryCounters:
    """The port on this process's dict: every change is atomic, since ``step`` never awaits."""

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}

    async def read(self, key: str) -> bytes | None:
        return self._values.get(key)

    async def change(self, key: str, step: Step[T]) -> T:
        new, outcome = step(self._values.get(key))
        if new is not None:
            self._values[key] = new
        return outcome

    async def keys(self) -> list[str]:
        return sorted(self._values)

    async def erase(self, key: str) -> None:
        self._values.pop(key, None)
