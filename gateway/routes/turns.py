"""``POST /v1/conversations/{conversation}/turns``: a user message to the conversation's actor.

Bad input (an empty or oversized message, a bad identifier) is refused here, before any actor
is involved. The reply carries ``Server-Timing`` so clients can tell Mirror's share of a turn.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel

from mirror.actors.results import TurnResult
from mirror.gateway.routes.personas import MindIn, mind_choice
from mirror.gateway.runtime import Runtime, Tenant, key_of

__all__ = ["SERVER_TIMING", "TurnIn", "TurnOut", "router", "server_timing"]

router = APIRouter()


class TurnIn(MindIn):
    message: str
    mode: Literal["baseline", "threads_only", "controller_only", "full"] | None = None
    """The thinking mode of this conversation (mirror.cognition.pipeline.MODES): its first turn fixes it,
    the stack's default when not given; a later turn asking for another is a 409."""
    memory: bool | None = None
    """Whether this conversation's memory is on (the memory stage runs, the Talker recalls): fixed like ``mode``."""
    reflection: bool | None = None
    """Whether this conversation draws insights and reflects (a portrait the Talker reads): fixed like ``mode``."""


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
async def post_turn(conversation: str, body: TurnIn, owner: Tenant, runtime: Runtime, response: Response,
                    sync: bool = Query(False, description="wait for the previous turn's thinking first")) -> Any:
    started = time.perf_counter()
    key = key_of(owner, conversation)
    if not body.message.strip():
        raise HTTPException(400, "message is empty")
    size = len(body.message.encode())
    limit = runtime.settings.max_message_bytes
    if size > limit:
        raise HTTPException(413, f"message is {size} bytes; the limit is {limit}")
    message, mode, memory, reflection = body.message, body.mode, body.memory, body.reflection
    mind = await mind_choice(runtime, owner, body)
    result = await runtime.ask(key, lambda conversation: conversation.turn(message, sync=sync, mode=mode, memory=memory,
                                                                           reflection=reflection, mind=mind))
    response.headers["Server-Timing"] = server_timing(result, (time.perf_counter() - started) * 1000)
    return result.as_dict()


SERVER_TIMING = (("recall", "recall_ms"), ("embed", "embed_ms"), ("llm", "llm_ms"), ("talk", "talk_ms"), ("append", "append_ms"), ("actor", "turn_ms"))
"""Server-Timing metrics of a turn: recall (the message's embedding, ``embed``, included), the Talker's LLM call, the whole Talker, the fenced append,
the actor's whole turn; ``gateway`` is the gateway's handler around the actor call."""


def server_timing(result: TurnResult, gateway_ms: float) -> str:
    parts = [f"{name};dur={getattr(result, field):.3f}" for name, field in SERVER_TIMING
             if getattr(result, field) is not None]
    return ", ".join([*parts, f"gateway;dur={gateway_ms:.3f}"])
