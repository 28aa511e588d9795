"""Forgetting a conversation: ``DELETE /v1/conversations/{id}`` and the job to poll.

Erasure is a job: the log's owner writes the conversation's tombstone before the DELETE is
answered (from then on every read of it is a 410, its late events are dropped at ingest), then
sweeps in the background — the stream's remaining messages securely erased and purged, every row
of every branch deleted, the database copied into a fresh file so no byte of it stays — and
resumes an unfinished sweep when it restarts. ``GET /v1/conversations/{id}/forget`` polls it.
The tombstone holds no content: the tenant, the conversation, when, how many events.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from mirror.events.log import Forgetting
from mirror.gateway.errors import UnknownConversation
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, key_of

__all__ = ["router"]

router = APIRouter()


def _job(tombstone: dict[str, Any]) -> dict[str, Any]:
    conversation = tombstone["conversation"]
    return {"job": f"forget-{conversation}", "conversation": conversation, "status": tombstone["status"],
            "events": tombstone["events"], "requested_at": tombstone["requested_at"],
            "finished_at": tombstone["finished_at"], "poll": f"/v1/conversations/{conversation}/forget"}


async def _forgetting(runtime: GatewayRuntime, tenant: str) -> Forgetting:
    event_log = await runtime.log(tenant)
    if not isinstance(event_log, Forgetting):
        raise TypeError(f"the log of tenant {tenant} cannot forget (it is not served by an ingester)")
    return event_log


@router.delete("/v1/conversations/{conversation}", status_code=202)
async def forget_conversation(conversation: str, owner: Tenant, runtime: Runtime) -> JSONResponse:
    # Every branch. 202 with the job to poll; a conversation already forgotten answers its job
    # again (200 once finished); an unknown one is a 404. (A comment: FastAPI publishes docstrings.)
    key = key_of(owner, conversation)
    event_log = await _forgetting(runtime, owner)
    tombstone = await event_log.tombstone(owner, conversation)
    if tombstone is None:
        await runtime.existing(key)  # 404 for a conversation that never was
        tombstone = await event_log.forget(owner, conversation)
    # The live conversation lets go of its state; its next activation meets the tombstone (410).
    with contextlib.suppress(Exception):
        await runtime.ask(key, lambda handle: handle.passivate())
    return JSONResponse(_job(tombstone), status_code=200 if tombstone["status"] == "forgotten" else 202)


@router.get("/v1/conversations/{conversation}/forget")
async def forget_job(conversation: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    key_of(owner, conversation)
    tombstone = await (await _forgetting(runtime, owner)).tombstone(owner, conversation)
    if tombstone is None:
        raise UnknownConversation(conversation)
    return _job(tombstone)

