"""The embedded stack on one machine: NATS, a local Ray head, the ingesters, the LLM, the gateway.

With ``ray_address`` the stack joins a Ray cluster started with ``ray start --head`` (and other
raylets joined to it with ``ray start --address``) instead of starting a head of its own: NATS,
the LLM, the ingester, the gateways and the directory of live actors stay on this machine's node
(they listen on its loopback and own its files), the conversation actors spread over the
cluster's nodes. Stopping such a stack ends Mirror's actors but leaves the cluster running.


Each shard of ``StackSettings.shard_map`` (:class:`~mirror.events.shards.ShardMap`; with none,
the one shard ``0``) has its ingester, a Ray actor (``ingester-<shard>``,
:mod:`mirror.actors.ingester_actor`) owned by this process, with its own DuckDB file
(:func:`log_file`) and subject filter: Ray restarts it after a crash, and stopping the stack
drains it and closes its file before Ray shuts down.

NATS is one embedded nats-server, or with ``nats_cluster`` N ≥ 2 a JetStream cluster of N on
loopback (:mod:`mirror.events.nats.cluster`): every client is given all N URLs and fails over,
the stream keeps min(3, N) replicas, and the supervisor starts a dead node again as itself.
Every node fsyncs before it acknowledges (``nats_sync="always"``) unless ``nats_sync`` relaxes it
to a duration between fsyncs (docs/operations.md, "Durability").

``mirror up`` runs it in the foreground; ``mirror demo`` starts one when none is running. The
stack writes ``<data dir>/stack.json`` (gateway URL, default tenant and its token, pid, shard
map) so other commands find it; everything lives under the data directory, so running it again
resumes the same conversations.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.events.nats.cluster import EmbeddedNatsCluster, node_ports, server_name
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.server import SYNC_ALWAYS, EmbeddedNats, validate_sync_interval
from mirror.events.shards import DEFAULT_SHARD, Assignments, ShardMap
from mirror.gateway.app import DEFAULT_MAX_MESSAGE_BYTES, GatewayServer, GatewaySettings, create_app
from mirror.gateway.tenants import TenantRegistry
from mirror.serving import PortClaim, claim_port
from mirror.stack.errors import ModelServerUnavailable
from mirror.stack.local_model import (
    LOCAL_TALKER_MAX_TOKENS,
    LOCAL_THINKER_MAX_TOKENS,
    STRUCTURED_OUTPUT,
    LocalLLMServer,
)
from mirror.stack.log_relay import LogRelay
from mirror.stack.model_check import model_server_problem
from mirror.stack.processes import SimProcess
from mirror.stack.supervisor import Supervisor, Watched

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
WARNINGS_LOG = "warnings.log"
"""The file in the data directory where the gateways and conversation processes append their
warnings (:mod:`mirror.actors.log_file`); the stack relays it to its own log (:mod:`.log_relay`)."""
LISTEN_HOST = "127.0.0.1"
"""Where the gateway and NATS listen: loopback (put a proxy in front to serve other machines)."""


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
    that window of acknowledged writes. Checked when the settings are made."""
    mode: str = "full"
    memory: bool = True
    """The memory stage; its vectors come from the offline MiniLM with ``llm="local"``, else from
    the endpoint's ``/v1/embeddings`` (the simulator's with ``llm="sim"``) for ``embedding_model``."""
    reflection: bool = True
    """Insights after each turn and reflection when due, for conversations whose first turn does not say."""
    reflection_policy: ReflectionPolicy = DEFAULT_POLICY
    """When the conversations reflect (:class:`~mirror.cognition.reflection.policy.ReflectionPolicy`)."""
    embedding_model: str = "text-embedding-3-small"
    sim_latency: str = "fixed:50"
    passivate_after_s: float = 300.0
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

    def __post_init__(self) -> None:
        validate_sync_interval(self.nats_sync)  # InvalidSyncInterval before anything starts


def log_file(data_dir: Path, shard: str) -> Path:
    """The DuckDB file of a shard: ``mirror.duckdb`` for shard 0 (the single-log layout), else ``mirror-<shard>.duckdb``."""
    return Path(data_dir) / ("mirror.duckdb" if shard == DEFAULT_SHARD else f"mirror-{shard}.duckdb")


def stack_file(data_dir: Path) -> Path:
    return Path(data_dir) / "stack.json"


def running_stack(data_dir: Path) -> dict[str, Any] | None:
    """The stack recorded in ``data_dir`` if its process is alive, else None."""
    path = stack_file(data_dir)
    try:
        info = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError, KeyError, PermissionError):
        return None
    return info


