"""``mirror tenants [list]|add|revoke|limits|retention|remove``: a data directory's tenants, their
bearer tokens, limits and retention policies.

``remove`` forgets a whole tenant through a running stack's API (an admin token); the others edit
``<data>/tenants.json`` directly (hashes only, each tenant's limits and retention), which a running
gateway (limits) and each shard's ingester (retention, at its next round) re-read, so they work with or
without a stack up. ``list`` also shows each
limited tenant's current use, read from the shared counters on the broker of the stack running
for ``--data`` (the same counts every gateway enforces), or says that no stack runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mirror.cli.forget import waited
from mirror.cli.options import DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, TENANT, gateway_client

if TYPE_CHECKING:
    from mirror.gateway.limits import Usage
    from mirror.gateway.tenants import TenantLimits

# The commands import the registry in their bodies (~10 ms that `mirror --help` need not pay): see app.py.
__all__ = ["tenants_app"]

tenants_app = typer.Typer(help="Tenants, their bearer tokens (stored hashed), limits and retention.",
                          rich_markup_mode="markdown", invoke_without_command=True)

USE_TIMEOUT_S = 3.0
"""How long `list` waits for the stack's broker before it shows the limits without their use."""


@tenants_app.callback()
def tenants_default(context: typer.Context, data: Path = DATA_DIR) -> None:
    """Without a command: `list`."""
    if context.invoked_subcommand is None:
        tenants_list(data)


@tenants_app.command("add")
def tenants_add(tenant: str = TENANT, data: Path = DATA_DIR,
                admin: bool = typer.Option(False, "--admin", help="With the admin scope: export a whole tenant, "
                                           "import into any (docs/http-api.md).")) -> None:
    """Create a bearer token for TENANT (shown once; only its hash is stored)."""
    from mirror.gateway.tenants import TenantRegistry

    typer.echo(TenantRegistry(data / "tenants.json").add(tenant, admin=admin))


@tenants_app.command("list")
def tenants_list(data: Path = DATA_DIR) -> None:
    """Tenants and their tokens' state (never the tokens), then each tenant's limits and current use."""
    from mirror.gateway.tenants import TenantRegistry

    registry = TenantRegistry(data / "tenants.json")
    for record in registry.list():
        state = "revoked" if record.revoked else "active"
        typer.echo(f"{record.tenant}\t{state}\ttoken sha256 {record.token_hash[:12]}…")
    limited = {tenant: limits for tenant in registry.tenants() if (limits := registry.limits_of(tenant)).any}
    use, why_not = _use(data, sorted(limited)) if limited else ({}, "")
    for tenant in registry.tenants():
        limits = registry.limits_of(tenant)
        typer.echo(f"{tenant}\tlimits\t{_described(limits, use.get(tenant), why_not)}")
        typer.echo(f"{tenant}\tretention\t{_retention(registry.retention_of(tenant).idle_days)}")


@tenants_app.command("revoke")
def tenants_revoke(tenant: str = TENANT, data: Path = DATA_DIR) -> None:
    """Revoke every token of TENANT; a running gateway refuses them at once."""
    from mirror.gateway.tenants import TenantRegistry

    count = TenantRegistry(data / "tenants.json").revoke(tenant)
    typer.echo(f"revoked {count} token(s) of {tenant}")


@tenants_app.command("limits")
def tenants_limits(
    tenant: str = TENANT,
    rpm: int | None = typer.Option(None, "--rpm", min=1, help="Requests per minute (any /v1 route)."),
    concurrent_turns: int | None = typer.Option(None, "--concurrent-turns", min=1, help="Turns running at once."),
    tokens_per_day: int | None = typer.Option(None, "--tokens-per-day", min=1,
                                              help="The Talker's model tokens (prompt + completion) per UTC day."),
    live_conversations: int | None = typer.Option(None, "--live-conversations", min=1,
                                                  help="Conversations with a turn in the last passivation window."),
    clear: bool = typer.Option(False, "--clear", help="Drop TENANT's limits first (alone: no limits at all)."),
    data: Path = DATA_DIR,
) -> None:
    """Set TENANT's limits (those not given stay as they were); running gateways apply them at once.

    Above a limit a request is answered 429 with `Retry-After`; the counts are shared by every
    gateway of the stack, on its broker."""
    from mirror.gateway.tenants import TenantRegistry

    limits = TenantRegistry(data / "tenants.json").set_limits(
        tenant, clear=clear, requests_per_minute=rpm, concurrent_turns=concurrent_turns,
        tokens_per_day=tokens_per_day, live_conversations=live_conversations)
    typer.echo(f"{tenant}\tlimits\t{_described(limits, None, '')}")


