"""A tenant's conversations: the list, one's summary (from its actor), and its events, paged.

The list and the events are read from the log's owner over NATS; only the summary wakes the
conversation's actor. Unknown conversations are a 404 before any actor is involved.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query

from mirror.actors.gateway.runtime import Runtime, Tenant, key_of
from mirror.actors.results import ConversationSummary
from mirror.events.codec import to_json_ready

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/conversations")
async def list_conversations(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    summaries = await (await runtime.log_client()).conversations(owner)
    return {"conversations": [
        {"id": s.conversation, "branches": list(s.branches), "events": s.events, "last_seq": s.last_seq,
         "updated_at": s.updated_at} for s in summaries
    ]}


@router.get("/v1/conversations/{conversation}")
async def get_conversation(conversation: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    key = key_of(owner, conversation)
    await runtime.existing(key)
    summary: ConversationSummary = await runtime.ask(key, "summary")
    return {"id": conversation, **{k: v for k, v in summary.as_dict().items() if k not in ("tenant", "conversation")}}


@router.get("/v1/conversations/{conversation}/events")
async def get_events(conversation: str, owner: Tenant, runtime: Runtime, after: int = Query(0, ge=0),
                     limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    key = key_of(owner, conversation)
    await runtime.existing(key)
    events = await (await runtime.log_client()).read(key, after_seq=after, limit=limit)
    return {"events": [_json(to_json_ready(event)) for event in events],
            "next_after": events[-1].seq if events else after}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