class EmbeddedStack:
    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir).resolve()
        self._closers: list[Any] = []
        self.url = ""
        self.token = ""
        self.nats_url = ""
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
        from mirror.actors.ingester_actor import RayIngester
        from mirror.actors.placement import default_host_count
        from mirror.events.duckdb.ingester import IngesterSettings
        from mirror.gateway.actor import start_gateways, stop_gateways


        settings = self.settings
        try:
            gateway_port = self._claim_ports()  # before anything starts: a port in use starts nothing
            self._check_model_server()  # with --strict, a model server that fails it starts nothing either
            self.data_dir.mkdir(parents=True, exist_ok=True)
            relay = LogRelay(self.data_dir / WARNINGS_LOG).start()  # before the processes that write it
            self._closers.append(relay.stop)
            nats = EmbeddedNatsCluster(self.data_dir / "nats", settings.nats_cluster,
                                       ports=[claim.port for claim in self._claims[1:]],
                                       sync_interval=settings.nats_sync).start()
            self._closers.append(nats.stop)
            self.nats_url = nats.url
            llm_settings = self._start_llm()
            if settings.ray_address is None and not ray.is_initialized():
                enable_ray_token_auth()
            ray.init(address=settings.ray_address, namespace="mirror", include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True)
            self._closers.append(ray.shutdown)
            if settings.ray_address is not None:  # the cluster outlives the stack: its detached actors must not
                self._closers.append(end_named_actors)
            # On this node, as the ingester: restarted elsewhere it would forget who is live where.
            directory(settings.max_live_actors, node_id=ray.get_runtime_context().get_node_id())
            shards = ShardMap(settings.shard_map)
            for shard in shards.shards:
                # Stopped before Ray: each drains, commits and closes its DuckDB file first.
                ingester = RayIngester(
                    nats.url, log_file(self.data_dir, shard),
                    log_path=self.data_dir / ("ingester.log" if shard == DEFAULT_SHARD else f"ingester-{shard}.log"),
                    settings=IngesterSettings(shard=shard, filter_subjects=shards.filter_subjects(shard),
                                              skip_tenants=shards.skipped_tenants(shard)),
                ).start()
                self.ingesters[shard] = ingester
                self._closers.append(ingester.stop)
            # The one place the runtime's adapters are chosen: NATS for the bus, each shard's
            # ingester for its log (the processes that need them open them through this recipe).
            infrastructure = NatsInfrastructure(nats.url, shard=shards.default, shard_map=shards.assignments)
            runtime = RuntimeSettings(infrastructure=infrastructure, llm=llm_settings, mode=settings.mode,
                                      warnings_log=str(relay.path),
                                      memory=settings.memory, reflection=settings.reflection,
                                      reflection_policy=settings.reflection_policy,
                                      embedding_model=settings.embedding_model,
                                      embedder="minilm" if settings.llm == "local" else "endpoint",
                                      talker_max_tokens=self._talker_tokens(), thinker_max_tokens=self._thinker_tokens(),
                                      snapshot_every=settings.snapshot_every, passivate_after_s=settings.passivate_after_s,
                                      max_live_actors=settings.max_live_actors, placement=settings.placement,  # type: ignore[arg-type]  # a str setting; RuntimeSettings refuses one outside PLACEMENTS
                                      hosts=settings.hosts or default_host_count(),
                                      max_live_per_host=settings.max_live_per_host)
            self.runtime = runtime
            tenants_file = self.data_dir / "tenants.json"
            self.token = self._default_token(tenants_file)
            gateway_settings = GatewaySettings(runtime=runtime, tenants_file=str(tenants_file),
                                               max_message_bytes=settings.max_message_bytes)
            if settings.gateway_processes == 0:  # in this process, on a thread (comparisons, debugging)
                server = GatewayServer(create_app(gateway_settings), port=gateway_port).start()
                self._closers.append(server.stop)
                self.url = server.url
            else:
                self.url, self.gateways = start_gateways(
                    gateway_settings, host=LISTEN_HOST, port=gateway_port, count=settings.gateway_processes,
                )
                self._closers.append(lambda: stop_gateways(self.gateways))
            self._recorded = True
            stack_file(self.data_dir).write_text(json.dumps(
                {"url": self.url, "tenant": DEFAULT_TENANT, "token": self.token, "pid": os.getpid(),
                 "nats_url": nats.url, "nats_pid": nats.pids[0], "nats_pids": nats.pids, "nats_sync": nats.sync_interval,
                 "sim_pid": self.sim_pid, "shard": shards.default, "shard_map": shards.entries()}
            ))
            os.chmod(stack_file(self.data_dir), 0o600)
            self.supervisor = self._supervise(nats)
            self._closers.append(self.supervisor.stop)  # stops first: the parts are then stopped on purpose
        except BaseException:
            self.stop()
            raise
        return self

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
        claims.append(claim_port(LISTEN_HOST, settings.gateway_port, what="mirror gateway",
                                 fix="stop it, or give this stack another port (mirror up --port)"))
        for port in node_ports(settings.nats_port, settings.nats_cluster):
            claims.append(claim_port(LISTEN_HOST, port, what="nats-server",
                                     fix="stop it, or give this stack's NATS another port (mirror up --nats-port)"))
        return claims[0].port

    def _release_claims(self) -> None:
        while self._claims:
            self._claims.pop().release()

    def _supervise(self, nats: EmbeddedNatsCluster) -> Supervisor:
        """Watch the child processes this stack started: a dead one is started again the same way
        (a cluster's node with its name, ports and store, so it rejoins and catches up)."""
        supervisor = Supervisor()
        for index, node in enumerate(nats.nodes):
            supervisor.watch(_watched_nats("nats-server" if nats.size == 1 else f"nats-server {server_name(index)}", node))
        for index, handle in enumerate(self.gateways):
            supervisor.watch(_gateway_watch(index, handle))
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
        if settings.llm == "local":
            server = self._local_llm = LocalLLMServer(log_path=self.data_dir / "llama.log").start()
            self._closers.append(server.stop)
            return LLMSettings(base_url=server.base_url, model=server.model, structured_output=STRUCTURED_OUTPUT,
                               timeout_s=600)
        if settings.llm == "sim":
            sim = self._sim = SimProcess(latency=settings.sim_latency, log_path=self.data_dir / "sim-llm.log").start()
            self._closers.append(sim.stop)
            self.sim_pid = sim.pid
            return LLMSettings(base_url=sim.base_url, model="mirror-sim")
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