@tenants_app.command("retention")
def tenants_retention(
    tenant: str = TENANT,
    idle_days: int | None = typer.Option(None, "--idle-days", help="Forget a conversation whose newest event "
                                         "(any branch) is older than this many days (a whole number, at least 1)."),
    events_days: int | None = typer.Option(None, "--events-days", help="Refused: dropping older events behind a "
                                           "snapshot-only base is not supported (docs/operations.md, \"Retention\")."),
    clear: bool = typer.Option(False, "--clear", help="Keep TENANT's conversations for ever."),
    data: Path = DATA_DIR,
) -> None:
    """Set how long TENANT's conversations are kept; each shard's ingester enforces it at its next
    retention round (hourly), forgetting idle conversations exactly as `mirror forget` does."""
    from mirror.gateway.tenants import TenantRegistry

    policy = TenantRegistry(data / "tenants.json").set_retention(tenant, idle_days=idle_days,
                                                                 events_days=events_days, clear=clear)
    typer.echo(f"{tenant}\tretention\t{_retention(policy.idle_days)}")


def _retention(idle_days: int | None) -> str:
    return "keep for ever" if idle_days is None else f"forget conversations idle over {idle_days} day(s)"
@tenants_app.command("remove")
def tenants_remove(
    tenant: str = TENANT,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until every shard has swept."),
    timeout_s: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds to wait for the sweep."),
    as_json: bool = typer.Option(False, "--json", help="Print the job's JSON (when it ends, with --wait)."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Forget TENANT for good, through the running stack (an admin token of another tenant): every
    conversation on every shard, its personas, its use of its limits, its tokens and limits.
    Tombstones without content stay. Cannot be undone; `mirror export --tenant` first for a backup."""
    with gateway_client(data, url, token) as client:
        job = client.forget_tenant(tenant)
        if wait:
            job = waited(job, lambda: client.forget_tenant_job(tenant), timeout_s=timeout_s,
                         stalled=f"forgetting tenant {tenant} has not finished after {timeout_s:g} s; it goes on in "
                                 f"the ingesters: `mirror tenants remove {tenant}` again to wait",
                         progress=None if as_json else lambda job: (
                             f"forgetting {tenant}: {job['conversations']} conversation(s), {job['events']} event(s); "
                             f"shards swept {sum(s == 'forgotten' for s in job['shards'].values())}/{len(job['shards'])}"))
    if as_json:
        typer.echo(json.dumps(job))
    elif job["status"] == "forgotten":
        typer.echo(f"forgot tenant {tenant}: {job['conversations']} conversation(s), {job['events']} event(s) erased")
    else:
        typer.echo(f"forgetting tenant {tenant} ({job['conversations']} conversation(s)); poll {job['poll']}")


def _described(limits: TenantLimits, usage: Usage | None, why_not: str) -> str:
    """``requests_per_minute 60 (used 3), ...``; ``none``; the use left out, and why, when it is not known."""
    if not limits.any:
        return "none"
    used: dict[str, int] = {}
    if usage is not None:
        used = {"requests_per_minute": usage.requests, "concurrent_turns": len(usage.turns),
                "tokens_per_day": usage.tokens, "live_conversations": len(usage.live)}
    parts = [f"{name} {value}" + (f" (used {used[name]})" if name in used else "")
             for name, value in limits.as_dict().items()]
    return ", ".join(parts) + (f"\t(use: {why_not})" if why_not else "")


def _use(data: Path, tenants: list[str]) -> tuple[dict[str, Usage], str]:
    """Each tenant's use as of now, from the running stack's broker; or nothing, and why."""
    from mirror.stack.embedded import running_stack

    record = running_stack(data)
    if record is None or not record.get("nats_url"):
        return {}, "no stack running"
    try:
        return asyncio.run(_read_use(record, tenants)), ""
    except Exception as exc:  # the broker went away meanwhile: the limits still print
        return {}, f"the stack's broker did not answer ({type(exc).__name__})"


async def _read_use(record: dict[str, Any], tenants: list[str]) -> dict[str, Usage]:
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.gateway.limits import Usage, usage_key

    connections = await NatsInfrastructure(record["nats_url"]).connect(name="mirror-tenants",
                                                                       first_connect_timeout_s=USE_TIMEOUT_S)
    try:
        counters = connections.counters()
        now = time.time()
        found = {}
        for tenant in tenants:
            usage = Usage.decode(await asyncio.wait_for(counters.read(usage_key(tenant)), USE_TIMEOUT_S))
            found[tenant] = usage.current(now, usage.live_window_s)
        return found
    finally:
        await connections.close()
