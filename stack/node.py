"""``mirror node``: another machine of a deployment, joined to the Ray cluster of the head's ``mirror up``.

It runs, on this machine: a gateway (listening on ``bind:gateway_port``, a Ray driver of the
cluster, so its conversations are the cluster's hosts, wherever they run) and the ingesters of
the shards whose DuckDB files are on this machine's disk (``ingest``, files in ``data_dir``). It
needs nothing of the head's disk: its settings come from the head through Ray
(:mod:`.published`: the runtime settings must be the head's to the byte), its tenants from the
tenants file copied to it (token hashes only, config like Ray's token), and it writes nothing
but its own data directory. The supervisor brings back what dies (:mod:`.machine`); Ctrl-C (or
SIGTERM) stops the gateways, drains the ingesters and leaves the cluster.

What it cannot bring back is its Ray node: once the head has declared it dead (the machine cut
off the network too long, or its raylet gone) the actors here died with it and Ray never takes
the node back. :mod:`.ray_node` notices within about a second; the node then stops (without
asking the dead actors to stop) and ``lost`` says why, for ``mirror node`` to exit with an error
(a service manager then runs ``ray start`` and ``mirror node`` again).

``DIR/node.json`` records it (pid, gateway URL, Ray address, node id, shards), as ``stack.json``
records ``mirror up``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.events.nats.cluster import wait_jetstream
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.shards import Assignments, ShardMap
from mirror.gateway.settings import GatewaySettings
from mirror.serving import claim_port
from mirror.stack.addresses import LOOPBACK, advertised_host, check_reachable, nats_urls
from mirror.stack.embedded import WARNINGS_LOG
from mirror.stack.errors import InvalidSettings, StackError
from mirror.stack.log_relay import LogRelay
from mirror.stack.machine import (
    gateway_watch,
    ingester_watch,
    join_ray,
    live_record,
    serve_gateways,
    start_ingester,
    write_record,
)
from mirror.stack.ray_node import RayNodeWatch
from mirror.stack.supervisor import Supervisor, Watched

log = logging.getLogger(__name__)

__all__ = ["MirrorNode", "NodeSettings", "node_file", "running_node"]


@dataclass(frozen=True)
class NodeSettings:
    ray_address: str
    """``HOST:PORT`` of the head's Ray (``ray start --head --port``); this machine runs a raylet of it."""
    data_dir: Path = Path("data")
    bind: str = LOOPBACK
    """Where the gateway listens."""
    advertise: str | None = None
    """The address in the gateway URL it records and prints; None: ``bind``."""
    gateway_port: int = 8080
    tenants_file: Path | None = None
    """The tenants file copied from the head (token hashes); None: ``data_dir/tenants.json``."""
    nats_url: str | None = None
    """The NATS its ingesters consume from; None: the head's."""
    ingest: tuple[str, ...] = ()
    """The shards whose ingesters run here, their files in ``data_dir``."""
    shard_map: Assignments | None = None
    """None: the head's; given, it must be the head's (a check that this machine's config agrees)."""
    gateway_processes: int = 1
    head_timeout_s: float = 120.0
    """How long to wait for the head's ``mirror up`` to publish its settings."""
    nats_wait_s: float = 600.0
    """How long to wait for the JetStream its ingesters consume from to answer."""

    def __post_init__(self) -> None:
        self.advertised  # noqa: B018  # checks bind and advertise
        host, colon, port = self.ray_address.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise InvalidSettings("--ray-address", f"{self.ray_address!r} is not HOST:PORT, the address of the "
                                                   "head's Ray (`ray start --head --port 6379` prints it)")
        if self.nats_url is not None:
            check_reachable(nats_urls(self.nats_url), "--nats-url", self.bind)
        if self.gateway_processes < 1:
            raise InvalidSettings("gateway_processes", f"{self.gateway_processes}: a node runs at least one gateway")
        if len(set(self.ingest)) != len(self.ingest):
            raise InvalidSettings("--ingest", f"a shard is given twice in {', '.join(self.ingest)}")

    @property
    def advertised(self) -> str:
        return advertised_host(self.bind, self.advertise)

    @property
    def tenants(self) -> Path:
        return Path(self.tenants_file) if self.tenants_file is not None else Path(self.data_dir) / "tenants.json"


def node_file(data_dir: Path) -> Path:
    return Path(data_dir) / "node.json"


