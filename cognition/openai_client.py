"""aiohttp adapter of the LLM port for OpenAI-compatible APIs (vLLM, Ollama, llama.cpp, hosted).

One :class:`~mirror.cognition.http_transport.KeepAliveSession` per adapter (aiohttp, idle
connections kept under servers' keep-alive, a request that died unanswered on a reused connection
sent once more), its pool sized to ``max_concurrency``, and a semaphore of the same size held
around each HTTP attempt (not around backoff sleeps), so no more than ``max_concurrency``
requests are ever in flight to the provider. No httpx and no retry library in between: a model
call is the hot path of every thinking step, and their layers cost more CPU than the call itself
(see docs/benchmarks.md's model client figures).

Retries (exponential backoff with jitter) cover what may succeed later: 429, 5xx,
timeouts and connection errors. A 429's ``Retry-After`` is honoured, capped at
``backoff_max_s``. Any other 4xx is the request's fault and is raised at once as
:class:`LLMRequestRejected`. When the retries are spent the last failure is raised as
:class:`LLMTimeout`, :class:`LLMRateLimited` or :class:`LLMUnavailable`.

Two failures are retried fewer times than ``max_retries`` allows, because each retry costs the
caller more than it is likely to win: a server that cannot be reached (connection refused, no
connection within ``connect_timeout_s``: ``unreachable_retries``) is rarely there a moment
later, and an attempt that timed out (``timeout_retries``) cost a whole ``timeout_s``. A user
waiting on the Talker then gets the gateway's 503 in well under a second (a refused connection)
rather than after seconds of backoff, and retries when its ``Retry-After`` says.

The API key is sent as a bearer token and appears nowhere else: not in ``repr``, log lines,
provenance or error messages (provider text is redacted before it reaches an error).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import aiohttp
from yarl import URL

from mirror import tracing
from mirror.events.payloads import Provenance

from .chat_stream import ChunkReader, SSEDecoder, StreamError
from .errors import (
    LLMBadResponse,
    LLMRateLimited,
    LLMRequestRejected,
    LLMTimeout,
    LLMUnavailable,
    excerpt,
    redact,
)
from .http_transport import KeepAliveSession
from .llm import ChatRequest, ChatResponse, TokenSink, estimate_tokens, json_string, messages_json
from .structured import chat_json

T = TypeVar("T")
log = logging.getLogger(__name__)

StructuredOutputMode = Literal["json_schema", "json_object_schema", "json_object", "none"]
CHAT_PATH = "chat/completions"
EMBEDDINGS_PATH = "embeddings"
HEADER_AUTHORIZATION = "Authorization"
HEADER_RETRY_AFTER = "Retry-After"
HEADER_CONTENT_TYPE = "Content-Type"
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """Where the model is served and how hard to try. ``base_url`` ends in ``/v1``.

    ``model`` is the default model: :meth:`OpenAIChatClient.embed` uses it, and callers build
    :class:`ChatRequest`s with it (a request's own ``model`` is what is sent, since it is part of
    the request's fingerprint). ``structured_output`` says how a request's JSON schema is passed:
    ``json_schema`` (strict schema: OpenAI, vLLM, llama.cpp's own server), ``json_object_schema``
    (``{"type": "json_object", "schema": …}``, as llama-cpp-python's server takes it, where the
    schema becomes a grammar), ``json_object`` (JSON mode only) or
    ``none`` (rely on the prompt; :func:`parse_json_object` still validates).
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60
    connect_timeout_s: float = 5
    max_retries: int = 4
    unreachable_retries: int = 1
    """Retries after an attempt that reached no server (refused, or no connection within ``connect_timeout_s``)."""
    timeout_retries: int = 1
    """Retries after an attempt that got no answer within ``timeout_s`` (each costs that long again)."""
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 5
    max_concurrency: int = 16
    structured_output: StructuredOutputMode = "json_schema"

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {self.base_url!r} must start with http:// or https://")
        if min(self.max_retries, self.unreachable_retries, self.timeout_retries) < 0 or self.max_concurrency < 1:
            raise ValueError("max_retries, unreachable_retries and timeout_retries must be >= 0 and max_concurrency >= 1")
        if self.structured_output not in ("json_schema", "json_object_schema", "json_object", "none"):
            raise ValueError(
                f"structured_output {self.structured_output!r} is not json_schema, json_object_schema, json_object or none"
            )


class _Transient(Exception):
    """One failed attempt that may succeed if repeated; translated to a public error at the end."""

    def __init__(
        self,
        kind: Literal["timeout", "rate_limited", "server", "connection", "unreachable"],
        detail: str,
        retry_after_s: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.status = status


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), or ``None``."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@functools.cache
def _tls_context(plain_http: bool) -> ssl.SSLContext:
    """The client's TLS context, one per process.

    A verifying context loads the CA bundle (~60 ms of CPU), and a client is made per
    conversation actor and per recompute task. A plain-HTTP endpoint (the simulator, a local
    model) never uses one, so it gets a context without CAs: it would refuse any certificate.
    """
    if plain_http:
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    import httpx  # its context: certifi's CAs, SSL_CERT_FILE / SSL_CERT_DIR honoured

    return httpx.create_ssl_context()


class OpenAIChatClient:
    """The LLM port over an OpenAI-compatible HTTP API.

    Counters (since construction): ``calls`` — chat and embed calls made, ``retries`` — extra
    attempts after a transient failure (so HTTP requests sent = calls + retries),
    ``prompt_tokens`` and ``completion_tokens`` — as reported by the provider, or estimated
    with :func:`estimate_tokens` when it reports no usage.
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        headers = {HEADER_CONTENT_TYPE: JSON}
        if settings.api_key:
            headers[HEADER_AUTHORIZATION] = f"Bearer {settings.api_key}"
        # A connection within connect_timeout_s (a pooled one within timeout_s); the whole attempt
        # within timeout_s (asyncio.timeout around each), so no timer per read: a streamed answer
        # would reset one at every piece.
        timeout = aiohttp.ClientTimeout(total=None, connect=settings.timeout_s, sock_connect=settings.connect_timeout_s,
                                        sock_read=None)
        self._http = KeepAliveSession(max_connections=settings.max_concurrency,
                                      ssl_context=_tls_context(settings.base_url.startswith("http://")),
                                      timeout=timeout, headers=headers)
        root = settings.base_url.rstrip("/")
        self._urls = {path: URL(f"{root}/{path}") for path in (CHAT_PATH, EMBEDDINGS_PATH)}
        self._slots = asyncio.Semaphore(settings.max_concurrency)
        self.calls = 0
        self.retries = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def __repr__(self) -> str:
        return (
            f"OpenAIChatClient(base_url={self.settings.base_url!r}, model={self.settings.model!r}, "
            f"max_concurrency={self.settings.max_concurrency}, calls={self.calls}, retries={self.retries})"
        )

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def reused_retries(self) -> int:
        """Requests sent once more because a reused connection died unanswered (a server that closed
        it idle; see :mod:`mirror.cognition.http_transport`): not retries, and not counted in ``retries``."""
        return self._http.reused_retries

    async def __aenter__(self) -> OpenAIChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the port -------------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        mode = self._structured_mode(request)
        started = time.perf_counter()
        envelope = await self._retried(self._post_once, CHAT_PATH, _chat_encoded(request, self._chat_body(request, mode)))
        content = self._content_of(envelope)
        return self._response(request, mode, content, envelope.get("usage"), started,
                              _finish_reason(envelope.get("choices")))

    async def chat_streamed(self, request: ChatRequest, on_token: TokenSink) -> ChatResponse:
        """:meth:`chat`, asked with ``stream: true``; each piece of the answer goes to ``on_token``
        as it arrives. The request (and its fingerprint) and the returned response are what
        :meth:`chat` sends and returns for the same content; retries and errors before the first
        piece are :meth:`chat`'s, a failure after it is raised at once (see :class:`StreamingLLM`).
        A server that ignores ``stream`` and answers one JSON completion is read whole (one piece);
        one that sends no usage in its stream (``stream_options`` unknown to it) gets estimated token
        counts, as a plain answer without usage does."""
        self.calls += 1
        mode = self._structured_mode(request)
        started = time.perf_counter()
        body = {**self._chat_body(request, mode), "stream": True, "stream_options": {"include_usage": True}}
        reader = await self._stream_with_retries(_chat_encoded(request, body), on_token)
        content = reader.content
        if not content.strip():
            raise LLMBadResponse("the model returned empty content (is max_tokens too small?)",
                                 base_url=self.settings.base_url)
        return self._response(request, mode, content, reader.usage, started, reader.finish_reason or "stop")

    def _response(self, request: ChatRequest, mode: StructuredOutputMode, content: str, usage: object,
                  started: float, finish_reason: str = "stop") -> ChatResponse:
        """The answer and its provenance (the same whether it was streamed or not)."""
        latency_ms = (time.perf_counter() - started) * 1000
        prompt_tokens, completion_tokens = self._usage_of(usage, request, content)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        parameters: dict[str, float | int | str] = {
            "temperature": float(request.temperature),
            "max_tokens": request.max_tokens,
            "structured_output": mode,
        }
        if request.seed is not None:
            parameters["seed"] = request.seed
        provenance = Provenance(
            model=request.model,
            prompt_set=request.prompt_set,
            request_fingerprint=request.fingerprint(),
            parameters=parameters,
            latency_ms=latency_ms,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            response=content,
        )
        tracing.model_call(request.model, started, prompt_tokens, completion_tokens, finish_reason)  # `chat {model}`
        return ChatResponse(content=content, provenance=provenance, finish_reason=finish_reason)

    async def chat_json(self, request: ChatRequest) -> tuple[dict[str, Any], ChatResponse]:
        """:meth:`chat`, then the answer read as the request's JSON schema (see :func:`chat_json`)."""
        return await chat_json(self, request)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors, _ = await self.embed_with_usage(texts)
        return vectors

    async def embed_with_usage(
        self, texts: Sequence[str], *, dimensions: int | None = None
    ) -> tuple[list[list[float]], int]:
        """:meth:`embed`, and the prompt tokens of this call (reported, else estimated).

        The per-call count is what an embedder's provenance records; reading the running
        counter before and after would mix in concurrent calls. ``dimensions`` is sent only
        when given (OpenAI's text-embedding-3 models shorten vectors; other servers may reject it).
        """
        if not texts:
            return [], 0
        self.calls += 1
        body: dict[str, Any] = {"model": self.settings.model, "input": list(texts)}
        if dimensions is not None:
            body["dimensions"] = dimensions
        envelope = await self._post_with_retries(EMBEDDINGS_PATH, body)
        try:
            rows = sorted(envelope["data"], key=lambda row: row["index"])
            vectors = [[float(number) for number in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMBadResponse(f"embeddings envelope without data[].embedding ({exc!r})",
                                 base_url=self.settings.base_url) from exc
        if len(vectors) != len(texts):
            raise LLMBadResponse(f"asked for {len(texts)} embeddings, got {len(vectors)}",
                                 base_url=self.settings.base_url)
        usage = envelope.get("usage")
        reported = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
        tokens = reported if isinstance(reported, int) and not isinstance(reported, bool) else sum(
            estimate_tokens(text) for text in texts
        )
        self.prompt_tokens += tokens
        return vectors, tokens

    # --- request and response shapes ------------------------------------------------------

    def _structured_mode(self, request: ChatRequest) -> StructuredOutputMode:
        return "none" if request.json_schema is None else self.settings.structured_output

    @staticmethod
    def _chat_body(request: ChatRequest, mode: StructuredOutputMode) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [message.as_dict() for message in request.messages],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if request.seed is not None:
            body["seed"] = request.seed
        if request.json_schema is not None and mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.json_schema.name, "schema": request.json_schema.schema, "strict": True},
            }
        elif request.json_schema is not None and mode == "json_object_schema":
            body["response_format"] = {"type": "json_object", "schema": request.json_schema.schema}
        elif request.json_schema is not None and mode == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def _content_of(self, envelope: Mapping[str, Any]) -> str:
        try:
            content = envelope["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMBadResponse(f"no choices[0].message.content in {excerpt(str(envelope))}",
                                 base_url=self.settings.base_url) from exc
        if content is not None and not isinstance(content, str):
            raise LLMBadResponse(f"content is {type(content).__name__}, not text", base_url=self.settings.base_url)
        if not content or not content.strip():
            raise LLMBadResponse("the model returned empty content (is max_tokens too small?)",
                                 base_url=self.settings.base_url)
        return content

    @staticmethod
    def _usage_of(usage: object, request: ChatRequest, content: str) -> tuple[int, int]:
        usage = usage if isinstance(usage, Mapping) else {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt <= 0:
            prompt = estimate_tokens(request.prompt_text())
        if not isinstance(completion, int) or isinstance(completion, bool) or completion <= 0:
            completion = estimate_tokens(content)
        return prompt, completion

    # --- transport, retries, translation --------------------------------------------------

    async def _retried(self, attempt: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``attempt(*args)``, retried on transient failures (backoff, ``Retry-After``), then the typed error.

        Stops after ``max_retries`` retries, or sooner for failures that rarely pass by retrying
        (``unreachable_retries``, ``timeout_retries``, counted per kind within this call; see the
        module docstring).
        """
        settings = self.settings
        failures: dict[str, int] = {}
        attempts = 0
        while True:
            attempts += 1
            try:
                return await attempt(*args)
            except _Transient as failure:
                failures[failure.kind] = failures.get(failure.kind, 0) + 1
                kind_limit = self._kind_retries().get(failure.kind)
                if attempts > settings.max_retries or (kind_limit is not None and failures[failure.kind] > kind_limit):
                    raise self._exhausted(failure, attempts) from failure
                delay = self._backoff_s(failure, attempts)
                self.retries += 1
                log.warning("LLM %s attempt %d/%d failed (%s: %s); retrying in %.2fs", settings.base_url, attempts,
                            self._most_attempts(failure.kind), failure.kind, failure.detail, delay)
            await asyncio.sleep(delay)

    def _backoff_s(self, failure: _Transient, attempts: int) -> float:
        """The wait before the next attempt: a 429's ``Retry-After`` (capped at ``backoff_max_s``), else
        ``backoff_initial_s`` doubled per attempt so far, plus up to ``backoff_initial_s`` of jitter, capped."""
        settings = self.settings
        if failure.retry_after_s is not None:
            return min(failure.retry_after_s, settings.backoff_max_s)
        exponential = settings.backoff_initial_s * 2.0 ** min(attempts - 1, 64)
        return max(0.0, min(exponential + random.uniform(0, settings.backoff_initial_s), settings.backoff_max_s))

    async def _post_with_retries(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._retried(self._post_once, path, _encoded(body))

    async def _post_once(self, path: str, data: bytes) -> dict[str, Any]:
        settings = self.settings
        async with self._slots:
            try:
                async with asyncio.timeout(settings.timeout_s):
                    async with await self._http.request("POST", self._urls[path], data=data) as response:
                        raw = await response.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise self._transient(exc) from exc
        self._check_status(response, raw)
        try:
            envelope = json.loads(raw)
        except ValueError as exc:
            raise LLMBadResponse(f"body is not JSON: {excerpt(_text(raw))!r}", base_url=settings.base_url) from exc
        if not isinstance(envelope, dict):
            raise LLMBadResponse(f"body is JSON {type(envelope).__name__}, not an object", base_url=settings.base_url)
        return envelope

    async def _stream_with_retries(self, data: bytes, on_token: TokenSink) -> ChunkReader:
        """The streamed answer, read whole; attempts are retried as :meth:`_post_with_retries`'
        until a piece has reached ``on_token``, never after."""
        return await self._retried(self._stream_once, data, on_token)

    async def _stream_once(self, data: bytes, on_token: TokenSink) -> ChunkReader:
        settings = self.settings
        reader, decoder = ChunkReader(), SSEDecoder()
        async with self._slots:
            try:
                async with asyncio.timeout(settings.timeout_s):
                    async with await self._http.request("POST", self._urls[CHAT_PATH], data=data) as response:
                        if not _succeeded(response.status):
                            self._check_status(response, await response.read())
                        if response.headers.get(HEADER_CONTENT_TYPE, "").startswith(JSON):
                            return self._whole_answer(await response.read(), reader, on_token)
                        async for piece in response.content.iter_any():
                            for payload in decoder.feed(piece):
                                self._read_chunk(reader, payload, on_token)
                        for payload in decoder.close():
                            self._read_chunk(reader, payload, on_token)
            except _Transient as failure:
                raise self._given_up(failure, reader) from failure
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise self._given_up(self._transient(exc), reader) from exc
        if not reader.done and not reader.finish_reason:
            raise LLMBadResponse("the streamed answer ended without a finish_reason or [DONE]", base_url=settings.base_url)
        return reader

    def _transient(self, exc: BaseException) -> _Transient:
        """An attempt's failure to get an answer, by kind (see :meth:`_retried`)."""
        settings = self.settings
        if isinstance(exc, aiohttp.ConnectionTimeoutError):  # also a TimeoutError: first
            return _Transient("unreachable", f"no connection within {settings.connect_timeout_s:g}s")
        if isinstance(exc, TimeoutError):
            return _Transient("timeout", f"no answer within {settings.timeout_s:g}s")
        said = redact(str(exc), settings.api_key)
        if isinstance(exc, aiohttp.ClientConnectorError):  # refused, no route, DNS
            return _Transient("unreachable", f"ConnectError: {said}")
        return _Transient("connection", f"{type(exc).__name__}: {said}" if said else type(exc).__name__)

    def _whole_answer(self, body: bytes, reader: ChunkReader, on_token: TokenSink) -> ChunkReader:
        """A server that ignored ``stream: true`` and answered one JSON completion: read whole, one piece."""
        try:
            envelope = json.loads(body)
        except ValueError as exc:
            raise LLMBadResponse(f"body is not JSON: {excerpt(_text(body))!r}",
                                 base_url=self.settings.base_url) from exc
        if not isinstance(envelope, dict):
            raise LLMBadResponse(f"body is JSON {type(envelope).__name__}, not an object", base_url=self.settings.base_url)
        content = self._content_of(envelope)
        reader.pieces.append(content)
        reader.usage = envelope.get("usage") if isinstance(envelope.get("usage"), Mapping) else None
        reader.done = True
        on_token(content)
        return reader

    def _read_chunk(self, reader: ChunkReader, payload: str, on_token: TokenSink) -> None:
        try:
            text = reader.read(payload)
        except StreamError as exc:
            if exc.from_server:
                raise _Transient("server", redact(str(exc), self.settings.api_key)) from exc
            raise LLMBadResponse(str(exc), base_url=self.settings.base_url) from exc
        if text:
            on_token(text)

    def _given_up(self, failure: _Transient, reader: ChunkReader) -> Exception:
        """A failure before the first piece may be retried; after it, the pieces are out: raised at once."""
        if not reader.pieces:
            return failure
        return self._exhausted(failure, 1)

    def _check_status(self, response: aiohttp.ClientResponse, body: bytes) -> None:
        """A 429 or 5xx is transient, any other status but 2xx the request's fault (:class:`LLMRequestRejected`)."""
        status = response.status
        if _succeeded(status):
            return
        message = self._provider_message(body, response.reason)
        if status == HTTPStatus.TOO_MANY_REQUESTS:
            raise _Transient("rate_limited", message, parse_retry_after(response.headers.get(HEADER_RETRY_AFTER)))
        if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            raise _Transient("server", f"{status}: {message}", status=status)
        raise LLMRequestRejected(self.settings.base_url, status, message)

    def _provider_message(self, body: bytes, reason: str | None) -> str:
        """The provider's own words (OpenAI ``error.message`` or the body), with the key redacted."""
        message = _text(body)
        try:
            error = json.loads(body).get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
        return excerpt(redact(message.strip() or reason or "", self.settings.api_key))

    def _kind_retries(self) -> dict[str, int]:
        return {"unreachable": self.settings.unreachable_retries, "timeout": self.settings.timeout_retries}

    def _most_attempts(self, kind: str) -> int:
        """The most attempts a call makes when every one fails with ``kind``."""
        return min(self.settings.max_retries, self._kind_retries().get(kind, self.settings.max_retries)) + 1

    def _exhausted(self, failure: _Transient, attempts: int) -> LLMUnavailable:
        base_url = self.settings.base_url
        if failure.kind == "timeout":
            return LLMTimeout(base_url, attempts, self.settings.timeout_s)
        if failure.kind == "rate_limited":
            return LLMRateLimited(base_url, attempts, failure.detail, failure.retry_after_s)
        if failure.kind == "unreachable":
            return LLMUnavailable(base_url, attempts, failure.detail,
                                  "check that the model server is running and listens at that address")
        return LLMUnavailable(base_url, attempts, failure.detail, status=failure.status)


def _encoded(body: dict[str, Any]) -> bytes:
    """A request's JSON body, encoded once for all its attempts.

    A schema goes in as the request holds it (a read-only view of plain JSON values, see
    :class:`~mirror.cognition.llm.JsonSchema`), not thawed into a copy per call: the view is
    written as the dict it shows."""
    return _BODY.encode(body).encode()


def _read_only(value: object) -> dict[str, Any]:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_read_only)


def _chat_encoded(request: ChatRequest, body: dict[str, Any]) -> bytes:
    """``_encoded(body)`` to the byte for a chat body of ``request`` (its ``messages`` are the
    request's), with the messages' texts written by :func:`~mirror.cognition.llm.json_string`,
    which remembers them: the history a request repeats is not encoded again."""
    parts = [
        f'"messages":{messages_json(request.messages, content_first=False)}' if key == "messages"
        else f"{json_string(key)}:{_BODY.encode(value)}"
        for key, value in body.items()
    ]
    return ("{" + ",".join(parts) + "}").encode()


def _text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def _succeeded(status: int) -> bool:
    return HTTPStatus.OK <= status < HTTPStatus.MULTIPLE_CHOICES


def _finish_reason(choices: object) -> str:
    """``choices[0].finish_reason`` of a completion, ``stop`` when it gives none."""
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        reason = choices[0].get("finish_reason")
        if isinstance(reason, str) and reason:
            return reason
    return "stop"

__all__ = ["LLMSettings", "OpenAIChatClient", "StructuredOutputMode", "parse_retry_after"]
