"""Forgetting a whole tenant: ``DELETE /v1/tenants/{tenant}`` (admin) and the job to poll.

In this order, each step idempotent so a ``DELETE`` asked again after a crash finishes the job:
the tenant's tokens are revoked (every gateway refuses them at once); every shard's ingester
writes a tombstone for the tenant and one per conversation of it (from then on their reads are
410 and their late events are dropped at ingest) and sweeps them all in the background in one
sweep — the stream's messages securely erased, the rows deleted, one fresh copy of the database
file (:mod:`mirror.events.duckdb._sweeper`); an ingester that restarts mid-sweep resumes it. Then
the tenant's personas and its use of its limits are erased from the broker's key-value buckets
(each stored revision overwritten), its tokens and limits are removed from the tenants file, and
the conversations this gateway holds live are let go. ``GET /v1/tenants/{tenant}/forget`` polls
the sweep: ``forgotten`` once every shard has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol, cast

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse

from mirror.events.ids import validate_identifier
from mirror.events.log import Forgetting, LogAccess
from mirror.gateway.limits.usage import usage_key
from mirror.gateway.routes.transfer import Admin
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant

__all__ = ["router", "tenant_job"]

router = APIRouter()


def tenant_job(tenant: str, shards: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The job of forgetting ``tenant``, from each shard's tombstone of it: ``forgotten`` when all are."""
    done = all(tombstone["status"] == "forgotten" for tombstone in shards.values())
    finished = [tombstone["finished_at"] for tombstone in shards.values()]
    return {"job": f"forget-tenant-{tenant}", "tenant": tenant, "status": "forgotten" if done else "forgetting",
            "conversations": sum(t["conversations"] for t in shards.values()),
            "events": sum(t["events"] for t in shards.values()),
            "requested_at": min((t["requested_at"] for t in shards.values()), default=None),
            "finished_at": max(finished) if done and finished else None,
            "shards": {shard: tombstone["status"] for shard, tombstone in sorted(shards.items())},
            "poll": f"/v1/tenants/{tenant}/forget"}


class _ForgettingLog(Forgetting, LogAccess, Protocol):
    """A shard's log that can forget (an ingester's, over NATS)."""


async def _forgetting_logs(runtime: GatewayRuntime) -> dict[str, _ForgettingLog]:
    logs = (await runtime.connections()).shard_logs()
    found = {shard: log for shard, log in logs.items() if isinstance(log, Forgetting)}
    if len(found) < len(logs):
        raise TypeError("a shard's log cannot forget (it is not served by an ingester)")
    return cast(dict[str, _ForgettingLog], found)


def _admin_of_another(tenant: str, owner: str, admin: bool) -> None:
    if not admin:
        raise HTTPException(403, "forgetting a whole tenant takes an admin token (mirror tenants add --admin)")
    validate_identifier("tenant", tenant)
    if tenant == owner:
        raise HTTPException(409, f"the token is tenant {tenant}'s own: forget it with an admin token of another tenant")


async def _tombstones(logs: dict[str, _ForgettingLog], tenant: str) -> dict[str, dict[str, Any]]:
    found = await asyncio.gather(*(log.tenant_tombstone(tenant) for log in logs.values()))
    return {shard: tombstone for shard, tombstone in zip(logs, found, strict=True) if tombstone is not None}


@router.delete("/v1/tenants/{tenant}", status_code=202)
async def forget_tenant(tenant: str, owner: Tenant, admin: Admin, runtime: Runtime) -> JSONResponse:
    # Every conversation of the tenant on every shard, its personas, use and tokens (admin scope).
    # 202 with the job to poll (200 once finished); 404 for a tenant with neither tokens nor events.
    _admin_of_another(tenant, owner, admin)
    logs = await _forgetting_logs(runtime)
    if tenant not in runtime.registry.tenants() and not await _tombstones(logs, tenant):
        held = await asyncio.gather(*(log.conversations(tenant) for log in logs.values()))
        if not any(held):
            raise HTTPException(404, f"tenant {tenant} has no token and no conversation")
    runtime.registry.revoke(tenant)  # refused by every gateway from now on
    # Each log first holds what the stream held (a shard that holds nothing of it finishes at once).
    await asyncio.gather(*(log.wait_caught_up(runtime.settings.read_settle_timeout_s) for log in logs.values()))
    shards = await asyncio.gather(*(log.forget_tenant(tenant) for log in logs.values()))
    connections = await runtime.connections()
    await runtime.personas.erase(connections.bus, tenant)
    await connections.counters().erase(usage_key(tenant))
    runtime.registry.remove(tenant)
    for key in runtime.cached_conversations(tenant):  # their next activation meets the tombstone (410)
        with contextlib.suppress(Exception):
            await runtime.ask(key, lambda handle: handle.passivate())
    job = tenant_job(tenant, dict(zip(logs, shards, strict=True)))
    return JSONResponse(job, status_code=200 if job["status"] == "forgotten" else 202)


@router.get("/v1/tenants/{tenant}/forget")
async def forget_tenant_job(tenant: str, owner: Tenant, admin: Admin, runtime: Runtime) -> dict[str, Any]:
    # The job of forgetting the tenant (admin scope); 404 when it was never forgotten.
    _admin_of_another(tenant, owner, admin)
    shards = await _tombstones(await _forgetting_logs(runtime), tenant)
    if not shards:
        raise HTTPException(404, f"tenant {tenant} was never forgotten")
    return tenant_job(tenant, shards)
