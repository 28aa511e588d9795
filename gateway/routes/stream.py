"""``GET /v1/conversations/{conversation}/stream``: the conversation's events as server-sent events.

Without ``after``, only the events appended from now on; with ``after=SEQ``, first every event
after ``SEQ`` (read from the log once it holds what the bus acknowledged: read-your-writes), then
the new ones. The relay itself lives in :mod:`mirror.gateway.streaming`; this is only its route.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from mirror.gateway.runtime import Runtime, Tenant, key_of
from mirror.gateway.streaming import _sse

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/conversations/{conversation}/stream")
async def stream(conversation: str, owner: Tenant, runtime: Runtime,
                 after: int | None = Query(None, ge=0, description=(
                     "first the events after this seq (0: all of them), then the new ones; "
                     "default: only the new ones"))) -> StreamingResponse:
    key = key_of(owner, conversation)
    if after is None:
        await runtime.existing(key)
        return StreamingResponse(_sse(await (await runtime.bus()).subscribe(key)), media_type="text/event-stream")
    subscription = await (await runtime.bus()).subscribe(key)  # before the catch-up is read: no gap between them
    try:
        last_seq = await runtime.existing(key)
        backlog = await (await runtime.log(key.tenant)).read(key, after_seq=after, until_seq=last_seq) \
            if after < last_seq else []
    except BaseException:
        await subscription.aclose()
        raise
    return StreamingResponse(_sse(subscription, backlog), media_type="text/event-stream")
