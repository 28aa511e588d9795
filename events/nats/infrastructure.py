"""NATS adapter of the infrastructure port: the JetStream bus, and each shard's log asked over NATS.

:class:`NatsInfrastructure` is what the stack hands down (inside the runtime settings, across
Ray): the NATS URL (one server or a cluster's list), the stream's settings, the shard map, and
how long a log read may take. :meth:`NatsInfrastructure.connect` opens one NATS connection per
process for the bus; the log of a tenant's shard is a :class:`~mirror.events.nats.log_service.LogClient`
over that same connection, asking the shard's ingester (the one process that owns its DuckDB file);
the shared counters are a key-value bucket on the same broker (:mod:`.counters`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirror.events.counters import SharedCounters
from mirror.events.errors import BusUnavailable
from mirror.events.log import LogAccess
from mirror.events.shards import DEFAULT_SHARD, Assignments, ShardMap

from .counters import JetStreamCounters
from .jetstream import JetStreamBus, StreamSettings
from .log_service import LogClient


@dataclass(eq=False)
class NatsConnections:
    """One process's NATS connection: the bus on it, and a log client per shard (made on first use)."""

    bus: JetStreamBus
    infrastructure: NatsInfrastructure
    _logs: dict[str, LogClient] = field(default_factory=dict)
    _counters: JetStreamCounters | None = None

    def log(self, tenant: str) -> LogAccess:
        return self._shard_log(self.infrastructure.shard_of(tenant))

    def shard_logs(self) -> dict[str, LogAccess]:
        return {shard: self._shard_log(shard) for shard in self.infrastructure.shards.shards}

    def _shard_log(self, shard: str) -> LogClient:
        client = self._logs.get(shard)
        if client is None:
            client = self._logs[shard] = LogClient(self.bus.nc, shard=shard, timeout=self.infrastructure.log_timeout_s)
        return client

    def counters(self) -> SharedCounters:
        if self._counters is None:
            self._counters = JetStreamCounters(self.bus.js, servers=len(self.bus.nc.server_urls))
        return self._counters

    async def ready(self) -> None:
        grace = self.infrastructure.stream.disconnect_grace_s
        if not await self.bus.nc.wait_connected(grace):
            raise BusUnavailable(self.bus.nc.server_list, grace)

    async def close(self) -> None:
        await self.bus.close()


@dataclass(frozen=True)
class NatsInfrastructure:
    """NATS at ``url`` (see the module docstring); ``shard`` is the default shard of ``shard_map``."""

    url: str
    stream: StreamSettings = field(default_factory=StreamSettings)
    shard: str = DEFAULT_SHARD
    shard_map: Assignments = ()
    log_timeout_s: float = 2.0
    """How long a read from the log's owner (the ingester) may take before it is
    :class:`~mirror.events.errors.LogUnavailable` (a 503 at the gateway): it answers in
    milliseconds; past this it is restarting or gone, and a prompt 503 beats a hanging request."""

    def __post_init__(self) -> None:
        self.shards  # noqa: B018  # a bad map fails here, at the edge, not at the first read

    @property
    def location(self) -> str:
        return self.url

    @property
    def shards(self) -> ShardMap:
        return ShardMap(self.shard_map, default=self.shard)

    def shard_of(self, tenant: str) -> str:
        return self.shards.shard_of(tenant)

    async def connect(self, *, name: str, first_connect_timeout_s: float = 10.0) -> NatsConnections:
        bus = await JetStreamBus.connect(self.url, self.stream, first_connect_timeout_s=first_connect_timeout_s,
                                         name=name)
        return NatsConnections(bus, self)


__all__ = ["NatsConnections", "NatsInfrastructure"]
