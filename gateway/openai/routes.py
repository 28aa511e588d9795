"""``POST /v1/chat/completions`` and ``GET /v1/models``, the OpenAI-compatible routes, also
mounted under ``/c/{conversation}`` so that a base URL ``http://host:port/c/my-chat/v1`` names
the conversation for any client with a base-URL field.

A completion is one turn of a Mirror conversation: which one is decided by
:func:`~mirror.gateway.openai.naming.conversation_of` (the path, then headers, metadata, user);
the last message is the turn (:mod:`~mirror.gateway.openai.shapes`); ``model`` picks the mind
and mode (:mod:`~mirror.gateway.openai.catalog`). A front end's background task (a title, tags,
a summary) is no turn: :mod:`~mirror.gateway.openai.background` answers it statelessly. Same
bearer tokens and tenants as the native API, same statuses; errors in OpenAI's body
(:mod:`~mirror.gateway.openai.errors`).

``stream: true`` answers ``chat.completion.chunk`` server-sent events: a role chunk with the
first piece, one chunk per piece as the model writes it, then the final chunk — empty delta,
``finish_reason`` and ``mirror: {"conversation", "seq", "turn"}`` — written only once the turn's
event is acknowledged by the bus, the usage chunk when ``stream_options.include_usage`` asks,
and ``data: [DONE]``. A failure after the first piece is a ``data: {"error": ...}`` event and no
``[DONE]`` (nothing was logged). A client that leaves mid-stream does not stop the turn: it is
appended whole (:mod:`mirror.gateway.relay`), and the next request sees it in the history.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from mirror.actors.results import TurnResult
from mirror.actors.token_stream import StreamItem
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.turn import TurnRequest
from mirror.gateway.idempotency import idempotency_key, replayed_headers
from mirror.gateway.openai import background
from mirror.gateway.openai.catalog import model_names, selected
from mirror.gateway.openai.errors import OpenAIError, error_body
from mirror.gateway.openai.naming import CONVERSATION_HEADER, NAMED_BY_HEADER, conversation_of, named_in_path
from mirror.gateway.openai.shapes import (
    IGNORED_HEADER,
    STRICT_HEADER,
    ChatCompletionIn,
    chunk,
    completion,
    completion_id,
    mirror_extension,
    turn_message,
    usage,
)
from mirror.gateway.openai.transcript import Placement, placed
from mirror.gateway.relay import StreamCut, TurnRelay
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, branch_key, key_of

__all__ = ["BRANCH_HEADER", "CONVERSATION_HEADER", "HISTORY_HEADER", "router"]

HISTORY_HEADER = "X-Mirror-History"
"""How the request's transcript placed the turn (:mod:`~mirror.gateway.openai.transcript`): ``none``
(no earlier messages: ``main`` continued), ``same`` (the transcript is the branch's turns),
``adopted`` (the client's exchanges the branch lacked were recorded first) or ``forked`` (it
diverged: a new branch)."""
BRANCH_HEADER = "X-Mirror-Branch"
"""The branch the turn was appended to (``main`` unless a transcript placed it on another)."""

router = APIRouter()


@router.get("/v1/models")
async def list_models(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    created = int(time.time())
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "mirror"}
                                       for name in await model_names(runtime, owner)]}


@router.get("/c/{conversation}/v1/models")
async def named_list_models(conversation: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    """The same list; a base URL naming a bad conversation is refused here already, as every route refuses it."""
    named_in_path(conversation)
    return await list_models(owner, runtime)


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionIn, request: Request, owner: Tenant, runtime: Runtime) -> Response:
    return await _completion(None, body, request, owner, runtime)


@router.post("/c/{conversation}/v1/chat/completions", response_model=None)
async def named_chat_completions(conversation: str, body: ChatCompletionIn, request: Request, owner: Tenant,
                                 runtime: Runtime) -> Response:
    return await _completion(conversation, body, request, owner, runtime)


async def _completion(path_name: str | None, body: ChatCompletionIn, request: Request, owner: str,
                      runtime: GatewayRuntime) -> Response:
    task = background.task_of(body, request.headers)
    named = None if task else conversation_of(path_name, request.headers, body)
    strict = request.headers.get(STRICT_HEADER, "").strip().lower() in ("true", "1", "yes")
    ignored = body.check(temperature=MirrorConfig(model=runtime.settings.runtime.llm.model).temperature,
                         max_tokens=runtime.settings.runtime.talker_max_tokens, strict=strict)
    headers = {IGNORED_HEADER: ", ".join(ignored)} if ignored else {}
    choice = await selected(runtime, owner, background.base_model(body.model))
    if task or named is None:
        return await background.answer(body, task or "background", runtime, headers)
    conversation = named.conversation
    key = key_of(owner, conversation)
    transcript = turn_message(body)
    message = transcript.message
    if not message.strip():
        raise OpenAIError(400, "the user's message is empty", "invalid_request", "messages")
    size, limit = len(message.encode()), runtime.settings.max_message_bytes
    if size > limit:
        raise OpenAIError(413, f"the user's message is {size} bytes; the limit is {limit}", "message_too_large", "messages")
    keyed = idempotency_key(request.headers)

    async def started(where: Placement) -> tuple[TurnResult | TurnRelay, StreamItem | None]:
        turn = TurnRequest(message, mode=choice.mode, mind=choice.mind, stream=bool(body.stream), idempotency_key=keyed,
                           instructions=transcript.instructions, continuation=where.continuation)
        branch = branch_key(key, where.branch)
        if not body.stream:
            return await runtime.ask(branch, lambda handle: handle.turn(turn), resend_safe=keyed is not None), None
        relay = TurnRelay(runtime, branch, lambda handle: handle.turn_stream(turn), resend_safe=keyed is not None)
        return relay, await relay.next()  # a failure before the reply begins is answered with its status

    # Which branch the transcript continues (issue 35): main's conversation is asked first (issue 38).
    where, (result, first) = await placed(runtime, key, transcript, keyed, started)
    branch = where.branch
    headers.update({HISTORY_HEADER: where.history, BRANCH_HEADER: branch, NAMED_BY_HEADER: named.source,
                    background.TASK_HEADER: "turn"})
    identifier = completion_id()
    if isinstance(result, TurnResult):
        return JSONResponse(completion(identifier, body.model, result, conversation, branch),
                            headers={**headers, **replayed_headers(result)})
    assert first is not None
    return StreamingResponse(_chunks(result, first, identifier, body, conversation, branch),
                             media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


def _data(value: Any) -> bytes:
    return f"data: {json.dumps(value, ensure_ascii=False)}\n\n".encode()


async def _chunks(relay: TurnRelay, item: str | TurnResult, identifier: str, body: ChatCompletionIn,
                  conversation: str, branch: str) -> AsyncIterator[bytes]:
    created, model = int(time.time()), body.model
    delta: dict[str, Any] = {"role": "assistant"}
    try:
        while isinstance(item, str):
            yield _data(chunk(identifier, model, created, {**delta, "content": item}))
            delta = {}
            item = await relay.next()
    except StreamCut as cut:
        error = cut.error
        yield _data(error_body(getattr(error, "status_code", 503), f"the turn failed after its reply began (nothing "
                                f"was logged): {type(error).__name__}: {error}", "stream_cut"))
        return
    if delta:  # a reply that came whole: its role chunk, then the rest
        yield _data(chunk(identifier, model, created, {**delta, "content": item.reply}))
    yield _data(chunk(identifier, model, created, {}, item.finish_reason, mirror=mirror_extension(item, conversation, branch)))
    if body.include_usage():
        final = chunk(identifier, model, created, {}, usage=usage(item))
        final["choices"] = []
        yield _data(final)
    yield b"data: [DONE]\n\n"
