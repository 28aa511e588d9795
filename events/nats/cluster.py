"""An embedded NATS cluster: N nats-servers with JetStream, routed to each other on loopback.

Each node is an :class:`~mirror.events.nats.server.EmbeddedNats` with a name (``mirror-n<i>``),
the cluster name ``mirror``, a route port of its own and routes to every other node; its store is
``<store_root>/n<i>``. The nodes are launched together and waited for together: a clustered
JetStream elects a *meta leader* (the node that places streams) only once a majority of nodes
see each other, and until then it answers every JetStream request with "JetStream system
temporarily unavailable". :meth:`start` returns once every node has logged "Server is ready" and
a meta leader ("JetStream cluster new metadata leader: …" or "Self is new JetStream cluster
metadata leader").

A node killed with SIGKILL and started again by :meth:`start_node` keeps its name, ports and
store, so it rejoins as the same Raft peer and catches up from the others. Clients get
:attr:`url`, every node's client URL comma-separated; :func:`mirror.events.nats.jetstream.connect_nats`
hands them to nats-py, which fails over between them (and learns the cluster's other URLs from
the servers it reaches).

:func:`cluster_member` is one server of a cluster spread over machines (``mirror nats --routes``):
each machine runs one, with its own name and store, routes to every member, and the same
cluster name; the cluster forms, and elects its meta leader, once a majority of them run.

Every node runs with the same ``sync_interval`` (default ``"always"``: each fsyncs before it
acknowledges, see :mod:`mirror.events.nats.server`). Replicas alone are no substitute: Jepsen
(NATS 2.12.1) saw replicated streams lose acknowledged writes after a power failure of every
node at once, and after one node's OS crash combined with pauses or a partition; and the
loopback cluster's nodes all share one machine's power.

Size 1 is the plain single server of today, in ``store_root`` itself with no cluster flags, so a
data directory made by a single embedded server stays readable and one code path serves both.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from types import TracebackType

from mirror.events.errors import BusError
from mirror.events.nats.server import PORT_ATTEMPTS, SYNC_ALWAYS, EmbeddedNats, port_taken, validate_sync_interval
from mirror.processes import free_port

log = logging.getLogger(__name__)

CLUSTER_NAME = "mirror"
SERVER_NAME_PREFIX = "mirror-n"
META_LEADER_LINES = (b"JetStream cluster new metadata leader", b"Self is new JetStream cluster metadata leader")
"""What a clustered nats-server logs once it knows the meta leader (nats-server 2.10–2.15)."""


def server_name(index: int) -> str:
    return f"{SERVER_NAME_PREFIX}{index}"


def node_store(store_root: Path, size: int, index: int) -> Path:
    """Where node ``index`` keeps its JetStream store: the root itself for a single server."""
    return Path(store_root) if size == 1 else Path(store_root) / f"n{index}"


def node_ports(first: int | None, size: int, host: str = "127.0.0.1") -> list[int]:
    """Client ports of a cluster: ``first``, ``first + 1``, … if given (0 or None: free ones)."""
    if first:
        return [first + index for index in range(size)]
    return [free_port(host) for _ in range(size)]


class EmbeddedNatsCluster:
    """N nats-server processes forming one JetStream cluster (see the module docstring).

    ``ports`` are the client ports (default: free ones); ``route_ports`` the cluster ports
    (default: free ones). Both are chosen once, so a node started again listens where it did.
    ``sync_interval`` is every node's (:class:`~mirror.events.nats.server.EmbeddedNats`), checked
    before anything starts.
    """

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        size: int,
        *,
        host: str = "127.0.0.1",
        ports: list[int] | None = None,
        route_ports: list[int] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        sync_interval: str = SYNC_ALWAYS,
    ) -> None:
        if size < 1:
            raise ValueError(f"a NATS cluster needs at least one node, not {size}")
        self._given = (list(ports) if ports else None, list(route_ports) if route_ports else None)
        """The ports given (None: chosen here, and chosen again if taken before the first start listened)."""
        self._ports_chosen = None in self._given
        self.sync_interval = validate_sync_interval(sync_interval)
        self.store_root = Path(store_root)
        self.size = size
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.nodes = self._make_nodes()

    def _make_nodes(self) -> list[EmbeddedNats]:
        size, host = self.size, self.host
        ports = self._given[0] or node_ports(None, size, host)
        route_ports = self._given[1] or [free_port(host) for _ in range(size)]
        if len(ports) != size or len(route_ports) != size:
            raise ValueError(f"{size} nodes need {size} client ports and {size} route ports, "
                             f"got {ports} and {route_ports}")
        routes = [f"nats://{host}:{port}" for port in route_ports]
        return [
            EmbeddedNats(node_store(self.store_root, size, index), host=host, port=ports[index],
                         start_timeout=self.start_timeout, stop_timeout=self.stop_timeout,
                         sync_interval=self.sync_interval, extra_args=() if size == 1 else (
                             "--server_name", server_name(index),
                             "--cluster_name", CLUSTER_NAME,
                             "--cluster", routes[index],
                             "--routes", ",".join(route for other, route in enumerate(routes) if other != index),
                         ))
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated: what ``--nats-url`` and ``connect_nats`` take."""
        return ",".join(node.url for node in self.nodes)

    @property
    def pids(self) -> list[int | None]:
        return [node.pid for node in self.nodes]

    def node_of(self, name: str) -> int:
        """The index of the node a server name (``mirror-n1``, as STREAM.INFO's ``cluster.leader`` gives it) names."""
        if not name.startswith(SERVER_NAME_PREFIX) or not name[len(SERVER_NAME_PREFIX):].isdigit():
            raise ValueError(f"{name!r} is not a server of this cluster ({SERVER_NAME_PREFIX}0…)")
        return int(name[len(SERVER_NAME_PREFIX):])

    def start(self) -> EmbeddedNatsCluster:
        """Launch every node, wait until each is ready and the cluster has a JetStream meta leader.

        Ports chosen here are chosen again when another process took one before its node listened
        (a node's own outgoing route connections may be given it as their local port), up to
        :data:`~mirror.events.nats.server.PORT_ATTEMPTS` starts; given ports never are."""
        self._check_layout()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                for node in self.nodes:
                    node.launch()
                for node in self.nodes:
                    node.wait_ready()
                if self.size > 1:
                    self._wait_meta_leader()
                break
            except BusError as exc:
                self.stop()
                if not (self._ports_chosen and attempt < PORT_ATTEMPTS and port_taken(exc)):
                    raise
                log.warning("a port of the NATS cluster was taken before its node could listen (%s); "
                            "choosing its ports again", exc)
                self.nodes = self._make_nodes()
            except BaseException:
                self.stop()
                raise
        self._ports_chosen = False  # listened on: a node started again must come back where it was
        log.info("NATS cluster of %d ready at %s (JetStream sync_interval %s)", self.size, self.url, self.sync_interval)
        return self

    def _check_layout(self) -> None:
        """Refuse a store root laid out for the other kind: a single server keeps ``jetstream/`` in
        the root, a cluster ``n0/``, ``n1/``, …; started on the other's root it would make a new,
        empty stream beside the old one, and conversations would begin again at seq 1."""
        single, clustered = (self.store_root / "jetstream").is_dir(), (self.store_root / "n0").is_dir()
        if self.size > 1 and single:
            raise BusError(f"{self.store_root} holds a single nats-server's store; a cluster of {self.size} would "
                           "start an empty stream beside it: use another data directory, or keep one server")
        if self.size == 1 and clustered:
            raise BusError(f"{self.store_root} holds a NATS cluster's stores (n0/, n1/, …); a single server would "
                           "start an empty stream beside them: start the cluster again with its size")

    def _wait_meta_leader(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not all(any(node.logged(line) for line in META_LEADER_LINES) for node in self.nodes):
            if time.monotonic() > deadline:
                raise BusError(f"the NATS cluster at {self.url} elected no JetStream meta leader within "
                               f"{self.start_timeout}s; see {self.store_root}/n*/nats-server.log")
            time.sleep(0.05)

    def start_node(self, index: int) -> EmbeddedNats:
        """Start node ``index`` again (same name, ports and store): it rejoins and catches up."""
        return self.nodes[index].start()

    def kill(self, index: int) -> None:
        """SIGKILL node ``index``: the crash a test wants."""
        self.nodes[index].kill()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedNatsCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def cluster_member(
    store_dir: str | os.PathLike[str],
    *,
    name: str,
    routes: tuple[str, ...],
    host: str = "127.0.0.1",
    port: int = 4222,
    cluster_port: int = 6222,
    start_timeout: float = 30.0,
    stop_timeout: float = 10.0,
    sync_interval: str = SYNC_ALWAYS,
) -> EmbeddedNats:
    """One nats-server of a JetStream cluster whose members run on several machines.

    It listens for clients on ``host:port`` and for the other members' routes on
    ``host:cluster_port``, and dials ``routes`` (every member's route URL; nats-server ignores a
    route to itself, so one list serves every machine). ``name`` must be unique in the cluster
    and the same at every start: it is the member's Raft identity, so a restarted member with its
    store rejoins as itself and catches up. Ready (:meth:`EmbeddedNats.start`) once it listens;
    the JetStream meta leader comes when a majority of members run (:func:`knows_meta_leader`).
    ``sync_interval`` as :class:`EmbeddedNats` takes it: every member should have the same.
    """
    return EmbeddedNats(store_dir, host=host, port=port, start_timeout=start_timeout, stop_timeout=stop_timeout,
                        sync_interval=sync_interval, extra_args=(
                            "--server_name", name,
                            "--cluster_name", CLUSTER_NAME,
                            "--cluster", f"nats://{host}:{cluster_port}",
                            "--routes", ",".join(routes),
                        ))


async def wait_jetstream(url: str, *, timeout_s: float, report_every_s: float = 10.0) -> None:
    """Return once the JetStream at ``url`` answers (a cluster: once it has a meta leader, which needs
    a majority of its servers running); :class:`BusError` after ``timeout_s``. Logs what it waits
    for every ``report_every_s``: the machines of a deployment start in any order."""
    import nats.errors
    import nats.js.errors

    from mirror.events.nats.jetstream import connect_nats

    started = time.monotonic()
    reported = started
    reason = "not asked yet"
    while True:
        try:
            nc = await connect_nats(url, name="mirror-wait-jetstream", first_connect_timeout_s=5.0)
            try:
                await nc.jetstream(timeout=2.0).account_info()
                return
            finally:
                await nc.close()
        except (BusError, nats.errors.Error, nats.js.errors.Error, TimeoutError) as exc:
            reason = repr(exc)
        now = time.monotonic()
        if now - started > timeout_s:
            raise BusError(f"the NATS JetStream at {url} did not answer within {timeout_s:.0f} s ({reason}); start "
                           "its servers (a cluster answers once a majority of them run)")
        if now - reported >= report_every_s:
            log.warning("waiting for the NATS JetStream at %s (%.0f s so far): %s; a cluster answers once a "
                        "majority of its servers run", url, now - started, reason)
            reported = now
        await asyncio.sleep(0.5)


def knows_meta_leader(node: EmbeddedNats) -> bool:
    """Whether this run of a clustered server has logged its JetStream meta leader."""
    return any(node.logged(line) for line in META_LEADER_LINES)


__all__ = [
    "CLUSTER_NAME", "EmbeddedNatsCluster", "cluster_member", "knows_meta_leader", "node_ports", "node_store",
    "server_name", "wait_jetstream",
]
