"""A tenant's conversations: the list, one's summary (from its actor), and its events, paged.

The list and the events are read from the log's owner over NATS; only the summary wakes the
conversation's actor. Unknown conversations are a 404 before any actor is involved.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from mirror.gateway.runtime import Runtime, Tenant, branch_key, key_of
from mirror.replay.why import event_json

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/conversations")
async def list_conversations(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    """The tenant's conversations, including ones whose first turn was acknowledged a moment ago.

    The list is read from the log, which commits a little after the bus acknowledges; so it
    first waits for the log to hold what the stream held when asked (read-your-writes:
    :meth:`~mirror.gateway.runtime.GatewayRuntime.settled_tenant`).
    """
    await runtime.settled_tenant(owner)
    summaries = await (await runtime.log(owner)).conversations(owner)
    return {"conversations": [
        {"id": s.conversation, "branches": list(s.branches), "events": s.events, "last_seq": s.last_seq,
         "updated_at": s.updated_at, "turns": s.turns, "mind": s.mind} for s in summaries
    ]}


@router.get("/v1/conversations/{conversation}")
async def get_conversation(conversation: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    # The live conversation's summary, with its branches from the log (["main"] until the log holds
    # its first event): what a client needs to find one conversation without the tenant's list.
    # (A comment, not a docstring: FastAPI would publish a docstring in /openapi.json.)
    key = key_of(owner, conversation)
    await runtime.existing(key)
    summary = await runtime.ask(key, lambda conversation: conversation.summary(), resend_safe=True)
    logged = await (await runtime.log(owner)).conversations(owner, conversation)
    branches = list(logged[0].branches) if logged else ["main"]
    return {"id": conversation, **{k: v for k, v in summary.as_dict().items() if k not in ("tenant", "conversation")},
            "branches": branches}


@router.get("/v1/conversations/{conversation}/events")
async def get_events(conversation: str, owner: Tenant, runtime: Runtime, after: int = Query(0, ge=0),
                     limit: int = Query(100, ge=1, le=1000),
                     branch: str = Query("main", description="a branch's own events (not those it inherits)")) -> dict[str, Any]:
    key = branch_key(key_of(owner, conversation), branch)  # both ids checked before anything is looked up
    await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    events = await (await runtime.log(key.tenant)).read(key, after_seq=after, limit=limit)
    return {"events": [event_json(event) for event in events],
            "next_after": events[-1].seq if events else after}

