"""The commands of the README and docs/cli.md, run as a user would (real processes, real broker)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
import typer.core
import typer.main

from mirror.cli.app import app
from mirror.events.bus import Head
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from mirror.stack.processes import IngesterProcess
from tests.support.stack import reset_stream


def mirror(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirror", *args], capture_output=True, text=True, timeout=timeout
    )


def listed_commands(help_text: str) -> list[str]:
    """The names in the ``Commands`` panel of a Typer ``--help``, in order."""
    names, inside = [], False
    for line in help_text.splitlines():
        if "─ Commands ─" in line:
            inside = True
        elif inside and line.startswith("╰"):
            inside = False
        elif inside and (match := re.match(r"│ (\S+) ", line)):
            names.append(match.group(1))
    return names


def visible(group: typer.core.TyperGroup) -> dict[str, typer.core.TyperCommand | typer.core.TyperGroup]:
    # Typer builds only these two; Group.commands is typed with click's base Command.
    return {name: cast("typer.core.TyperCommand | typer.core.TyperGroup", command)
            for name, command in group.commands.items() if not command.hidden}


def test_help_lists_every_command_and_every_group_its_subcommands() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    result = mirror("--help")
    assert result.returncode == 0, result.stderr
    assert listed_commands(result.stdout) == list(visible(root))
    groups = {name: command for name, command in visible(root).items() if isinstance(command, typer.core.TyperGroup)}
    assert sorted(groups) == ["bench", "eval", "events", "log", "memory", "persona", "prompts", "replay", "tenants"]
    for name, group in groups.items():
        result = mirror(name, "--help")
        assert result.returncode == 0, result.stderr
        assert listed_commands(result.stdout) == list(visible(group)), name
        assert visible(group), f"{name} has no commands"


@pytest.mark.long  # two stacks, a bench smoke run of 10-30 s: .ci/run runs it with -m long
def test_bench_actors_smoke_hosted_crowded_out_and_held() -> None:
    """Tiny numbers: the measured conversations are crowded out of a cap of 2 per host and come
    back from their snapshot; then ``--hold`` keeps a few live and reads the hosts' memory."""
    result = mirror("bench", "actors", "--json", "-c", "12", "--long", "2", "--samples", "2",
                    "--long-events", "60", "--max-live-per-host", "2", "--llm-latency-ms", "5", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout)
    assert figures["errors"] == 0 and figures["placement"] == "hosted" and figures["evictions"] > 0
    assert figures["from_snapshot_10"] == figures["from_snapshot_60"] == 2
    assert figures["activate_new_p50_ms"] is not None and len(figures["rss_mb_per_host"]) == figures["hosts"]
    held = mirror("bench", "actors", "--json", "--hold", "20", "--llm-latency-ms", "5", timeout=300)
    assert held.returncode == 0, held.stdout + held.stderr
    figures = json.loads(held.stdout)
    assert figures["errors"] == 0 and figures["all_live"] and figures["within_4gb"]


def test_bench_ingest_commits_everything_and_prints_the_figures() -> None:
    # 1,200 events: at sync always one nats-server here takes ~1-2k acknowledged publishes/s
    result = mirror("bench", "ingest", "--json", "--events", "1200", "--conversations", "60",
                    "--writers", "4", "--writer-appends", "20", "--relaxed-sync", "1m")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["events"] == figures["committed"] == 1200
    assert figures["conflicts"] == 0 and figures["sync_interval"] == "always"
    assert figures["raw_publish_per_s"] > 0 and figures["events_per_s"] > 0
    assert abs(figures["ratio"] - figures["events_per_s"] / figures["raw_publish_per_s"]) < 0.01
    always, relaxed = figures["sync_always"], figures["sync_relaxed"]
    assert (always["sync_interval"], relaxed["sync_interval"]) == ("always", "1m")
    assert always["servers"] == relaxed["servers"] == 1
    assert always["writers"] == relaxed["writers"] == 4 and always["appends"] == relaxed["appends"] == 80
    assert all(side[figure] > 0 for side in (always, relaxed) for figure in ("writers_per_s", "ack_p50_ms"))
    ratio = figures["sync_always_over_relaxed"]
    assert abs(ratio["writers_per_s"] - always["writers_per_s"] / relaxed["writers_per_s"]) < 0.01


def test_bench_ingest_with_two_shards_prints_each_shards_rate() -> None:
    result = mirror("bench", "ingest", "--json", "--events", "1200", "--conversations", "60", "--shards", "2",
                    "--writers", "0")  # no sync comparison
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["shards"] == 2 and sorted(figures["per_shard"]) == ["0", "1"]
    first, second = figures["per_shard"]["0"], figures["per_shard"]["1"]
    assert first["events"] == first["committed"] == second["events"] == second["committed"] == 600
    assert first["skipped"] == 600 and second["skipped"] == 0  # shard 0 passes over shard 1's tenant
    assert first["events_per_s"] > 0 and second["events_per_s"] > 0
    assert figures["committed"] == 1200 and figures["raw_publish_per_s"] > 0
    assert "sync_always" not in figures


