"""``POST /v1/conversations/{conversation}/turns``: a user message to the conversation's actor.

Bad input (an empty or oversized message, a bad identifier) is refused here, before any actor
is involved. The reply carries ``Server-Timing`` so clients can tell Mirror's share of a turn.
With ``?stream=true`` the reply is server-sent events: ``token`` events (``{"text": ...}``, the
reply's pieces as the model writes them), then one ``turn`` event (the body a plain call
returns, ``seq`` included), sent only once the ``turn`` event is acknowledged by the bus; a
failure after the first piece is an ``error`` event instead (:mod:`mirror.gateway.relay`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from mirror.actors.results import TurnResult
from mirror.cognition.turn import TurnRequest
from mirror.gateway.idempotency import idempotency_key, replayed_headers
from mirror.gateway.relay import StreamCut, TurnRelay
from mirror.gateway.routes.personas import MindIn, mind_choice
from mirror.gateway.runtime import Runtime, Tenant, key_of
from mirror.modes import Mode

__all__ = ["SERVER_TIMING", "TurnIn", "TurnOut", "router", "server_timing"]

router = APIRouter()


class TurnIn(MindIn):
    message: str
    mode: Mode | None = None
    """The thinking mode of this conversation (mirror.modes.MODES): its first turn fixes it,
    the stack's default when not given; a later turn asking for another is a 409."""
    memory: bool | None = None
    """Whether this conversation's memory is on (the memory stage runs, the Talker recalls): fixed like ``mode``."""
    reflection: bool | None = None
    """Whether this conversation draws insights and reflects (a portrait the Talker reads): fixed like ``mode``."""
    instructions: str | None = None
    """The client's instructions for the conversation (a system prompt): recorded (an ``instructions``
    event) when they differ from its current ones, read by the Talker; ``""`` clears them, ``null``
    (or leaving it out) keeps them."""


class TurnOut(BaseModel):
    reply: str
    turn: int
    seq: int
    narrative_seq: int | None
    llm_ms: float | None = None
    """How long the Talker's LLM call took, as Mirror saw it (so clients can tell Mirror's share)."""
    recall_seq: int | None = None
    """The seq of the ``recall`` event the Talker answered from, if memory recalled anything."""
    steps_ms: dict[str, float] | None = None
    """A persona turn's steps on its path (think, retrieval, appraisal, plan, formulation), in ms."""


@router.post("/v1/conversations/{conversation}/turns", response_model=TurnOut)
async def post_turn(conversation: str, body: TurnIn, owner: Tenant, runtime: Runtime, response: Response, http: Request,
                    sync: bool = Query(False, description="wait for the previous turn's thinking first"),
                    stream: bool = Query(False, description="server-sent events: the reply's tokens, then the turn")) -> Any:
    started = time.perf_counter()
    key = key_of(owner, conversation)
    if not body.message.strip():
        raise HTTPException(400, "message is empty")
    size = len(body.message.encode())
    limit = runtime.settings.max_message_bytes
    if size > limit:
        raise HTTPException(413, f"message is {size} bytes; the limit is {limit}")
    request = TurnRequest(body.message, sync=sync, mode=body.mode, memory=body.memory, reflection=body.reflection,
                          mind=await mind_choice(runtime, owner, body), stream=stream,
                          idempotency_key=idempotency_key(http.headers), instructions=body.instructions)
    if stream:
        relay = TurnRelay(runtime, key, lambda conversation: conversation.turn_stream(request),
                          resend_safe=request.idempotency_key is not None)
        first = await relay.next()  # a failure before the reply begins is still answered with its status
        return StreamingResponse(_turn_events(relay, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    # A keyed turn cut off with its machine may be sent again: the conversation answers a keyed duplicate from its log.
    result = await runtime.ask(key, lambda conversation: conversation.turn(request),
                               resend_safe=request.idempotency_key is not None)
    response.headers["Server-Timing"] = server_timing(result, (time.perf_counter() - started) * 1000)
    response.headers.update(replayed_headers(result))
    return result.as_dict()


def _event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _turn_events(relay: TurnRelay, item: str | TurnResult) -> AsyncIterator[bytes]:
    try:
        while isinstance(item, str):
            yield _event("token", {"text": item})
            item = await relay.next()
    except StreamCut as cut:
        yield _event("error", {"detail": str(cut.error), "error": type(cut.error).__name__})
        return
    yield _event("turn", TurnOut.model_validate(item.as_dict()).model_dump())


SERVER_TIMING = (("recall", "recall_ms"), ("embed", "embed_ms"), ("llm", "llm_ms"), ("talk", "talk_ms"), ("append", "append_ms"), ("actor", "turn_ms"))
"""Server-Timing metrics of a turn: recall (the message's embedding, ``embed``, included), the Talker's LLM call, the whole Talker, the fenced append,
the actor's whole turn; ``gateway`` is the gateway's handler around the actor call."""


def server_timing(result: TurnResult, gateway_ms: float) -> str:
    parts = [f"{name};dur={getattr(result, field):.3f}" for name, field in SERVER_TIMING
             if getattr(result, field) is not None]
    return ", ".join([*parts, f"gateway;dur={gateway_ms:.3f}"])
