"""The simulator's HTTP handlers, one named function per endpoint, and the request checks they share.

What each endpoint does, its faults and its invariants are described in ``server``'s docstring.
Handlers find their app's :class:`~mirror.sim.state.SimState` on ``request.app.state.sim``
(set by ``server.create_app``), so two apps never share counters.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import struct
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mirror.sim import content as content
from mirror.sim.errors import UnsatisfiableSchema
from mirror.sim.settings import FAULT_KINDS, MAX_EMBEDDING_DIM, NO_FAULT, SimSettings
from mirror.sim.state import SimState

__all__ = [
    "ROUTES", "TOKEN_PATTERN", "append_script", "chat_completions", "embeddings", "healthz", "http_error", "models", "reset", "stats", "tokens",
]

HTTP_BAD_REQUEST = 400
HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVER_ERROR = 500
HTTP_GATEWAY_TIMEOUT = 504
HEADER_RETRY_AFTER = "Retry-After"


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _error(status: int, message: str, kind: str, *, param: str | None = None, code: str | None = None,
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status,
                        headers=headers)


def _retry_after_header(seconds: float) -> str:
    """`Retry-After` delta-seconds, to the millisecond: 100.0 -> "100", 0.25 -> "0.25"."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def _state(request: Request) -> SimState:
    return request.app.state.sim


def _rate_limit_headers(settings: SimSettings) -> dict[str, str]:
    return {} if settings.retry_after_s is None else {HEADER_RETRY_AFTER: _retry_after_header(settings.retry_after_s)}


def _remaining(latency: float, arrived: float) -> float:
    """A call's latency runs from its arrival: the simulator's own work is part of it."""
    return max(0.0, latency - (asyncio.get_running_loop().time() - arrived))


