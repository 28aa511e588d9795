"""``mirror bench lifecycle``: erase time per 1,000 events and export/import throughput (its own
module: :mod:`mirror.cli.bench` is near the size a module should stay under)."""

from __future__ import annotations

import json

import typer

from mirror.cli.logging_setup import configure_logging
from mirror.cli.options import QUIET_LOG_LEVEL, LogLevel

__all__ = ["bench_lifecycle"]


def bench_lifecycle(
    conversation_events: int = typer.Option(1_000, "--conversation-events", min=1,
                                            help="Events of each conversation (the one forgotten, and each of the tenant's)."),
    tenant_conversations: int = typer.Option(10, "--tenant-conversations", min=1,
                                             help="Conversations of the tenant exported, imported and forgotten."),
    background_events: int = typer.Option(20_000, "--background-events", min=0,
                                          help="Events of another tenant that stay: the rest of the file a forget copies."),
    as_json: bool = typer.Option(False, "--json", help="Print only the JSON result."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Export, import and erase on a real nats-server and ingester (their defaults), as the gateway asks them.

    Prints export and import (events, bytes, events_per_s, mb_per_s of archive), erase_conversation
    and erase_tenant (s, s_per_1000_events, over_raw_copy), fresh_copies (one per sweep: the
    tenant's conversations share one), batching (five forgets one at a time against five asked at
    once: seconds and copies) and raw_fresh_copy: DuckDB copying a file of the same size into a
    fresh one in the same run, the step no erasure of the log can avoid."""
    from mirror.harness.bench.lifecycle import LifecycleBenchConfig, run_lifecycle_bench

    configure_logging(log_level.value)
    result = run_lifecycle_bench(LifecycleBenchConfig(conversation_events=conversation_events,
                                                      tenant_conversations=tenant_conversations,
                                                      background_events=background_events))
    typer.echo(json.dumps(result, indent=None if as_json else 2))