def test_a_bad_shard_map_is_one_clear_line_and_status_2(nats_server: EmbeddedNats) -> None:
    result = mirror("log", "read", "acme", "c1", "--nats-url", nats_server.url,
                    "--shard-map", "1=acme", "--shard-map", "2=globex,acme")
    assert result.returncode == 2
    assert "tenant 'acme' is on two shards, '1' and '2'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_identifier_is_one_clear_line_and_status_2(nats_server: EmbeddedNats) -> None:
    result = mirror("log", "read", "bad.tenant", "c1", "--nats-url", nats_server.url)
    assert result.returncode == 2
    assert "invalid tenant 'bad.tenant'" in result.stderr
    assert "Traceback" not in result.stderr


def test_log_commands_without_an_ingester_say_so(nats_server: EmbeddedNats) -> None:
    result = mirror("log", "stats", "--nats-url", nats_server.url, "--shard", "nobody")
    assert result.returncode == 2
    assert "no ingester serves shard 'nobody'" in result.stderr


def test_log_commands_read_through_the_ingester(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    asyncio.run(reset_stream(nats_server.url))  # the stream holds this test's event alone
    ingester = IngesterProcess(nats_server.url, tmp_path / "log.duckdb", shard="cli").start()
    try:
        key = StreamKey("cli-tenant", "chat")

        async def write() -> None:
            bus = await JetStreamBus.connect(nats_server.url)
            head = await bus.append(key, [make_event(key, 1, Turn("hello", "hi there"))], Head(0, 0))
            assert await LogClient(bus.nc, shard="cli").wait_committed(head.fence, timeout=30)
            await bus.close()

        asyncio.run(write())
        read = mirror("log", "read", "cli-tenant", "chat", "--nats-url", nats_server.url, "--shard", "cli")
        assert read.returncode == 0, read.stderr
        (line,) = read.stdout.splitlines()
        event = json.loads(line)
        assert event["type"] == "turn" and event["payload"]["reply"] == "hi there" and event["seq"] == 1
        stats = json.loads(mirror("log", "stats", "--nats-url", nats_server.url, "--shard", "cli").stdout)
        assert (stats["events"], stats["conversations"], stats["rejected"]) == (1, 1, 0)
    finally:
        ingester.stop()


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_bench_turns_mind_persona_prints_overhead_steps_and_background() -> None:
    result = mirror("bench", "turns", "--mind", "persona", "-c", "2", "-t", "2", "--llm-latency-ms", "5", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert figures["mind"] == "persona" and figures["persona"] == "Wren Halloway" and figures["turns"] == 4
    assert figures["path_model_p50_ms"] >= 4 * 5  # the path's four model calls, each at least L
    assert figures["latency_p50_ms"] > figures["path_model_p50_ms"] and figures["overhead_p50_ms"] > 0
    assert set(figures["steps_p50_ms"]) == {"think", "retrieval", "appraisal", "plan", "formulation"}
    assert all(value >= 5 for step, value in figures["steps_p50_ms"].items() if step != "retrieval")
    assert all(value >= 5 for value in figures["background_model_p50_ms"].values())
    assert figures["background_wall_p50_ms"] > 4 * 5 and figures["background_failures"] == 0
    refused = mirror("bench", "turns", "--persona", "x.json", "--json")
    assert refused.returncode == 2 and "--mind persona" in refused.stderr


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_bench_turns_stream_prints_first_token_and_streamed_beside_plain() -> None:
    result = mirror("bench", "turns", "--stream", "-c", "2", "-t", "2", "--llm-latency-ms", "20",
                    "--token-delay-ms", "2", "--no-memory", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    stream = figures["stream"]
    assert figures["turns"] == 4 and stream["turns"] == 4 and stream["token_delay_ms"] == 2
    assert stream["model_samples"] >= 20 and 20 <= stream["model_first_token_p50_ms"] < stream["model_call_p50_ms"]
    # The first token comes before the whole turn, and after the model's own first token.
    assert stream["model_first_token_p50_ms"] < stream["first_token_p50_ms"] < stream["latency_p50_ms"]
    assert stream["first_token_overhead_p50_ms"] > 0 and stream["first_token_overhead_p99_ms"] >= stream["first_token_overhead_p50_ms"]
    assert stream["llm_call_p50_ms"] > figures["llm_call_p50_ms"]  # a streamed call waits between its tokens
    assert stream["plain_overhead_p50_ms"] == figures["overhead_p50_ms"]
    refused = mirror("bench", "turns", "--mind", "persona", "--stream", "--json")
    assert refused.returncode == 2 and "--mind mirror" in refused.stderr