async def _sleep_or_disconnect(request: Request, seconds: float) -> None:
    """Hold a `timeout` fault until the hang ends or the client gives up, whichever is first."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(disconnected(), seconds)


async def chat_completions(request: Request) -> Response:
    state = _state(request)
    settings = state.settings
    arrived = asyncio.get_running_loop().time()
    try:
        body = await _json_body(request)
        _check_chat(body)
        response = content.chat_completion(body, content.request_digest(body), _model(body, settings))
    except (_BadRequest, UnsatisfiableSchema) as exc:
        state.bad_requests += 1
        param = getattr(exc, "param", "response_format")
        return _error(HTTP_BAD_REQUEST, str(exc), "invalid_request_error", param=param)
    fault, latency = state.begin_call(request, body)
    with state.flight(chat=True):
        await asyncio.sleep(_remaining(latency, arrived))
        if fault == "timeout":
            await _sleep_or_disconnect(request, settings.timeout_hang_s)
            return _error(HTTP_GATEWAY_TIMEOUT, "the simulated model timed out", "timeout", code="timeout")
        if fault == "429":
            return _error(HTTP_TOO_MANY_REQUESTS, "rate limit reached (simulated)", "rate_limit_error",
                          code="rate_limit_exceeded", headers=_rate_limit_headers(settings))
        if fault == "500":
            return _error(HTTP_SERVER_ERROR, "the server had an error processing your request (simulated)",
                          "server_error")
        if fault == "echo_error":
            echoed = content.last_user_text(body["messages"])
            return _error(HTTP_BAD_REQUEST, f"request rejected (simulated): {echoed}", "invalid_request_error",
                          param="messages")
        if fault == "garbage":
            return Response(content.GARBAGE_BODY, media_type="text/html")
        text = response["choices"][0]["message"]["content"]
        if fault in ("malformed", "cut") and not (fault == "cut" and body.get("stream")):
            response = content.with_content(response, content.garble(text))
        elif fault == "empty":
            response = content.with_content(response, "")
        elif fault == "no_choices":
            response = {**response, "choices": []}
        elif fault == "no_usage":
            response = content.without_usage(response)
        if body.get("stream"):
            return StreamingResponse(_chunks(response, body, settings.token_delay_ms / 1000, cut=fault == "cut"),
                                     media_type="text/event-stream")
        return JSONResponse(response)


CUT_AFTER_TOKENS = 2
"""How many tokens a streamed answer with the ``cut`` fault sends before its body ends."""
TOKEN_PATTERN = re.compile(r"\s*\S+|\s+")
"""A token is a word with the whitespace before it (as BPE tokens carry their leading space)."""


def tokens(text: str) -> list[str]:
    """``text`` as the pieces a stream sends: joined, exactly ``text``."""
    return TOKEN_PATTERN.findall(text)


async def _chunks(response: Mapping[str, Any], body: Mapping[str, Any], delay_s: float, *,
                  cut: bool = False) -> AsyncIterator[bytes]:
    """``response`` as ``chat.completion.chunk`` server-sent events: a role chunk, one chunk per
    token (``delay_s`` before each after the first), the finish reason, the usage when
    ``stream_options.include_usage`` asks for it, then ``data: [DONE]``; ``cut``: the body ends
    after the first two tokens."""
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return f"data: {json.dumps({**head, 'choices': choices, **extra}, ensure_ascii=False)}\n\n".encode()

    choices = response["choices"]
    if choices:
        yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for index, token in enumerate(tokens(choices[0]["message"]["content"] or "")):
            if index and delay_s:
                await asyncio.sleep(delay_s)
            if cut and index == CUT_AFTER_TOKENS:
                return
            yield event([{"index": 0, "delta": {"content": token}, "finish_reason": None}])
        yield event([{"index": 0, "delta": {}, "finish_reason": choices[0]["finish_reason"]}])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in response:
        yield event([], usage=response["usage"])
    yield b"data: [DONE]\n\n"


async def embeddings(request: Request) -> JSONResponse:
    state = _state(request)
    settings = state.settings
    arrived = asyncio.get_running_loop().time()
    try:
        body = await _json_body(request)
        inputs = _embedding_inputs(body)
        dimensions = body.get("dimensions", settings.embedding_dim)
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_EMBEDDING_DIM:
            raise _BadRequest(f"'dimensions' must be an integer in 1..{MAX_EMBEDDING_DIM}", "dimensions")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise _BadRequest("'encoding_format' must be float or base64", "encoding_format")
    except _BadRequest as exc:
        state.bad_requests += 1
        return _error(HTTP_BAD_REQUEST, exc.message, "invalid_request_error", param=exc.param)
    _, latency = state.begin_call(request)
    with state.flight():
        await asyncio.sleep(_remaining(latency, arrived))
        data = []
        for index, text in enumerate(inputs):
            vector = content.embedding(text, dimensions)
            encoded: object = vector
            if encoding == "base64":
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(content.estimate_tokens(text) for text in inputs)
        return JSONResponse({"object": "list", "data": data, "model": _model(body, settings),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [
        {"id": _state(request).settings.model, "object": "model", "created": 1_700_000_000, "owned_by": "mirror-sim"}]})


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def append_script(request: Request) -> JSONResponse:
    state = _state(request)
    try:
        body = await _json_body(request)
        faults = body.get("faults")
        if not isinstance(faults, list) or not all(f in (NO_FAULT, *FAULT_KINDS) for f in faults):
            raise _BadRequest(f"'faults' must be a list of {NO_FAULT}, {', '.join(FAULT_KINDS)}", "faults")
    except _BadRequest as exc:
        return _error(HTTP_BAD_REQUEST, exc.message, "invalid_request_error", param=exc.param)
    state.script.extend(faults)
    return JSONResponse({"script": list(state.script)})


async def reset(request: Request) -> JSONResponse:
    state = _state(request)
    state.reset()
    return JSONResponse(state.stats())


async def stats(request: Request) -> JSONResponse:
    return JSONResponse(_state(request).stats())


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Unknown paths and methods answer in OpenAI's error shape too, so clients parse them."""
    status = exc.status_code if isinstance(exc, HTTPException) else HTTP_SERVER_ERROR
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return _error(status, f"{request.method} {request.url.path}: {detail}", "invalid_request_error")


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
    Route("/_sim/script", append_script, methods=["POST"]),
    Route("/_sim/reset", reset, methods=["POST"]),
    Route("/_sim/stats", stats, methods=["GET"]),
]


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    return body


def _check_chat(body: Mapping[str, Any]) -> None:
    """Reject what OpenAI would reject."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("'messages' is required: a non-empty list of {role, content} objects", "messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _BadRequest(f"messages[{index}] must be an object with a string 'role'", f"messages[{index}]")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise _BadRequest(f"'{name}' must be a positive integer", name)
    if not isinstance(body.get("stream", False), bool):
        raise _BadRequest("'stream' must be true or false", "stream")
    response_format = body.get("response_format")
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise _BadRequest("'response_format.type' must be text, json_object or json_schema", "response_format")
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        if not isinstance(wrapper, dict) or not isinstance(wrapper.get("schema"), dict):
            raise _BadRequest("'response_format.json_schema.schema' must be a JSON schema object", "response_format")
    if kind == "json_object" and "schema" in response_format and not isinstance(response_format["schema"], dict):
        raise _BadRequest("'response_format.schema' must be a JSON schema object when given", "response_format")


def _embedding_inputs(body: Mapping[str, Any]) -> list[str]:
    value = body.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return [json.dumps(value)]  # one input given as token ids
    if isinstance(value, list) and value and all(isinstance(item, (str, list)) for item in value):
        return [item if isinstance(item, str) else json.dumps(item) for item in value]
    raise _BadRequest("'input' is required: a string or a non-empty list of strings", "input")


def _model(body: Mapping[str, Any], settings: SimSettings) -> str:
    """The model a response names: the one asked for (the simulator plays any), else the configured one."""
    asked = body.get("model")
    return asked if isinstance(asked, str) and asked else settings.model
