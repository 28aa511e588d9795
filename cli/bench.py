"""``mirror bench ingest|turns|tenants|timetravel|recompute|actors|recovery|pipeline|embed|codec|recall|storage|reflection|inspector|lifecycle|report``.

Each command builds its benchmark's frozen config from the options, runs it from
:mod:`mirror.harness.bench` (one module per benchmark) and prints its one JSON object; a
benchmark that saw failures exits with status 1, so a script can tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from mirror.cli.bench_lifecycle import bench_lifecycle
from mirror.cli.logging_setup import configure_logging
from mirror.cli.options import LLM_MODEL, MODE, QUIET_LOG_LEVEL, LogLevel, Mode, Placement, sync_interval

# The commands import their benchmark (the stack, Ray, cognition) in their bodies: see app.py.
__all__ = ["bench_app"]

bench_app = typer.Typer(help="Benchmarks that print one JSON object, measured against the raw limit of the same run.", rich_markup_mode="markdown")

JSON_ONLY = typer.Option(False, "--json", help="Print only the JSON result.")


def _print_result(result: dict[str, Any], as_json: bool) -> None:
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("ingest")
def bench_ingest(
    events: int = typer.Option(30_000, "--events", min=1, help="Events to publish in all."),
    conversations: int = typer.Option(1_000, "--conversations", min=1, help="Conversations they are spread over."),
    in_flight: int = typer.Option(512, "--in-flight", min=1, help="Publishes awaiting their ack at once."),
    shards: int = typer.Option(1, "--shards", min=1, max=16,
                               help="Shards, each an ingester process with its own file and a tenant of its own."),
    nats_url: str = typer.Option(None, "--nats-url", envvar="MIRROR_NATS_URL", help="Use this NATS instead of an embedded one."),
    nats_sync: str = typer.Option("always", "--nats-sync", callback=sync_interval,
                                  help="The embedded nats-server's sync_interval for the end-to-end run: 'always' or a duration."),
    writers: int = typer.Option(64, "--writers", min=0,
                                help="Writers awaiting each ack at once, for the sync comparison (0: skip it)."),
    writer_appends: int = typer.Option(200, "--writer-appends", min=1,
                                       help="Appends by each writer, and by the one writer timed alone."),
    relaxed_sync: str = typer.Option("2m", "--relaxed-sync", callback=sync_interval,
                                     help="The sync_interval compared with 'always' (nats-server's default: 2m)."),
    sync_servers: int = typer.Option(1, "--sync-servers", min=1, max=9,
                                     help="nats-servers for the sync comparison: 1, or a JetStream cluster of N (R3 from 3)."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Publish events from many conversations and wait until DuckDB has committed them all; then price sync always.

    Prints events, committed, events_per_s (end to end), raw_publish_per_s (pipelined JetStream
    publish of the same payloads in the same run) and their ratio, on an embedded nats-server
    with sync_interval always unless --nats-sync relaxes it (sync_interval says which);
    per_shard, each shard's events, committed, events_per_s and the messages of other shards it
    skipped. Then sync_always and sync_relaxed, each on fresh servers (one, or --sync-servers N
    as a cluster): --writers writers appending one event at a time and awaiting each ack
    (writers_per_s), one writer alone (ack_p50_ms, ack_p99_ms); and sync_always_over_relaxed,
    each figure's ratio.
    """
    from mirror.harness.bench.ingest import IngestBenchConfig, SyncCostConfig, run_ingest_bench

    configure_logging(log_level.value)
    config = IngestBenchConfig(events=events, conversations=min(conversations, events), in_flight=in_flight,
                               show_progress=not as_json, shards=shards, nats_sync=nats_sync,
                               sync=SyncCostConfig(writers=writers, appends=writer_appends, relaxed=relaxed_sync,
                                                   servers=sync_servers))
    result = run_ingest_bench(config, nats_url)
    _print_result(result, as_json)
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
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Memory on (recall on every turn) or off."),
    compare_memory: bool = typer.Option(False, "--compare-memory",
                                        help="Run twice, memory off then on, and print memory_added_p50_ms."),
    embedding_latency: float = typer.Option(0.0, "--embedding-latency-ms", min=0,
                                            help="The simulator's fixed latency for embedding calls."),
    compare_metrics: bool = typer.Option(False, "--compare-metrics",
                                         help="Run three times: Prometheus metrics off, on, then on with traces sampled "
                                              "at 1 % (to an OTLP sink); print metrics_added_p50_ms and "
                                              "metrics_and_traces_added_p50_ms."),
    placement: Placement = typer.Option("hosted", "--placement", case_sensitive=False,
                                        help="hosted: many conversations per host; dedicated: a Ray actor each."),
    stream: bool = typer.Option(False, "--stream", help="Also a streamed turn (?stream=true) beside each plain one: "
                                "time to first token, its overhead over the simulator's own first token, and the "
                                "whole turn streamed vs plain, under \"stream\"."),
    token_delay: float = typer.Option(5.0, "--token-delay-ms", min=0,
                                      help="The simulator's wait between the tokens of a streamed answer."),
    compare_limits: bool = typer.Option(False, "--compare-limits",
                                        help="Every other turn as a second tenant with all four limits set (never "
                                             "reached) and an Idempotency-Key: what they add, under \"limits\"."),
    mind: str = typer.Option("mirror", "--mind", help="mirror (the Talker) or persona (the persona cycle: overhead over "
                                                      "the path's four model calls, each step's wall time, the background steps)."),
    persona: Path = typer.Option(None, "--persona", help="With --mind persona: the persona file (default: the shipped Wren)."),
    order: str = typer.Option("appraisal_first", "--order", help="With --mind persona: appraisal_first or plan_first."),
    llm: str = typer.Option(None, "--llm", help="With --mind persona: local (the offline model) or a base URL instead "
                                                "of the bench's simulator (--llm-latency-ms then does not apply)."),
    model: str = LLM_MODEL,
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """C conversations × T turns through the HTTP gateway: Mirror's overhead over the LLM's latency."""
    from mirror.harness.bench.turns import TurnsBenchConfig, run_turns_bench

    configure_logging(log_level.value)
    if mind not in ("mirror", "persona"):
        raise typer.BadParameter(f"{mind!r} is not mirror or persona", param_hint="'--mind'")
    if mind == "persona" and stream:
        raise typer.BadParameter("--stream goes with --mind mirror", param_hint="'--stream'")
    if mind == "persona":
        from mirror.cognition.persona import EXAMPLES, read_persona
        from mirror.harness.bench.persona_turns import PersonaTurnsConfig, run_persona_turns_bench

        if order not in ("appraisal_first", "plan_first"):
            raise typer.BadParameter(f"{order!r} is not appraisal_first or plan_first", param_hint="'--order'")
        chosen = persona or EXAMPLES / "wren.json"
        read_persona(chosen)  # a bad file is one line, before anything starts
        _print_result(run_persona_turns_bench(PersonaTurnsConfig(conversations, turns, latency, chosen, order=order,
                                                                 llm=llm, llm_model=model, memory=memory)), as_json)
        return
    if persona is not None or llm is not None:
        raise typer.BadParameter("--persona and --llm go with --mind persona", param_hint="'--mind'")
    result = run_turns_bench(TurnsBenchConfig(conversations, turns, latency, mode, gateways, pause,
                                              memory=memory, compare_memory=compare_memory,
                                              embedding_latency_ms=embedding_latency, placement=placement.value,
                                              stream=stream, token_delay_ms=token_delay,
                                              compare_metrics=compare_metrics, compare_limits=compare_limits))
    _print_result(result, as_json)


