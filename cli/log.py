"""``mirror log stats|read``: the event log, asked directly over NATS of the ingester that owns it.

No gateway and no token: these are the operator's view of one shard, for a stack whose NATS is
reachable. Like ``replay verify`` they find the stack running for ``--data`` (its NATS URL, its
default shard and shard map, from ``<data>/stack.json``); ``--nats-url``, ``--shard`` and
``--shard-map`` win over what it says. ``log read`` finds the tenant's shard by the shard map
unless given one. The client commands (``events tail``) read the same events through the HTTP
API instead.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import typer

from mirror.cli.errors import NoStackRunning
from mirror.cli.options import AFTER_SEQ, BRANCH, CONVERSATION, DATA_DIR, SHARD_MAP, TENANT
from mirror.events.ids import StreamKey

# The commands import NATS and the codec in their bodies: see app.py.
__all__ = ["LogOwner", "log_app", "log_owner"]

log_app = typer.Typer(help="Read the event log through the ingester that owns it.", rich_markup_mode="markdown")

NATS_URL = typer.Option(None, "--nats-url", envvar="MIRROR_NATS_URL",
                        help="NATS of the log's owner (default: the stack found in --data).")


@dataclass(frozen=True)
class LogOwner:
    """Where a shard's log is asked: NATS, the default shard and the shard map to use."""

    nats_url: str
    default_shard: str
    shard_map: list[str]


def log_owner(data: Path, nats_url: str | None, shard_map: list[str]) -> LogOwner:
    """The options given, else what the stack running for ``data`` recorded (as ``replay verify`` finds it)."""
    from mirror.events.shards import DEFAULT_SHARD
    from mirror.stack.embedded import running_stack

    running = running_stack(data) or {}
    nats_url = nats_url or running.get("nats_url")
    if not nats_url:
        raise NoStackRunning(data, instead="pass --nats-url")
    return LogOwner(nats_url, running.get("shard", DEFAULT_SHARD), shard_map or running.get("shard_map", []))


@log_app.command("stats")
def log_stats(
    nats_url: str = NATS_URL,
    shard: str = typer.Option(None, "--shard", help="Log shard (default: the stack's default shard, else 0)."),
    data: Path = DATA_DIR,
) -> None:
    """Events, conversations, rejected records and consumer offsets of one shard's log.

    ``stream_regressions`` counts the times its ingester found the stream older than the log
    (a broker's disk restored or lost) or made anew, and re-read it; ``last_stream_regression``
    says when and what. Both are 0/null on a healthy deployment."""
    from mirror.events.nats.infrastructure import NatsInfrastructure

    owner = log_owner(data, nats_url, [])
    nats_url, shard = owner.nats_url, shard or owner.default_shard

    async def main() -> dict[str, object]:
        connections = await NatsInfrastructure(nats_url, shard=shard).connect(name="mirror-log")
        try:
            stats = await connections.log("").stats()  # every tenant is on the one shard named
        finally:
            await connections.close()
        return {"shard": shard, "events": stats.events, "conversations": stats.conversations, "rejected": stats.rejected,
                "offsets": stats.offsets, "skipped": stats.skipped, "snapshots_discarded": stats.snapshots_discarded,
                "stream_regressions": stats.stream_regressions, "last_stream_regression": stats.last_stream_regression}

    typer.echo(json.dumps(asyncio.run(main()), indent=2))


@log_app.command("read")
def log_read(
    tenant: str = TENANT,
    conversation: str = CONVERSATION,
    branch: str = BRANCH,
    after: int = AFTER_SEQ,
    limit: int = typer.Option(100, "--limit", min=1),
    nats_url: str = NATS_URL,
    shard: str = typer.Option(None, "--shard", help="Log shard (default: the tenant's by the shard map)."),
    shard_map: list[str] = SHARD_MAP,
    data: Path = DATA_DIR,
) -> None:
    """Print a conversation's events as JSON lines."""
    from mirror.events.codec import to_json_ready
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.events.shards import ShardMap

    key = StreamKey(tenant, conversation, branch)
    owner = log_owner(data, nats_url, shard_map)
    nats_url = owner.nats_url
    shard = shard or ShardMap.parse(owner.shard_map, default=owner.default_shard).shard_of(tenant)

    async def main() -> None:
        connections = await NatsInfrastructure(nats_url, shard=shard).connect(name="mirror-log")
        try:
            for event in await connections.log(tenant).read(key, after_seq=after, limit=limit):
                typer.echo(json.dumps(to_json_ready(event), default=str))
        finally:
            await connections.close()

    asyncio.run(main())