def running_node(data_dir: Path) -> dict[str, Any] | None:
    """The node recorded in ``data_dir`` if its process is alive, else None."""
    return live_record(node_file(data_dir))


class MirrorNode:
    """One machine's gateway and ingesters in the head's cluster (see the module docstring)."""

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir).resolve()
        self.url = ""
        self.gateways: list[Any] = []
        self.ingesters: dict[str, Any] = {}
        self.head: dict[str, Any] = {}
        """What the head published about itself: its URL, NATS URL, shards it ingests, shard map."""
        self.supervisor: Supervisor | None = None
        self._closers: list[Any] = []
        self._recorded = False
        self._gateway_settings: GatewaySettings | None = None
        """What the gateways run with: the head's, with this machine's files (:meth:`_ours`)."""
        self._generation = 0
        self._tenants = self._warnings = Path()
        self._port = 0
        self.lost: str | None = None
        """Why this machine's Ray node left the cluster, once it has (then the node stops serving)."""
        self._lost_listeners: list[Callable[[], object]] = []

    def start(self) -> MirrorNode:
        import ray

        from mirror.gateway.actor import stop_gateways
        from mirror.stack.published import head_settings

        settings = self.settings
        try:
            claim = claim_port(settings.bind, settings.gateway_port, what="mirror gateway",
                               fix="stop it, or give this node another port (mirror node --port)", hold=True)
            self._closers.append(claim.release)
            tenants = settings.tenants.resolve()
            if not tenants.is_file():
                raise InvalidSettings("--tenants", f"{tenants} does not exist: copy the head's DATA/tenants.json "
                                                   "here (it holds only token hashes) and give its path")
            if running_node(self.data_dir) is not None:
                raise InvalidSettings("--data", f"a node is already running on {self.data_dir} "
                                                f"(see {node_file(self.data_dir)})")
            self.data_dir.mkdir(parents=True, exist_ok=True)
            relay = LogRelay(self.data_dir / WARNINGS_LOG).start()
            self._closers.append(relay.stop)
            join_ray(settings.ray_address)
            self._closers.append(ray.shutdown)
            head_gateway, self.head = head_settings(settings.ray_address, timeout_s=settings.head_timeout_s)
            infrastructure = head_gateway.runtime.infrastructure
            if not isinstance(infrastructure, NatsInfrastructure):
                raise StackError(f"the head runs on {infrastructure!r}, not NATS: a node has nothing to join")
            shards = infrastructure.shards
            self._check_shards(shards)
            nats_url = settings.nats_url or infrastructure.url
            if settings.ingest:
                asyncio.run(wait_jetstream(nats_url, timeout_s=settings.nats_wait_s))
            for shard in settings.ingest:
                # The head's --no-metrics and traces hold here too (its runtime settings are the deployment's).
                ingester = start_ingester(nats_url, self.data_dir, shards, shard, metrics=head_gateway.runtime.metrics,
                                          traces=head_gateway.runtime.traces, tenants_file=settings.tenants)
                self.ingesters[shard] = ingester
                self._closers.append(self._unless_lost(ingester.stop))
            self._tenants, self._warnings, self._port = tenants, relay.path, claim.port
            self._gateway_settings = self._ours(head_gateway)
            self.url, gateways = self._serve(self._gateway_settings)
            self.gateways[:] = gateways  # in place: the supervisor's watches read this list
            self._closers.append(self._unless_lost(lambda: stop_gateways(self.gateways)))
            self._recorded = True
            write_record(node_file(self.data_dir), {
                "url": self.url, "pid": os.getpid(), "ray_address": settings.ray_address,
                "node_id": ray.get_runtime_context().get_node_id(), "nats_url": nats_url,
                "ingest": list(settings.ingest), "shard_map": shards.entries(), "head_url": self.head.get("url"),
            })
            self.supervisor = supervisor = self._supervise()
            self._closers.append(lambda: supervisor.stop(timeout_s=2.0 if self.lost else 30.0))
            self._closers.append(RayNodeWatch(self._lose).start().stop)
        except BaseException:
            self.stop()
            raise
        return self

    def on_lost(self, listener: Callable[[], object]) -> None:
        """Call ``listener`` (from another thread) when this machine's Ray node is lost; at once if it is."""
        self._lost_listeners.append(listener)
        if self.lost is not None:
            listener()

    def _lose(self, reason: str) -> None:
        self.lost = reason
        for listener in list(self._lost_listeners):
            listener()

    def _unless_lost(self, closer: Callable[[], object]) -> Callable[[], object]:
        """``closer``, skipped once the node is lost: its actors died with it, and asking them to stop
        would only wait for Ray's timeouts."""
        return lambda: None if self.lost is not None else closer()

    def _ours(self, head_gateway: GatewaySettings) -> GatewaySettings:
        """The head's gateway settings to the byte (they name the conversation hosts), with this
        machine's tenants file and warnings file."""
        return dataclasses.replace(head_gateway, tenants_file=str(self._tenants), warnings_log=str(self._warnings))

    def _serve(self, gateway_settings: GatewaySettings) -> tuple[str, list[Any]]:
        """Gateways on this node with these settings, each set under names of its own (``node-<job>-g<n>``)."""
        import ray

        self._generation += 1
        job = ray.get_runtime_context().get_job_id()
        return serve_gateways(gateway_settings, bind=self.settings.bind, advertise=self.settings.advertised,
                              port=self._port, count=self.settings.gateway_processes,
                              name=f"node-{job}-g{self._generation}-gateway")

    def _head_unchanged(self) -> bool:
        """Whether the head still publishes the settings these gateways run with (True when it
        cannot be asked: a head that is restarting changes nothing yet)."""
        from mirror.stack.published import head_settings

        try:
            head_gateway, _ = head_settings(self.settings.ray_address, timeout_s=0, call_timeout_s=2)
        except Exception:  # no head to ask right now: keep serving as we are
            return True
        return repr(self._ours(head_gateway)) == repr(self._gateway_settings)

    def _follow_head(self) -> None:
        """The head was started again with other settings: serve with them (new gateways on the same
        port, then the old ones stopped), so that every gateway hands out the same hosts."""
        from mirror.gateway.actor import stop_gateways
        from mirror.stack.published import head_settings

        head_gateway, self.head = head_settings(self.settings.ray_address, timeout_s=10)
        before = self._gateway_settings
        if before is not None and before.runtime.infrastructure != head_gateway.runtime.infrastructure:
            log.error("the head now runs with other NATS or shard settings (%s): this node's ingesters do not "
                      "follow; stop it and start it again", head_gateway.runtime.infrastructure)
        self._gateway_settings = self._ours(head_gateway)
        _, gateways = self._serve(self._gateway_settings)
        old, self.gateways[:] = list(self.gateways), gateways
        stop_gateways(old)

    def _check_shards(self, shards: ShardMap) -> None:
        """The shard map given here, if any, must be the head's; each shard to ingest one of its shards."""
        settings = self.settings
        if settings.shard_map is not None and _tenants_by_shard(ShardMap(settings.shard_map)) != _tenants_by_shard(shards):
            raise InvalidSettings("--shard-map", f"{' '.join(ShardMap(settings.shard_map).entries()) or '(none)'} is "
                                                 f"not the head's ({' '.join(shards.entries()) or 'none'}): give the "
                                                 "same map, or leave it out to take the head's")
        for shard in settings.ingest:
            if shard not in shards.shards:
                raise InvalidSettings("--ingest", f"shard {shard!r} is not in the head's shard map, whose shards "
                                                  f"are {', '.join(shards.shards)}")

    def _supervise(self) -> Supervisor:
        supervisor = Supervisor()
        for index in range(len(self.gateways)):
            supervisor.watch(gateway_watch(index, self.gateways))
        supervisor.watch(Watched("the head's settings", self._head_unchanged, lambda: None, self._follow_head,
                                 died="changed", restarting="serving with the new ones",
                                 back="are this node's gateways'"))
        for ingester in self.ingesters.values():
            supervisor.watch(ingester_watch(ingester))
        return supervisor.start()

    def stop(self) -> None:
        if self._recorded:
            node_file(self.data_dir).unlink(missing_ok=True)
            self._recorded = False
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception:  # stopping must reach every part
                log.exception("stopping %r failed", closer)

    def __enter__(self) -> MirrorNode:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _tenants_by_shard(shards: ShardMap) -> tuple[str, dict[str, frozenset[str]]]:
    return shards.default, {shard: frozenset(tenants) for shard, tenants in shards.assignments}
