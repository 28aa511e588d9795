"""``mirror chaos``: conversations over HTTP while the stack's processes are killed, then the log checked.

The run itself lives in :mod:`mirror.harness.chaos`; this is its edge: options, validation
before anything starts (an unknown ``--kill`` kind is exit status 2), a progress bar, the report,
and exit status 1 when an acknowledged turn was lost, duplicated, misplaced or left a gap, a
narrative was replaced by a failure, or a conversation no longer answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from mirror.cli.logging_setup import configure_logging
from mirror.cli.options import DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, QUIET_LOG_LEVEL, LogLevel

__all__ = ["chaos"]


def chaos(
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    conversations: int = typer.Option(6, "--conversations", "-c", min=1, help="Conversations driven at once (N)."),
    turns: int = typer.Option(8, "--turns", "-t", min=1, help="Turns per conversation (T), each sent when the last is answered."),
    kill: str = typer.Option("", "--kill", help="Kinds to kill -9 in turn, comma-separated: nats, ingester, actor, gateway "
                                                "(only the local stack's processes; none: drive and check only)."),
    every: float = typer.Option(3.0, "--every", min=0.1, help="Seconds between kills (S); the first comes S seconds in."),
    pause: float = typer.Option(None, "--pause", min=0, show_default="auto",
                                help="Seconds each conversation pauses before a turn; auto: its T turns are spread over "
                                     "a whole round of kills plus one interval, so every kind dies while turns are sent "
                                     "(0 without --kill)."),
    data: Path = DATA_DIR,
    seed: int = typer.Option(0, "--seed", help="Chooses which process of a kind dies when there are several."),
    timeout: float = typer.Option(600.0, "--timeout", min=1, help="Seconds the drive may take; turns not acknowledged by then are counted."),
    request_timeout: float = typer.Option(30.0, "--request-timeout", min=0.1, help="Seconds one request may take."),
    catch_up: float = typer.Option(60.0, "--catch-up", min=1,
                                   help="Seconds the check waits for the last answers and for the log to hold every acknowledged turn."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON report."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Drive N conversations × T turns over HTTP, kill a process every S seconds, then check every conversation.

    Checks that every acknowledged turn is in the log exactly once at its seq, seqs are gapless,
    no narrative was replaced by a failure, and every conversation answers one more turn. Prints
    turns acknowledged, lost, duplicated, gaps, errors by kind, recovery times (p50/p99) and the
    peak number of the stack's processes. Kills only a stack of this machine recorded in --data
    (by `mirror up`) that serves --url; against any other URL it drives and checks only.
    """
    from mirror.cli.gateway_client import find_stack
    from mirror.harness.chaos import ChaosSettings, parse_kill_kinds, run_chaos

    kinds = parse_kill_kinds(kill)  # first: a bad option starts nothing
    configure_logging(log_level.value)
    target = find_stack(data, url, token)
    settings = ChaosSettings(url=target.url, token=target.token, conversations=conversations, turns=turns, kill=kinds,
                             every_s=every, pause_s=pause, data_dir=data, seed=seed, timeout_s=timeout,
                             request_timeout_s=request_timeout, catch_up_s=catch_up)
    if as_json:
        report = run_chaos(settings)
        typer.echo(json.dumps(report))
    else:
        report = _with_progress(settings, run_chaos)
        _print_summary(report)
    if not report["ok"]:
        raise typer.Exit(1)


def _with_progress(settings: Any, run: Any) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("turns acknowledged"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("turns", total=settings.conversations * settings.turns)
        return run(settings, lambda ack: progress.advance(task))


def _print_summary(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"mirror chaos: {'ok' if report['ok'] else 'FAILED'} ({report['killer']})")
    table.add_column("figure")
    table.add_column("value", overflow="fold")
    for name in ("turns_acknowledged", "turns_unacknowledged", "turns_unverified", "lost", "misplaced", "duplicated", "gaps",
                 "doubled_seqs", "failure_narratives", "thinker_failed_events", "unacknowledged_logged",
                 "conversations_answering", "conversations_not_answering", "conversations_unchecked", "errors", "errors_by_kind", "errors_by_detail",
                 "kills_by_kind", "kills_skipped", "recovery_s", "all_recovered_s", "peak_processes", "duration_s"):
        value = report[name]
        table.add_row(name, json.dumps(value) if isinstance(value, dict | list) else str(value))
    console = Console()
    console.print(table)
    for kill in report["kills"]:
        console.print(f"  {kill['at_s']:>7.2f} s  kill -9 {kill['kind']:<8} pid {kill['pid']}  "
                      f"recovery {kill.get('recovery_s')} s, all {kill.get('all_recovered_s')} s  "
                      f"errors {kill.get('errors', {})}", highlight=False)
