"""The infrastructure port: how a process opens its bus and its logs, chosen in one place.

The embedded stack (or a test) picks one :class:`Infrastructure` — a small frozen recipe, so it
crosses into Ray inside the runtime settings — and every process that runs conversations, serves
the gateway or drives a recompute asks it for :class:`Connections`: the bus, and the log of the
shard that holds a tenant, both through their ports (:class:`~mirror.events.bus.EventBus`,
:class:`~mirror.events.log.LogAccess`). Nothing above this layer reaches past a port to the
connection behind it, so a whole conversation runs on the in-memory adapters as it does on
NATS and DuckDB.

Adapters: :class:`~mirror.events.nats.infrastructure.NatsInfrastructure` (JetStream, and each
shard's log served by its ingester over NATS) and
:class:`~mirror.events.memory_infrastructure.InMemoryInfrastructure` (one process's memory).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .bus import EventBus
from .counters import SharedCounters
from .log import LogAccess


@runtime_checkable
class Connections(Protocol):
    """What one process opened: its bus and, per tenant, the log that holds the tenant."""

    @property
    def bus(self) -> EventBus: ...

    def log(self, tenant: str) -> LogAccess:
        """The log of the shard that holds ``tenant`` (a light handle; cached per shard)."""
        ...

    def shard_logs(self) -> dict[str, LogAccess]:
        """Every shard's log, by shard (what acts on a whole tenant asks each: a tenant's events
        may be on a shard the map no longer names it on)."""
        ...

    def counters(self) -> SharedCounters:
        """The deployment's shared counters (the gateway's per-tenant limits), on the bus's broker."""
        ...

    async def ready(self) -> None:
        """Return while the bus is reachable; raise :class:`~mirror.events.errors.BusUnavailable`
        at once (within a short grace) while it is not, so a caller can answer 503 quickly."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Infrastructure(Protocol):
    """A recipe for :class:`Connections`: frozen, comparable, and cheap to send to another process."""

    @property
    def location(self) -> str:
        """Where the bus is, for messages (a NATS URL list, ``memory``)."""
        ...

    def shard_of(self, tenant: str) -> str:
        """The shard whose log holds ``tenant``'s events."""
        ...

    async def connect(self, *, name: str, first_connect_timeout_s: float = 10.0) -> Connections:
        """Open this process's connections; :class:`~mirror.events.errors.BusError` if the bus
        cannot be reached within ``first_connect_timeout_s``."""
        ...


__all__ = ["Connections", "Infrastructure"]
