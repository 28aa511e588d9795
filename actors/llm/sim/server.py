"""`mirror sim-llm`: a deterministic OpenAI-compatible LLM, served over loopback HTTP.

Why it exists: no model provider is reachable from tests and benchmarks, and a real one is
neither deterministic nor free. This is the one permitted stand-in, and it is a real HTTP
server, so the client under test runs its real transport, timeouts and retries.

Endpoints (all JSON, save for the `garbage` fault):

    POST /v1/chat/completions   OpenAI request and response shape (one choice, no streaming)
    POST /v1/embeddings         unit vectors from a hashed bag of words (`dimensions` honoured)
    GET  /v1/models             the configured model
    GET  /healthz               {"status": "ok"}
    POST /_sim/script           {"faults": ["429", "ok", ...]} appended to the fault script
    POST /_sim/reset            clear counters and script; the fault sequence starts again
    GET  /_sim/stats            calls, chat_calls, embedding_calls, faults, in_flight,
                                max_in_flight, authorized_calls, bad_requests, script,
                                response_formats, last_response_format

`response_formats` counts the chat calls by the `response_format.type` they sent ("none" when
they sent no `response_format`), so its values add up to `chat_calls`; `last_response_format`
is the last chat call's `response_format` exactly as received (null when absent). Together they
let a test see what a client sends for structured output.

Faults (by `--script`/`/_sim/script` or `--fault KIND=RATE`), each taken by one chat call:

    429         HTTP 429 rate_limit_error, with `Retry-After` when settings.retry_after_s is set
    500         HTTP 500 server_error
    timeout     holds the request for timeout_hang_s (or until the client leaves), then HTTP 504
    malformed   HTTP 200 whose content is cut short: not valid JSON, even for a JSON format
    empty       HTTP 200 whose content is ""
    garbage     HTTP 200 whose body is not JSON at all (an HTML page, as a misrouted proxy sends)
    no_choices  HTTP 200 whose envelope has `"choices": []` (as a content filter answers)
    no_usage    HTTP 200, the normal completion without its `usage` field
    echo_error  HTTP 400 invalid_request_error whose message repeats the last user message's
                text, as providers quote what they reject; lets a test check that a client
                redacts secrets from provider text. Headers are never echoed.

Invariants:

- Content is a pure function of the request's model, messages, temperature, max_tokens,
  max_completion_tokens, response_format and seed: the same request gets byte-identical
  content (and id and `created`) from any server with any settings.
- Faults and latency are a pure function of (settings, call index): the script is consumed
  first, then a PRNG seeded by (seed, index) draws from `fault_rates`. Only chat completions
  take faults; every model call (chat or embeddings) takes latency, counted from the request's
  arrival (its own work — parsing, generating the content — is part of it, as a provider's
  is). Bad requests (400s for
  requests the simulator cannot answer, unlike the `echo_error` fault) take neither, are not
  calls and do not advance the index.
- The Authorization header is only ever tested for presence: never logged, stored or echoed
  (`echo_error` repeats message text from the body, nothing from the headers).

`response_format` json_schema support (also for llama-cpp-python's `{"type": "json_object",
"schema": ...}`): type (or a list of types), object with properties, required and
additionalProperties (false, true or a schema); string with minLength, maxLength and format
(date-time, date, email, uri, uuid); integer and number with minimum, maximum and exclusive
bounds; boolean; null; enum; const; array with items, minItems, maxItems and uniqueItems;
anyOf/oneOf; local $ref. `pattern` and `multipleOf` are ignored.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import struct
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mirror.actors._threaded_server import ThreadedServer
from mirror.actors.errors import ServerUnavailable
from mirror.actors.llm.errors import UnsatisfiableSchema
from mirror.actors.llm.sim import content as content
from mirror.actors.llm.sim.settings import (
    FAULT_KINDS,
    MAX_EMBEDDING_DIM,
    NO_FAULT,
    LatencyModel,
    SimSettings,
    drawn_fault,
    parse_fault_rate,
    parse_latency,
    parse_script,
    stream_rng,
)

__all__ = [
    "FAULT_KINDS", "NO_FAULT", "LatencyModel", "SimLLMServer", "SimSettings", "create_app",
    "drawn_fault", "parse_fault_rate", "parse_latency", "parse_script",
]

log = logging.getLogger(__name__)

HTTP_BAD_REQUEST = 400
HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVER_ERROR = 500
HTTP_GATEWAY_TIMEOUT = 504
HEADER_RETRY_AFTER = "Retry-After"
NO_RESPONSE_FORMAT = "none"  # the `response_formats` key of chat calls that sent none


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


@dataclass
class _SimState:
    """The server's mutable counters; touched only from its event loop, so it needs no lock."""

    settings: SimSettings
    latency: LatencyModel
    script: deque[str] = field(default_factory=deque)
    chat_calls: int = 0
    embedding_calls: int = 0
    authorized_calls: int = 0
    bad_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULT_KINDS, 0))
    response_formats: dict[str, int] = field(default_factory=dict)
    last_response_format: Any = None

    @property
    def calls(self) -> int:
        return self.chat_calls + self.embedding_calls

    def begin_call(self, request: Request, chat_body: Mapping[str, Any] | None = None) -> tuple[str, float]:
        """Count one model call (a chat call when given its body); return its fault and latency
        (seconds), fixed by its index."""
        latency = self.latency.sample_seconds(stream_rng(self.settings.seed, self.calls, "latency"))
        if "authorization" in request.headers:
            self.authorized_calls += 1
        if chat_body is None:
            self.embedding_calls += 1
            return NO_FAULT, latency
        response_format = chat_body.get("response_format")
        kind = response_format["type"] if response_format is not None else NO_RESPONSE_FORMAT  # checked by _check_chat
        self.response_formats[kind] = self.response_formats.get(kind, 0) + 1
        self.last_response_format = response_format
        fault = self.script.popleft() if self.script else drawn_fault(self.settings, self.chat_calls)
        self.chat_calls += 1
        if fault != NO_FAULT:
            self.faults[fault] += 1
        return fault, latency

    @contextlib.contextmanager
    def flight(self) -> Iterator[None]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1

    def reset(self) -> None:
        self.script.clear()
        self.chat_calls = self.embedding_calls = self.authorized_calls = self.bad_requests = 0
        self.max_in_flight = self.in_flight
        self.faults = dict.fromkeys(FAULT_KINDS, 0)
        self.response_formats = {}
        self.last_response_format = None

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls, "chat_calls": self.chat_calls, "embedding_calls": self.embedding_calls,
            "faults": dict(self.faults), "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
            "authorized_calls": self.authorized_calls, "bad_requests": self.bad_requests, "script": list(self.script),
            "response_formats": dict(self.response_formats), "last_response_format": self.last_response_format,
        }


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
    """Reject what OpenAI would reject, and what the simulator cannot answer (streaming)."""
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
    if body.get("stream"):
        raise _BadRequest("streaming is not supported by mirror sim-llm; send stream=false", "stream")
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


