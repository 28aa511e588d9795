"""The embedded stack: NATS, a local Ray head, the ingesters, the LLM, the gateway — on one machine,
or as the head of a deployment over several.

With ``ray_address`` the stack joins a Ray cluster started with ``ray start --head`` (and other
raylets joined to it with ``ray start --address``) instead of starting a head of its own: the
ingesters, the gateways and the directory of live actors stay on this machine's node (they own
its files and listen on its addresses), the conversation actors spread over the cluster's
nodes. Stopping such a stack ends Mirror's conversations but leaves the cluster running, and
the other machines' ``mirror node`` (:mod:`.node`) with it.

Addresses (:mod:`.addresses`): the gateway, and the nats-server and simulator the stack starts,
listen on ``bind`` (loopback by default); the URLs handed to the conversations, which may run
on any machine, and the URL recorded and printed, use ``advertise`` (default: ``bind``). With
``nats_url`` the stack uses a NATS JetStream that runs already (a cluster with a server on each
machine, ``mirror nats --routes``): it starts, supervises and claims no broker.

Each shard of ``StackSettings.shard_map`` (:class:`~mirror.events.shards.ShardMap`; with none,
the one shard ``0``) has its ingester, a Ray actor (``ingester-<shard>``,
:mod:`mirror.actors.ingester_actor`) with its own DuckDB file (:func:`log_file`) and subject
filter. This stack runs those of ``ingest`` (default: all), owned by this process on this node:
Ray restarts one after a crash, and stopping the stack drains it and closes its file before Ray
shuts down. The others run on the machines that hold their files (``mirror node --ingest``).
The gateway settings are published in the cluster (:mod:`.published`) for those nodes.

NATS is one embedded nats-server, or with ``nats_cluster`` N ≥ 2 a JetStream cluster of N on
this machine (:mod:`mirror.events.nats.cluster`): every client is given all N URLs and fails
over, the stream keeps min(3, N) replicas, and the supervisor starts a dead node again as itself.
Every node fsyncs before it acknowledges (``nats_sync="always"``) unless ``nats_sync`` relaxes it
to a duration between fsyncs (docs/operations.md, "Durability").

``mirror up`` runs it in the foreground; ``mirror demo`` starts one when none is running. The
stack writes ``<data dir>/stack.json`` (gateway URL, default tenant and its token, pid, shard
map, Ray address) so other commands find it; everything lives under the data directory, so
running it again resumes the same conversations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.fair_share import FairShareSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.events.nats.cluster import EmbeddedNatsCluster, node_ports, server_name, wait_jetstream
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.server import SYNC_ALWAYS, EmbeddedNats, validate_sync_interval
from mirror.events.shards import Assignments, ShardMap
from mirror.gateway.app import DEFAULT_MAX_MESSAGE_BYTES, GatewayServer, GatewaySettings, create_app
from mirror.gateway.tenants import TenantRegistry
from mirror.serving import PortClaim, claim_port
from mirror.stack.addresses import LOOPBACK, advertised_host, check_reachable, nats_urls
from mirror.stack.errors import InvalidSettings, ModelServerUnavailable
from mirror.stack.local_model import (
    LOCAL_TALKER_MAX_TOKENS,
    LOCAL_THINKER_MAX_TOKENS,
    STRUCTURED_OUTPUT,
    LocalLLMServer,
    LocalModelSettings,
)
from mirror.stack.log_relay import LogRelay
from mirror.stack.machine import (
    enable_ray_token_auth,
    gateway_watch,
    ingester_watch,
    join_ray,
    live_record,
    log_file,
    serve_gateways,
    start_ingester,
    write_record,
)
from mirror.stack.model_check import model_server_problem
from mirror.stack.processes import SimProcess
from mirror.stack.supervisor import Supervisor, Watched
from mirror.tracing import TraceSettings

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
WARNINGS_LOG = "warnings.log"
"""The file in the data directory where the gateways and conversation processes append their
warnings (:mod:`mirror.actors.log_file`); the stack relays it to its own log (:mod:`.log_relay`)."""
MACHINE_ACTORS = ("gateway", "node-", "ingester-")
"""Names of the actors each machine's driver owns and stops itself (gateways, ingesters): a
stack that stops ends the cluster's conversations, not the other machines' ``mirror node``."""


@dataclass(frozen=True)
class StackSettings:
    data_dir: Path = Path("data")
    llm: str = "local"  # "local", "sim", or an OpenAI-compatible base URL
    llm_model: str = ""
    llm_api_key: str | None = None
    gateway_port: int = 8080
    nats_port: int = 4222
    """The (first) nats-server's client port; a cluster's nodes take the ports after it. 0: free ports."""
    nats_cluster: int = 1
    """nats-servers to run: 1 is a single server; N ≥ 2 a JetStream cluster on loopback
    (:class:`~mirror.events.nats.cluster.EmbeddedNatsCluster`), the stream with min(3, N) replicas."""
    nats_sync: str = SYNC_ALWAYS
    """JetStream's ``sync_interval`` on every nats-server: ``"always"`` fsyncs before each
    acknowledgement (an acknowledged turn survives a power failure); a duration such as ``"2m"``
    (nats-server's own default) fsyncs that often, and an OS crash or power failure loses up to
    that window of acknowledged writes. Checked when the settings are made; with ``nats_url`` it
    does not apply (that broker's own config says)."""
    mode: str = "full"
    memory: bool = True
    """The memory stage; its vectors come from the offline MiniLM with ``llm="local"``, else from
    the endpoint's ``/v1/embeddings`` (the simulator's with ``llm="sim"``) for ``embedding_model``."""
    reflection: bool = True
    """Insights after each turn and reflection when due, for conversations whose first turn does not say."""
    reflection_policy: ReflectionPolicy = DEFAULT_POLICY
    """When the conversations reflect (:class:`~mirror.cognition.reflection.policy.ReflectionPolicy`)."""
    metrics: bool = True
    """Prometheus metrics in every process (:mod:`mirror.metrics`); off, none are recorded or served."""
    traces: TraceSettings = TraceSettings()
    """OpenTelemetry traces in every process (:mod:`mirror.tracing`); off by default."""
    embedding_model: str = "text-embedding-3-small"
    sim_latency: str = "fixed:50"
    sim_token_delay_ms: float = 0.0
    """Between the tokens of the simulator's streamed answers (``llm="sim"``)."""
    passivate_after_s: float = 300.0
    idempotency_window_s: float = 86_400.0
    """How long an ``Idempotency-Key`` answers retries with its turn (``mirror up --idempotency-window-h``)."""
    placement: str = "hosted"
    """Where live conversations run: ``hosted`` (many per conversation host) or ``dedicated`` (an actor each)."""
    hosts: int = 0
    """Conversation hosts (hosted placement); 0: one per CPU of the Ray cluster."""
    max_live_per_host: int = 5_000
    max_live_actors: int = 256
    """Per Ray node (dedicated placement)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    snapshot_every: int = 200
    gateway_processes: int = 1
    """Gateway actors (processes) sharing the gateway port; the kernel spreads connections over them.
    0 serves the gateway on a thread of this process instead."""
    ray_address: str | None = None
    """A running Ray cluster to join (``HOST:PORT`` of its head, as ``ray start --address`` takes);
    None starts a local head inside this process."""
    shard_map: Assignments = ()
    """Shards besides ``0`` and their tenants (:class:`~mirror.events.shards.ShardMap`): one ingester and file each."""
    strict: bool = False
    """Refuse to start (:class:`~mirror.stack.errors.ModelServerUnavailable`) when the model server at
    a URL fails the start's check (:mod:`.model_check`), instead of a warning."""
    talker_max_tokens: int | None = None
    """The Talker's max_tokens in every mode; None: the model's default (the local model's, else 1024).
    ``mirror eval curate`` sets it so that every mode answers with the same budget."""
    bind: str = LOOPBACK
    """Where the gateway, and the nats-server and simulator this stack starts, listen (``0.0.0.0``: every interface)."""
    advertise: str | None = None
    """The address in the URLs handed to conversation hosts and printed; None: ``bind`` (:mod:`.addresses`)."""
    nats_url: str | None = None
    """An existing NATS JetStream (a cluster's servers comma-separated) to use: the stack then starts,
    supervises and claims no broker, and ``nats_port``/``nats_cluster`` do not apply."""
    nats_wait_s: float = 600.0
    """How long a start waits for the JetStream at ``nats_url`` to answer (a cluster whose other
    machines are still starting); it says every 10 s what it waits for."""
    model_slots: int | None = None
    """Model calls each conversation process (host) has in flight at most, shared between tenants by
    weight (:mod:`mirror.cognition.fair_share`); None: the model client's default (16)."""
    tenant_weights: tuple[tuple[str, float], ...] = ()
    """``(tenant, weight)``: a tenant's share of the model slots against the others' (default 1)."""
    ingest: tuple[str, ...] | None = None
    """The shards whose ingesters this machine runs (their files in ``data_dir``); None: every shard of
    the map. The others' run where their disks are (``mirror node --ingest``)."""

    def __post_init__(self) -> None:
        """Refuse settings that cannot work (:class:`~mirror.stack.errors.InvalidSettings`), before anything starts."""
        self.advertised  # noqa: B018  # checks bind and advertise
        validate_sync_interval(self.nats_sync)  # InvalidSyncInterval
        if self.nats_url is not None:
            if self.nats_cluster != 1:
                raise InvalidSettings("--nats-cluster", f"{self.nats_cluster} nats-servers to start, but --nats-url "
                                                        f"{self.nats_url} says to use a broker that runs already: "
                                                        "give one or the other")
            check_reachable(nats_urls(self.nats_url), "--nats-url", self.bind)
        if self.llm not in ("local", "sim"):
            check_reachable((self.llm,), "--llm", self.bind)
        shards = ShardMap(self.shard_map).shards
        for shard in self.ingest or ():
            if shard not in shards:
                raise InvalidSettings("--ingest", f"shard {shard!r} is not in the shard map, whose shards are "
                                                  f"{', '.join(shards)}: add it with --shard-map {shard}=TENANT,…")

    @property
    def advertised(self) -> str:
        """The address others reach this machine's servers at (``advertise``, else ``bind``)."""
        return advertised_host(self.bind, self.advertise)

    @property
    def ingested(self) -> tuple[str, ...]:
        """The shards whose ingesters this stack runs: ``ingest``, else every shard of the map."""
        return ShardMap(self.shard_map).shards if self.ingest is None else self.ingest


def stack_file(data_dir: Path) -> Path:
    return Path(data_dir) / "stack.json"


def running_stack(data_dir: Path) -> dict[str, Any] | None:
    """The stack recorded in ``data_dir`` if its process is alive, else None."""
    return live_record(stack_file(data_dir))


class EmbeddedStack:
    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir).resolve()
        self._closers: list[Any] = []
        self.url = ""
        self.token = ""
        self.nats_url = ""
        """The NATS URLs the runtime is given (the advertised address's, or ``nats_url``'s)."""
        self.ray_address = ""
        """The Ray cluster's address (``HOST:PORT``), once joined: what ``mirror node --ray-address`` takes."""
        self.gateways: list[Any] = []
        self._sim: SimProcess | None = None
        self._local_llm: LocalLLMServer | None = None
        self.supervisor: Supervisor | None = None
        """Restarts the nats-server and the simulator should they die (:mod:`.supervisor`)."""
        self.runtime: Any = None
        """The conversations' :class:`RuntimeSettings`, once started (hosts resolved)."""
        self.sim_pid: int | None = None
        self.ingesters: dict[str, Any] = {}
        """Each shard's :class:`~mirror.actors.ingester_actor.RayIngester`, once started."""
        self._recorded = False
        """Whether this stack wrote ``stack.json`` (and so removes it when it stops)."""
        self._claims: list[PortClaim] = []
        """The gateway's port, then each nats-server's: held while the stack runs (:meth:`_claim_ports`)."""

    def start(self) -> EmbeddedStack:
        # Ray (~0.5 s to import, see gateway/routes/recompute.py) only here: the client commands
        # import this module for running_stack() and never start a stack.
        import ray

        from mirror.actors.directory import directory
        from mirror.actors.placement import default_host_count
        from mirror.gateway.actor import stop_gateways
        from mirror.stack.published import publish_settings

        settings = self.settings
        advertised = settings.advertised
        try:
            gateway_port = self._claim_ports()  # before anything starts: a port in use starts nothing
            self._check_model_server()  # with --strict, a model server that fails it starts nothing either
            self.data_dir.mkdir(parents=True, exist_ok=True)
            relay = LogRelay(self.data_dir / WARNINGS_LOG).start()  # before the processes that write it
            self._closers.append(relay.stop)
            nats = self._start_nats()
            llm_settings = self._start_llm()
            if settings.model_slots is not None:
                llm_settings = dataclasses.replace(llm_settings, max_concurrency=settings.model_slots)
            self.ray_address = join_ray(settings.ray_address)
            self._closers.append(ray.shutdown)
            if settings.ray_address is not None:  # the cluster outlives the stack: its detached actors must not
                self._closers.append(end_named_actors)
            # On this node, as the ingester: restarted elsewhere it would forget who is live where.
            directory(settings.max_live_actors, node_id=ray.get_runtime_context().get_node_id())
            shards = ShardMap(settings.shard_map)
            for shard in settings.ingested:
                # Stopped before Ray: each drains, commits and closes its DuckDB file first.
                ingester = start_ingester(self.nats_url, self.data_dir, shards, shard, metrics=settings.metrics,
                                          traces=settings.traces)
                self.ingesters[shard] = ingester
                self._closers.append(ingester.stop)
            # The one place the runtime's adapters are chosen: NATS for the bus, each shard's
            # ingester for its log (the processes that need them open them through this recipe).
            infrastructure = NatsInfrastructure(self.nats_url, shard=shards.default, shard_map=shards.assignments)
            runtime = RuntimeSettings(infrastructure=infrastructure, llm=llm_settings, mode=settings.mode,
                                      warnings_log=str(relay.path),
                                      memory=settings.memory, reflection=settings.reflection,
                                      reflection_policy=settings.reflection_policy,
                                      embedding_model=settings.embedding_model,
                                      embedder="minilm" if settings.llm == "local" else "endpoint",
                                      talker_max_tokens=self._talker_tokens(), thinker_max_tokens=self._thinker_tokens(),
                                      snapshot_every=settings.snapshot_every, passivate_after_s=settings.passivate_after_s,
                                      idempotency_window_s=settings.idempotency_window_s,
                                      max_live_actors=settings.max_live_actors, placement=settings.placement,  # type: ignore[arg-type]  # a str setting; RuntimeSettings refuses one outside PLACEMENTS
                                      hosts=settings.hosts or default_host_count(),
                                      max_live_per_host=settings.max_live_per_host,
                                      fair_share=FairShareSettings(tenant_weights=settings.tenant_weights),
                                      metrics=settings.metrics, traces=settings.traces)
            self.runtime = runtime
            tenants_file = self.data_dir / "tenants.json"
            self.token = self._default_token(tenants_file)
            gateway_settings = GatewaySettings(runtime=runtime, tenants_file=str(tenants_file),
                                               max_message_bytes=settings.max_message_bytes)
            if settings.gateway_processes == 0:  # in this process, on a thread (comparisons, debugging)
                server = GatewayServer(create_app(gateway_settings), host=settings.bind, port=gateway_port).start()
                self._closers.append(server.stop)
                self.url = f"http://{advertised}:{server.port}"
            else:
                self.url, self.gateways = serve_gateways(gateway_settings, bind=settings.bind, advertise=advertised,
                                                         port=gateway_port, count=settings.gateway_processes)
                self._closers.append(lambda: stop_gateways(self.gateways))
            # For `mirror node` on the other machines: their gateways must run with these very settings.
            published = publish_settings(gateway_settings, {"url": self.url, "nats_url": self.nats_url,
                                                            "ingest": list(settings.ingested),
                                                            "shard_map": shards.entries()})
            self._closers.append(lambda: ray.kill(published))
            self._recorded = True
            write_record(stack_file(self.data_dir), {
                "url": self.url, "tenant": DEFAULT_TENANT, "token": self.token, "pid": os.getpid(),
                "nats_url": self.nats_url, "nats_pid": nats.pids[0] if nats else None,
                "nats_pids": nats.pids if nats else [], "nats_sync": nats.sync_interval if nats else None,
                "sim_pid": self.sim_pid, "shard": shards.default,
                "shard_map": shards.entries(), "ingest": list(settings.ingested), "ray_address": self.ray_address,
                "llm_url": llm_settings.base_url,
            })
            self.supervisor = self._supervise(nats)
            self._closers.append(self.supervisor.stop)  # stops first: the parts are then stopped on purpose
        except BaseException:
            self.stop()
            raise
        return self

    def _start_nats(self) -> EmbeddedNatsCluster | None:
        """The embedded nats-server(s) on ``bind``, or None with ``nats_url`` (a broker that runs already)."""
        settings = self.settings
        if settings.nats_url is not None:
            self.nats_url = ",".join(nats_urls(settings.nats_url))
            asyncio.run(wait_jetstream(self.nats_url, timeout_s=settings.nats_wait_s))
            return None
        nats = EmbeddedNatsCluster(self.data_dir / "nats", settings.nats_cluster, host=settings.bind,
                                   ports=[claim.port for claim in self._claims[1:]],
                                   sync_interval=settings.nats_sync).start()
        self._closers.append(nats.stop)
        self.nats_url = ",".join(f"nats://{settings.advertised}:{node.port}" for node in nats.nodes)
        return nats

    def _claim_ports(self) -> int:
        """Claim the gateway's port and NATS's (:func:`~mirror.serving.claim_port`) for this stack's
        own processes, held until it stops; returns the gateway's port (port 0 resolved).

        :class:`~mirror.serving.PortInUse` when another process serves one of them, or another
        stack has claimed it: the stack's gateway processes share their port (``SO_REUSEPORT``),
        and without the claim a second stack's gateways would join the first's and the kernel
        would split the requests between the two."""
        settings = self.settings
        claims = self._claims
        self._closers.append(self._release_claims)  # first in, last out: held until everything has stopped
        claims.append(claim_port(settings.bind, settings.gateway_port, what="mirror gateway",
                                 fix="stop it, or give this stack another port (mirror up --port)", hold=True))
        if settings.nats_url is None:  # a broker of our own; one at --nats-url is someone else's
            for port in node_ports(settings.nats_port, settings.nats_cluster, settings.bind):
                claims.append(claim_port(settings.bind, port, what="nats-server",
                                         fix="stop it, or give this stack's NATS another port (mirror up --nats-port)"))
        return claims[0].port

    def _release_claims(self) -> None:
        while self._claims:
            self._claims.pop().release()

    def _supervise(self, nats: EmbeddedNatsCluster | None) -> Supervisor:
        """Watch the child processes this stack started: a dead one is started again the same way
        (a cluster's node with its name, ports and store, so it rejoins and catches up). A broker
        at ``nats_url`` is not this stack's to watch."""
        supervisor = Supervisor()
        for index, node in enumerate(nats.nodes if nats else ()):
            supervisor.watch(_watched_nats("nats-server" if nats.size == 1 else f"nats-server {server_name(index)}", node))  # type: ignore[union-attr]  # nodes only when nats
        for index in range(len(self.gateways)):
            supervisor.watch(gateway_watch(index, self.gateways))
        for ingester in self.ingesters.values():
            supervisor.watch(ingester_watch(ingester))
        local = self._local_llm
        if local is not None:  # the same port: the conversations' model URL stays right
            supervisor.watch(Watched("the local model server", lambda: local.running, lambda: local.pid, local.start,
                                     exit_code=lambda: local.exit_code))
        sim = self._sim
        if sim is not None:
            supervisor.watch(Watched("the simulator", lambda: sim.process is not None and sim.process.poll() is None,
                                     lambda: sim.pid, sim.start,
                                     exit_code=lambda: None if sim.process is None else sim.process.returncode))
        return supervisor.start()

    def _start_llm(self) -> LLMSettings:
        settings = self.settings
        # Both listen on --bind; the conversations, wherever they run, call the advertised address.
        if settings.llm == "local":
            server = self._local_llm = LocalLLMServer(LocalModelSettings(host=settings.bind),
                                                      log_path=self.data_dir / "llama.log").start()
            self._closers.append(server.stop)
            return LLMSettings(base_url=f"http://{settings.advertised}:{server.port}/v1", model=server.model,
                               structured_output=STRUCTURED_OUTPUT, timeout_s=600)
        if settings.llm == "sim":
            sim = self._sim = SimProcess(latency=settings.sim_latency, host=settings.bind,
                                         token_delay_ms=settings.sim_token_delay_ms,
                                         log_path=self.data_dir / "sim-llm.log").start()
            self._closers.append(sim.stop)
            self.sim_pid = sim.pid
            return LLMSettings(base_url=f"http://{settings.advertised}:{sim.port}/v1", model="mirror-sim")
        return self._endpoint_settings()

    def _endpoint_settings(self) -> LLMSettings:
        """The model at a URL (``--llm URL``), as the conversations call it."""
        settings = self.settings
        return LLMSettings(base_url=settings.llm, model=settings.llm_model or "default", api_key=settings.llm_api_key)

    def _check_model_server(self) -> None:
        """Ask a model at a URL for its models once (:mod:`.model_check`): a warning if it fails,
        :class:`ModelServerUnavailable` with ``strict``. The simulator and the local model are this
        stack's own and are waited for when started."""
        if self.settings.llm in ("local", "sim"):
            return
        llm = self._endpoint_settings()
        problem = model_server_problem(llm)
        if problem is None:
            return
        if self.settings.strict:
            raise ModelServerUnavailable(llm.base_url, problem)
        log.warning("the model server at %s %s; turns answer 503 or 502 until it works "
                    "(mirror up --strict refuses to start instead)", llm.base_url, problem)

    def _talker_tokens(self) -> int:
        if self.settings.talker_max_tokens is not None:
            return self.settings.talker_max_tokens
        return LOCAL_TALKER_MAX_TOKENS if self.settings.llm == "local" else 1024

    def _thinker_tokens(self) -> int:
        return LOCAL_THINKER_MAX_TOKENS if self.settings.llm == "local" else 3000

    def _default_token(self, tenants_file: Path) -> str:
        """The default tenant's token: kept (0600) beside the data so a restart resumes it."""
        token_file = self.data_dir / "default.token"
        if token_file.exists():
            return token_file.read_text().strip()
        token = TenantRegistry(tenants_file).add(DEFAULT_TENANT)
        token_file.write_text(token)
        os.chmod(token_file, 0o600)
        return token

    def stop(self) -> None:
        if self._recorded:  # never another stack's record, should this one have failed to start
            stack_file(self.data_dir).unlink(missing_ok=True)
            self._recorded = False
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception:  # stopping must reach every part
                log.exception("stopping %r failed", closer)

    def __enter__(self) -> EmbeddedStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _watched_nats(name: str, node: EmbeddedNats) -> Watched:
    return Watched(name, lambda: node.running, lambda: node.pid, node.start, exit_code=lambda: node.exit_code)


def end_named_actors() -> None:
    """Kill Mirror's named actors (conversations, the directory) left in a cluster this stack joined.

    They are detached, so a cluster that outlives the stack would keep them, still pointed at
    this stack's NATS and LLM. Runs after the gateways and the ingester have stopped cleanly.
    The gateways and ingesters of the other machines' ``mirror node`` are theirs to stop: left.
    """
    import ray

    from mirror.actors.directory import NAMESPACE

    for name in ray.util.list_named_actors():
        if name.startswith(MACHINE_ACTORS):
            continue
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:
            pass  # gone already


__all__ = ["DEFAULT_TENANT", "MACHINE_ACTORS", "WARNINGS_LOG", "EmbeddedStack", "StackSettings", "enable_ray_token_auth",
           "end_named_actors", "log_file", "running_stack", "stack_file"]