@bench_app.command("tenants")
def bench_tenants(
    latency: float = typer.Option(400.0, "--llm-latency-ms", min=1, help="The simulator's fixed latency."),
    b_users: int = typer.Option(5, "--b-users", min=1, help="Tenant B's conversations, each pausing between turns."),
    b_pause: float = typer.Option(1000.0, "--b-pause-ms", min=0, help="B's mean pause before each turn (0.5–1.5 ×)."),
    a_users: int = typer.Option(64, "--a-users", min=1, help="Tenant A's conversations in a closed loop (the flood)."),
    capacity_users: int = typer.Option(None, "--capacity-users", min=1,
                                       help="Conversations of the closed loop that measures capacity (default: "
                                            "hosts × model slots × 2, as many Talker calls as the stack holds)."),
    overload: float = typer.Option(2.0, "--overload", min=1.0, help="Offered load of the overload step, × capacity."),
    phase_s: float = typer.Option(20.0, "--phase-s", min=2.0, help="Seconds of each phase with B."),
    model_slots: int = typer.Option(4, "--model-slots", min=1,
                                    help="Model calls per conversation host (mirror up's default is 16: the CPU of a "
                                         "small machine runs out first)."),
    seed: int = typer.Option(0, "--seed", help="Seed of B's pauses."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Fair share and overload: B's latency alone and beside A's flood, then load stepped to 2 × capacity.

    Prints each phase's figures and the targets beside them with pass/fail: B's p99 with A over
    alone (≤ 1.5), A's goodput over capacity minus B's (≥ 0.8), goodput at 2 × capacity (≥ 0.9 ×
    capacity), admitted p99 over unloaded (≤ 2), refusal p99 (≤ 50 ms, with Retry-After), no
    time-out. Exits 1 when a turn timed out or failed other than by a refusal.
    """
    from mirror.harness.bench.tenants import TenantsBenchConfig, run_tenants_bench

    configure_logging(log_level.value)
    result = run_tenants_bench(TenantsBenchConfig(
        llm_latency_ms=latency, b_users=b_users, b_pause_ms=b_pause, a_users=a_users, capacity_users=capacity_users,
        overload=overload, phase_s=phase_s, model_slots=model_slots, seed=seed))
    _print_result(result, as_json)
    if not as_json:
        for name, target in result["targets"].items():
            typer.echo(f"{'pass' if target['pass'] else 'MISS'}  {name}: {target['value']} (target {target['target']})",
                       err=True)
    phases = ("capacity", "b_alone", "b_with_a", "a_flood", "overload")
    if any(result[phase]["timeouts"] or result[phase]["errors"] for phase in phases):
        raise typer.Exit(1)


@bench_app.command("timetravel")
def bench_timetravel(
    events: int = typer.Option(10_000, "--events", min=200, help="Length of the conversation."),
    lookups: int = typer.Option(200, "--lookups", min=1, help="state_at calls at random positions."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """state_at at random positions of a long conversation: p50/p99 and deep (N-100) vs shallow (100)."""
    from mirror.harness.bench.timetravel import TimeTravelBenchConfig, run_timetravel_bench

    configure_logging(log_level.value)
    result = run_timetravel_bench(TimeTravelBenchConfig(events=events, lookups=lookups))
    _print_result(result, as_json)


@bench_app.command("recompute")
def bench_recompute(
    conversations: int = typer.Option(64, "--conversations", "-n", min=1, help="Conversations to re-think (N)."),
    turns: int = typer.Option(4, "--turns", "-t", min=1, help="Recorded turns per conversation."),
    latency: float = typer.Option(100.0, "--llm-latency-ms", min=1, help="The simulator's fixed latency (L)."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", min=1, help="Most model calls in flight (C)."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Recompute N conversations as Ray tasks: conversations_per_s and efficiency against C / (calls × L)."""
    from mirror.harness.bench.recompute import RecomputeBenchConfig, run_recompute_bench

    configure_logging(log_level.value)
    result = run_recompute_bench(RecomputeBenchConfig(conversations, turns, latency, concurrency))
    _print_result(result, as_json)
    if result["failed"]:
        raise typer.Exit(1)


@bench_app.command("recovery")
def bench_recovery(
    placement: Placement = typer.Option("hosted", "--placement", case_sensitive=False,
                                        help="hosted: many conversations per host; dedicated: a Ray actor each."),
    conversations: int = typer.Option(8, "--conversations", "-c", min=2, help="Conversations in a closed loop."),
    rounds: int = typer.Option(10, "--rounds", min=1, help="Conversation processes killed, one per round."),
    ingester_kills: int = typer.Option(2, "--ingester-kills", min=0, help="Times the ingester is killed afterwards."),
    pause_ms: float = typer.Option(200.0, "--pause-ms", min=0, help="Each conversation's pause between turns."),
    latency: float = typer.Option(50.0, "--llm-latency-ms", min=0, help="The simulator's fixed latency."),
    mode: Mode = MODE,
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """SIGKILL a conversation's process, then the ingester, under load: how long until each answers again.

    actor_kill: the killed conversation's next turn (next_turn_s p50/p99), split into the wait
    for a live process, the rebuild and the turn; the other conversations' turns meanwhile.
    ingester_kill: how long until reads answer again, and turn latency before and after.
    """
    from mirror.harness.bench.recovery import RecoveryBenchConfig, run_recovery_bench

    configure_logging(log_level.value)
    # Ray's driver prints "(raylet) A worker died…" on stdout for every kill this bench makes: to
    # stderr with the progress, so stdout is the JSON alone.
    with contextlib.redirect_stdout(sys.stderr):
        result = run_recovery_bench(RecoveryBenchConfig(
            placement=placement.value, conversations=conversations, rounds=rounds, ingester_kills=ingester_kills,
            pause_ms=pause_ms, llm_latency_ms=latency, mode=mode, show_progress=not as_json))
    _print_result(result, as_json)
    if result["actor_kill"]["failed"] or result["ingester_kill"]["failed"]:
        raise typer.Exit(1)


@bench_app.command("actors")
def bench_actors(
    conversations: int = typer.Option(1_000, "--conversations", "-c", min=2, help="Conversations in all."),
    placement: Placement = typer.Option("hosted", "--placement", case_sensitive=False,
                                        help="hosted: many conversations per host; dedicated: a Ray actor each."),
    hosts: int = typer.Option(0, "--hosts", min=0, help="Conversation hosts (hosted); 0: one per CPU."),
    max_live_per_host: int = typer.Option(32, "--max-live-per-host", min=1,
                                          help="The live cap per host (hosted): small, so the measured ones are crowded out."),
    max_live: int = typer.Option(64, "--max-live-actors", min=1, help="The live-actor cap per node (dedicated)."),
    long_conversations: int = typer.Option(16, "--long", min=1, help="Conversations seeded with the long history."),
    short_events: int = typer.Option(10, "--short-events", min=1, help="Events of a short history."),
    long_events: int = typer.Option(10_000, "--long-events", min=1, help="Events of a long history."),
    samples: int = typer.Option(16, "--samples", min=1, help="Re-activations measured per history length, and new activations."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Turns in flight while activating them all."),
    latency: float = typer.Option(20.0, "--llm-latency-ms", min=0, help="The simulator's fixed latency."),
    hold: int = typer.Option(0, "--hold", min=0,
                             help="Instead: activate this many new conversations (hosted, none passivated) and "
                                  "report the hosts' memory; -c, --long… are then unused."),
    mode: Mode = MODE,
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Memory on (recall on every turn) or off."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Conversations under a live cap: every turn answered, new and re-activation cost by history length.

    With --hold N: N conversations live at once on this node; the hosts' RSS in all and per
    conversation, activations/s, within_4gb. A progress line goes to stderr unless --json.
    """
    configure_logging(log_level.value)
    if hold:
        from mirror.harness.bench.live_hold import HoldBenchConfig, run_hold_bench

        held = run_hold_bench(HoldBenchConfig(
            conversations=hold, hosts=hosts, concurrency=concurrency, llm_latency_ms=latency, mode=mode,
            memory=memory, show_progress=not as_json))
        _print_result(held, as_json)
        if held["errors"] or not held["all_live"]:
            raise typer.Exit(1)
        return
    from mirror.harness.bench.live_actors import ActorsBenchConfig, run_actors_bench

    config = ActorsBenchConfig(
        conversations=conversations, placement=placement.value, hosts=hosts, max_live_per_host=max_live_per_host,
        max_live_actors=max_live, long_conversations=long_conversations,
        short_events=short_events, long_events=long_events, samples=samples, concurrency=concurrency,
        llm_latency_ms=latency, mode=mode, memory=memory, show_progress=not as_json,
    )
    result = run_actors_bench(config)
    _print_result(result, as_json)
    if result["errors"]:
        raise typer.Exit(1)


@bench_app.command("pipeline")
def bench_pipeline(
    llm: str = typer.Option("local", "--llm", envvar="MIRROR_LLM_URL",
                            help="'local' (offline Gemma 3 270M, needs the \\[local] extra), 'sim', or an OpenAI-compatible base URL."),
    model: str = LLM_MODEL,
    mode: Mode = MODE,
    turns: int = typer.Option(3, "--turns", min=1, help="Turns of the scripted conversation."),
    prompts: Path = typer.Option(None, "--prompts", help="Prompt-set directory (default: the built-in set)."),
    sim_latency: str = typer.Option("fixed:0", "--sim-latency", help="Simulator latency with --llm sim."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Wall time of the Talker, the Inner Monologue and the Cognitive Controller, per turn.

    The API key of a URL endpoint is read from MIRROR_LLM_API_KEY and never printed or stored.
    """
    from mirror.cognition.prompts import default_prompt_set, load_prompt_set
    from mirror.harness.bench.pipeline import PipelineBenchConfig, llm_endpoint, run_pipeline_bench
    from mirror.stack.local_model import LOCAL_TALKER_MAX_TOKENS, LOCAL_THINKER_MAX_TOKENS

    configure_logging(log_level.value)
    prompt_set = load_prompt_set(prompts) if prompts else default_prompt_set()
    with llm_endpoint(llm, sim_latency) as (base_url, endpoint_model, structured_output):
        config = PipelineBenchConfig(
            base_url=base_url, model=model or endpoint_model or "default", mode=mode, turns=turns,
            api_key=os.environ.get("MIRROR_LLM_API_KEY"), structured_output=structured_output,
            talker_max_tokens=LOCAL_TALKER_MAX_TOKENS if llm == "local" else 1024,
            thinker_max_tokens=LOCAL_THINKER_MAX_TOKENS if llm == "local" else 3000,
        )
        result = asyncio.run(run_pipeline_bench(config, prompt_set))
    _print_result(result, as_json)


@bench_app.command("embed")
def bench_embed(
    texts: int = typer.Option(64, "--texts", min=1, help="Memory-like sentences to embed (12-20 words each)."),
    batch: int = typer.Option(32, "--batch", min=1, help="Batch size of the batched pass."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Passes over the sentences."),
    blas_threads: int = typer.Option(1, "--blas-threads", min=1, help="BLAS threads while the encoder runs."),
    as_json: bool = JSON_ONLY,
) -> None:
    """Time the offline embedder (all-MiniLM-L6-v2 in numpy, the [local] extra) on this machine.

    Prints single-sentence p50/p99 ms and sentences/s at batch 1 and at --batch, with CPU ms per
    sentence and the load average (two shared cores: wall time is what a caller waits).
    """
    from mirror.cognition.errors import EmbedderNotInstalled
    from mirror.harness.bench.embed import default_texts, run_embed_bench

    try:
        result = run_embed_bench(default_texts(texts), batch=batch, repeats=repeats, blas_threads=blas_threads)
    except EmbedderNotInstalled as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    _print_result(result, as_json)


@bench_app.command("codec")
def bench_codec(
    events: int = typer.Option(200, "--events", min=1, help="Events of each kind (turn, vector, large)."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Passes over them; the fastest is reported."),
    logs: list[Path] = typer.Option([], "--log", exists=True, dir_okay=False,
                                    help="Also a stored log: a msgpack array of records, as tests/golden holds (repeatable)."),
    as_json: bool = JSON_ONLY,
) -> None:
    """The event codec against msgspec on the same events: µs an event to encode and to decode (validated).

    Prints, per kind (a turn with its provenance, events with a 384-dimension vector, 16 KB
    payloads, each --log), mean bytes, encode and decode µs an event for both, whether msgspec
    writes the same bytes and reads the same events, and which of the codec's rules for bad
    input msgspec keeps (msgspec_semantics). Needs msgspec (the test extra).
    """
    try:
        import msgspec  # noqa: F401

        from mirror.harness.bench.codec import run_codec_bench
    except ImportError:
        typer.echo("error: the codec bench compares with msgspec: pip install msgspec (or the test extra)", err=True)
        raise typer.Exit(2) from None
    import msgpack

    from mirror.events.errors import CodecError

    stored = []
    for path in logs:
        try:
            records = msgpack.unpackb(path.read_bytes(), raw=False)
        except (ValueError, msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError) as exc:
            typer.echo(f"error: {path} is not a msgpack array of records: {exc}", err=True)
            raise typer.Exit(2) from None
        if type(records) is not list or not records or not all(type(record) is bytes for record in records):
            typer.echo(f"error: {path} is not a non-empty msgpack array of records (each a bytes value)", err=True)
            raise typer.Exit(2)
        stored.append(records)
    try:
        result = run_codec_bench(events, repeats, stored)
    except CodecError as exc:
        typer.echo(f"error: a record of a --log does not decode: {exc}", err=True)
        raise typer.Exit(2) from None
    _print_result(result, as_json)
    if not all(kind["same_events"] for kind in result["kinds"].values()):
        raise typer.Exit(1)


@bench_app.command("recall")
def bench_recall(
    beliefs: int = typer.Option(10_000, "--beliefs", min=100, help="Beliefs in the conversation's memory."),
    edges: int = typer.Option(5_000, "--edges", min=0, help="Causal edges in it."),
    queries: int = typer.Option(200, "--queries", min=1, help="Recall queries per round."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Rounds over the query mix."),
    seed: int = typer.Option(7, "--seed", help="Seed of the generated memory and queries."),
    as_json: bool = JSON_ONLY,
) -> None:
    """Recall (BM25 + vector, fused, decay-scored, plus the 2-hop edge walk) over one large memory.

    Prints p50_ms and p99_ms at --beliefs, the same query mix at 100 beliefs, their ratio
    (ratio_10k_vs_100) and the index build time.
    """
    from mirror.harness.bench.recall import run_recall_bench

    _print_result(run_recall_bench(beliefs=beliefs, edges=edges, queries=queries, seed=seed, rounds=rounds), as_json)


@bench_app.command("storage")
def bench_storage(
    turns: int = typer.Option(20, "--turns", "-t", min=1, help="Turns of the scripted conversation."),
    embedding_dim: int = typer.Option(384, "--embedding-dim", min=1, help="The simulator's vector size (384: MiniLM's)."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Bytes a turn costs in the DuckDB log, one conversation with memory off and one with it on.

    Both run in full mode through the real conversation, the ingester process and the simulator;
    prints per run the events by type, bytes per turn (in all and by type), model output per
    turn, the vectors' share and the file size per turn. Exits 1 if thinking or the log lagged.
    """
    from mirror.harness.bench.storage import StorageBenchConfig, run_storage_bench

    configure_logging(log_level.value)
    result = run_storage_bench(StorageBenchConfig(turns=turns, embedding_dim=embedding_dim))
    _print_result(result, as_json)
    runs = (result["memory_off"], result["memory_on"])
    if any(run["thinking_unfinished"] or not run["log_caught_up"] for run in runs):
        raise typer.Exit(1)


@bench_app.command("reflection")
def bench_reflection(
    turns: int = typer.Option(1_000, "--turns", "-t", min=1, help="Turns of the one conversation (after a warm-up turn)."),
    latency: float = typer.Option(100.0, "--llm-latency-ms", min=0, help="The simulator's fixed latency."),
    pause: float = typer.Option(800.0, "--pause-ms", min=0,
                                help="The user's mean pause before each turn (0.5–1.5 × this, seeded)."),
    wait_for_thinking: bool = typer.Option(False, "--wait-for-thinking",
                                           help="Wait until each turn is thought through before the pause."),
    max_per_hour: int = typer.Option(1_000, "--max-per-hour", min=1,
                                     help="The policy's hourly cap for this run: the run squeezes hours into "
                                          "minutes (the default policy's 6 would stop it at 6 reflections)."),
    compare: bool = typer.Option(True, "--compare/--no-compare",
                                 help="Also run the same script with reflection off, on a fresh stack, and compare."),
    seed: int = typer.Option(0, "--seed", help="Seeds the scripted user and the pauses."),
    mode: Mode = MODE,
    placement: Placement = typer.Option("hosted", "--placement", case_sensitive=False,
                                        help="hosted: many conversations per host; dedicated: a Ray actor each."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="A progress bar on stderr."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """One long conversation with memory and reflection on, then off: what reflection costs per turn.

    Prints reflections, rejected, warnings, overruled, the thinking backlog at the end, CPU ms
    per turn on and off (cpu_added_share, target ≤ 0.20) and turn latency p50/p90 on and off
    (latency_added_p50_ms, target ≤ 2 ms), with each run's figures. Exits 1 if a run's thinking
    did not drain.
    """
    from mirror.harness.bench.reflection import ReflectionBenchConfig, run_reflection_bench

    configure_logging(log_level.value)
    config = ReflectionBenchConfig(turns=turns, llm_latency_ms=latency, pause_ms=pause, wait_for_thinking=wait_for_thinking,
                                   mode=mode, seed=seed, max_per_hour=max_per_hour, compare=compare,
                                   placement=placement.value, show_progress=progress)
    with contextlib.redirect_stdout(sys.stderr):  # Ray's driver may print on stdout: stdout is the JSON alone
        result = run_reflection_bench(config)
    _print_result(result, as_json)
    runs = [result[name] for name in ("reflection_on", "reflection_off") if name in result]
    if not all(run["drained"] for run in runs):
        raise typer.Exit(1)


@bench_app.command("inspector")
def bench_inspector(
    turns: int = typer.Option(200, "--turns", "-t", min=2, help="Turns of the one conversation (each ?sync=true)."),
    repeat: int = typer.Option(20, "--repeat", "-r", min=1, help="Times each of the page's actions is measured."),
    seed: int = typer.Option(7, "--seed", help="Seeds the scripted user and the seqs looked at."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="A progress bar on stderr."),
    as_json: bool = JSON_ONLY,
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """What the inspector page asks when a person opens a long conversation and looks around.

    One conversation of --turns turns (memory and reflection on, the simulator), then the page's
    requests, each action --repeat times: open (the list, every event paged, the last state and
    the previous narrative's and portrait's), step (a timeline move), why_reply, why_belief (the
    most recalled belief), compare (two states and their diff): p50/p95 ms and bytes, requests;
    against healthz_p50_ms (one HTTP round trip) and open_floor_ms (open's requests × that).
    """
    from mirror.harness.bench.inspector import InspectorBenchConfig, run_inspector_bench

    configure_logging(log_level.value)
    config = InspectorBenchConfig(turns=turns, repeat=repeat, seed=seed, show_progress=progress)
    with contextlib.redirect_stdout(sys.stderr):  # Ray's driver may print on stdout: stdout is the JSON alone
        result = run_inspector_bench(config)
    _print_result(result, as_json)


bench_app.command("lifecycle")(bench_lifecycle)


@bench_app.command("report")
def bench_report(
    only: list[str] = typer.Option(None, "--only", help="Re-run only this quick bench (repeatable); the other "
                                                        "benches' rows stay as the doc has them."),
    dry_run: bool = typer.Option(False, "--dry-run", "--print", help="Print the section; do not write the doc."),
    doc: Path = typer.Option(Path("docs/benchmarks.md"), "--doc", help="The doc whose generated section is rewritten."),
) -> None:
    """Re-run the quick benches and rewrite the generated table of docs/benchmarks.md from their JSON.

    Quick: timetravel, recall, pipeline (the simulator), embed (skipped without the [local]
    extra), storage, ingest and turns, at small sizes (each well under two minutes); each runs as
    its own `mirror bench NAME ... --json`. The section between the bench-report markers gets
    the date, the machine (cores, memory, CPU, load average), the command and, per headline
    figure, the value as printed, the raw limit of the same run and the target.
    """
    from mirror.harness.bench import report

    names = [bench.name for bench in report.QUICK]
    unknown = [name for name in only or () if name not in names]
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)} is not a quick bench: {', '.join(names)}", param_hint="'--only'")
    text = None if dry_run else _doc_text(doc)
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    for bench in report.QUICK:
        if only and bench.name not in only:
            continue
        typer.echo(f"running `{bench.command}`", err=True)
        try:
            results[bench.name] = report.run_bench(bench)
        except report.ReportError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    command = " ".join(["mirror bench report", *(f"--only {name}" for name in only or ())])
    run = report.Run(report.today(), command, report.machine_now(load_before), results)
    section = report.render_section(run, report.current_section(text or ""))
    typer.echo(section)
    if text is not None:
        doc.write_text(report.replace_section(text, section))
        typer.echo(f"wrote {doc}", err=True)


def _doc_text(doc: Path) -> str:
    """The doc's text, checked for its markers before any bench runs (a bad path changes nothing)."""
    from mirror.harness.bench import report

    try:
        text = doc.read_text()
        report.replace_section(text, "")
    except (OSError, report.ReportError) as exc:
        raise typer.BadParameter(str(exc), param_hint="'--doc'") from None
    return text
