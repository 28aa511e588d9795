"""In-memory adapter of the infrastructure port: a bus and a log in one process, nothing started.

Every :meth:`InMemoryInfrastructure.connect` of one instance shares its :class:`InMemoryBus`,
:class:`InMemoryEventLog` and :class:`InMemoryCounters`; each event the bus stores is ingested into the log at once, at
its bus position, so the log is always caught up and a rebuild finds nothing left on the bus.
For tests and for trying Mirror's runtime without a broker: it cannot cross a process boundary
(a Ray actor in another process would get a copy of its own), so it serves a conversation run
in-process, not the Ray placements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .bus import InMemoryBus
from .counters import InMemoryCounters, SharedCounters
from .infrastructure import Connections
from .log import LogAccess
from .memory_log import InMemoryEventLog


@dataclass(frozen=True, eq=False)
class InMemoryConnections:
    """The shared bus and log, as one process's connections (closing them keeps the data)."""

    bus: InMemoryBus
    event_log: InMemoryEventLog
    shared_counters: InMemoryCounters

    def log(self, tenant: str) -> LogAccess:
        return self.event_log

    def shard_logs(self) -> dict[str, LogAccess]:
        return {"memory": self.event_log}

    def counters(self) -> SharedCounters:
        return self.shared_counters

    async def ready(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass(frozen=True, eq=False)
class InMemoryInfrastructure:
    """One bus and one log in memory, wired together (see the module docstring)."""

    bus: InMemoryBus = field(default_factory=InMemoryBus)
    event_log: InMemoryEventLog = field(init=False)
    counters: InMemoryCounters = field(default_factory=InMemoryCounters)

    def __post_init__(self) -> None:
        event_log = InMemoryEventLog(stream_end=lambda: self.bus.position)
        object.__setattr__(self, "event_log", event_log)
        self.bus.on_stored.append(event_log.ingest)

    @property
    def location(self) -> str:
        return "memory"

    def shard_of(self, tenant: str) -> str:
        return "memory"

    async def connect(self, *, name: str, first_connect_timeout_s: float = 10.0) -> Connections:
        return InMemoryConnections(self.bus, self.event_log, self.counters)


__all__ = ["InMemoryConnections", "InMemoryInfrastructure"]