def create_app(settings: SimSettings) -> Starlette:
    """The simulator as an ASGI app; the state lives in the app, so two apps never share it."""
    state = _SimState(settings, parse_latency(settings.latency), script=deque(settings.script))

    async def sleep_or_disconnect(request: Request, seconds: float) -> None:
        """Hold a `timeout` fault until the hang ends or the client gives up, whichever is first."""

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(disconnected(), seconds)

    rate_limit_headers = {} if settings.retry_after_s is None else {
        HEADER_RETRY_AFTER: _retry_after_header(settings.retry_after_s)}

    def remaining(latency: float, arrived: float) -> float:
        """A call's latency runs from its arrival: the simulator's own work is part of it."""
        return max(0.0, latency - (asyncio.get_running_loop().time() - arrived))

    async def chat_completions(request: Request) -> Response:
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
        with state.flight():
            await asyncio.sleep(remaining(latency, arrived))
            if fault == "timeout":
                await sleep_or_disconnect(request, settings.timeout_hang_s)
                return _error(HTTP_GATEWAY_TIMEOUT, "the simulated model timed out", "timeout", code="timeout")
            if fault == "429":
                return _error(HTTP_TOO_MANY_REQUESTS, "rate limit reached (simulated)", "rate_limit_error",
                              code="rate_limit_exceeded", headers=rate_limit_headers)
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
            if fault == "malformed":
                response = content.with_content(response, content.garble(text))
            elif fault == "empty":
                response = content.with_content(response, "")
            elif fault == "no_choices":
                response = {**response, "choices": []}
            elif fault == "no_usage":
                response = content.without_usage(response)
            return JSONResponse(response)

    async def embeddings(request: Request) -> JSONResponse:
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
            await asyncio.sleep(remaining(latency, arrived))
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
            {"id": settings.model, "object": "model", "created": 1_700_000_000, "owned_by": "mirror-sim"}]})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def append_script(request: Request) -> JSONResponse:
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
        state.reset()
        return JSONResponse(state.stats())

    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(state.stats())

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        """Unknown paths and methods answer in OpenAI's error shape too, so clients parse them."""
        status = exc.status_code if isinstance(exc, HTTPException) else HTTP_SERVER_ERROR
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return _error(status, f"{request.method} {request.url.path}: {detail}", "invalid_request_error")

    return Starlette(exception_handlers={HTTPException: http_error}, routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/_sim/script", append_script, methods=["POST"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/stats", stats, methods=["GET"]),
    ])


class SimLLMServer:
    """The simulator on a free loopback port, served by uvicorn in a background thread.

    `start()` returns once `/healthz` answers; `stop()` waits for the thread (in-flight requests
    get at most a second). Both are synchronous and quick, so async tests may call them too.
    """

    def __init__(self, settings: SimSettings | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 start_timeout: float = 10.0, log_level: str = "warning", access_log: bool = False) -> None:
        self.settings = settings if settings is not None else SimSettings()
        self._server = ThreadedServer(create_app(self.settings), name="mirror sim-llm", host=host, port=port,
                                      start_timeout=start_timeout, log_level=log_level, access_log=access_log)
        self._admin: httpx.Client | None = None  # one client: building one per call costs ~30 ms

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        """The root, e.g. http://127.0.0.1:40123 (admin endpoints live under it)."""
        return self._server.url

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as its base URL: the root plus /v1."""
        return f"{self.url}/v1"

    def start(self) -> SimLLMServer:
        if not self._server.running:
            self._server.start()
            self._admin = httpx.Client(base_url=self.url, timeout=5.0)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._server.stop(timeout)
        if self._admin is not None:
            self._admin.close()
        self._admin = None

    def _admin_client(self) -> httpx.Client:
        if self._admin is None:
            raise ServerUnavailable("mirror sim-llm", self.url, "the server is not running", "call start() first")
        return self._admin

    def stats(self) -> dict[str, Any]:
        """GET /_sim/stats."""
        return self._admin_client().get("/_sim/stats").raise_for_status().json()

    def script(self, *faults: str) -> list[str]:
        """POST /_sim/script: the next chat calls get these faults ("ok" for none), in order."""
        return self._admin_client().post("/_sim/script", json={"faults": list(faults)}).raise_for_status().json()["script"]

    def reset(self) -> dict[str, Any]:
        """POST /_sim/reset: zero the counters, drop the script, restart the fault sequence."""
        return self._admin_client().post("/_sim/reset").raise_for_status().json()

    def __enter__(self) -> SimLLMServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