RAY_AUTH_MODE = "RAY_AUTH_MODE"
"""Ray's switch of token authentication (``token`` or ``disabled``), read from the environment."""


def enable_ray_token_auth() -> None:
    """Token authentication for the local Ray head this stack starts, said explicitly.

    Ray 2.60 enables it for a new local cluster when ``RAY_AUTH_MODE`` is unset, and then warns
    "Token authentication is enabled for this Ray cluster…" on every start: a line about Ray's
    internals that a user of ``mirror up`` can do nothing with. Setting the mode to what Ray
    would choose anyway (before ``ray.init``; Ray's workers inherit it) keeps the protection and
    drops the warning. A mode the user set is left alone. Ray reads its config once at import,
    so it is read again here, as Ray itself does when it enables the mode.
    """
    if RAY_AUTH_MODE in os.environ:
        return
    from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's compiled module; ray._private.authentication calls it after setting the mode

    os.environ[RAY_AUTH_MODE] = "token"
    Config.initialize("")


def _gateway_watch(index: int, handle: Any) -> Watched:
    """A gateway actor as the supervisor sees it: Ray restarts its process; this makes it listen again."""
    from mirror.gateway.actor import gateway_serving, serve_again

    last_pid: list[int | None] = [None]

    def alive() -> bool:
        serving, pid = gateway_serving(handle)
        last_pid[0] = pid or last_pid[0]
        return serving

    def restart() -> None:
        serve_again(handle)
        last_pid[0] = gateway_serving(handle)[1] or last_pid[0]

    return Watched(f"gateway {index}", alive, lambda: last_pid[0], restart)


def _watched_nats(name: str, node: EmbeddedNats) -> Watched:
    return Watched(name, lambda: node.running, lambda: node.pid, node.start, exit_code=lambda: node.exit_code)


def end_named_actors() -> None:
    """Kill Mirror's named actors (conversations, the directory) left in a cluster this stack joined.

    They are detached, so a cluster that outlives the stack would keep them, still pointed at
    this stack's NATS and LLM. Runs after the gateways and the ingester have stopped cleanly.
    """
    import ray

    from mirror.actors.directory import NAMESPACE

    for name in ray.util.list_named_actors():
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:
            pass  # gone already


__all__ = ["DEFAULT_TENANT", "LISTEN_HOST", "WARNINGS_LOG", "EmbeddedStack", "StackSettings", "enable_ray_token_auth", "end_named_actors",
           "log_file", "running_stack", "stack_file"]
