"""``GET /v1/conversations/{conversation}/stream``: the conversation's new events as server-sent events.

The relay itself lives in :mod:`mirror.gateway.streaming`; this is only its route.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from mirror.gateway.runtime import Runtime, Tenant, key_of
from mirror.gateway.streaming import _sse

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/conversations/{conversation}/stream")
async def stream(conversation: str, owner: Tenant, runtime: Runtime) -> StreamingResponse:
    key = key_of(owner, conversation)
    await runtime.existing(key)
    return StreamingResponse(_sse(await runtime.bus(), key), media_type="text/event-stream")
