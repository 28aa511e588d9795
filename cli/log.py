"""``mirror log stats|read``: the event log, asked directly over NATS of the ingester that owns it.

No gateway and no token: these are the operator's view of one shard (``--shard``; ``log read``
finds the tenant's by ``--shard-map`` unless given one), for a stack whose NATS is reachable.
The client commands (``events tail``) read the same events through the HTTP API instead.
"""

from __future__ import annotations

import asyncio
import json

import typer

from mirror.cli.options import AFTER_SEQ, BRANCH, NATS_URL, SHARD_MAP
from mirror.events.ids import StreamKey

# The commands import NATS and the codec in their bodies: see app.py.
__all__ = ["log_app"]

log_app = typer.Typer(help="Read the event log through the ingester that owns it.", rich_markup_mode="markdown")

SHARD = typer.Option("0", "--shard")


@log_app.command("stats")
def log_stats(nats_url: str = NATS_URL, shard: str = SHARD) -> None:
    """Events, conversations, rejected records and consumer offsets of one shard's log."""
    from mirror.events.nats.infrastructure import NatsInfrastructure

    async def main() -> dict[str, object]:
        connections = await NatsInfrastructure(nats_url, shard=shard).connect(name="mirror-log")
        try:
            stats = await connections.log("").stats()  # every tenant is on the one shard named
        finally:
            await connections.close()
        return {"events": stats.events, "conversations": stats.conversations, "rejected": stats.rejected,
                "offsets": stats.offsets, "skipped": stats.skipped, "snapshots_discarded": stats.snapshots_discarded}

    typer.echo(json.dumps(asyncio.run(main()), indent=2))


@log_app.command("read")
def log_read(
    tenant: str,
    conversation: str,
    branch: str = BRANCH,
    after: int = AFTER_SEQ,
    limit: int = typer.Option(100, "--limit", min=1),
    nats_url: str = NATS_URL,
    shard: str = typer.Option(None, "--shard", help="Log shard (default: the tenant's by --shard-map)."),
    shard_map: list[str] = SHARD_MAP,
) -> None:
    """Print a conversation's events as JSON lines."""
    from mirror.events.codec import to_json_ready
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.events.shards import ShardMap

    key = StreamKey(tenant, conversation, branch)
    shard = shard or ShardMap.parse(shard_map).shard_of(tenant)

    async def main() -> None:
        connections = await NatsInfrastructure(nats_url, shard=shard).connect(name="mirror-log")
        try:
            for event in await connections.log(tenant).read(key, after_seq=after, limit=limit):
                typer.echo(json.dumps(to_json_ready(event), default=str))
        finally:
            await connections.close()

    asyncio.run(main())
