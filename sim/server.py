"""`mirror sim-llm`: a deterministic OpenAI-compatible LLM, served over loopback HTTP.

Why it exists: no model provider is reachable from tests and benchmarks, and a real one is
neither deterministic nor free. This is the one permitted stand-in, and it is a real HTTP
server, so the client under test runs its real transport, timeouts and retries.

Endpoints (all JSON, save for the `garbage` fault):

    POST /v1/chat/completions   OpenAI request and response shape (one choice); `stream: true`
                                gives `chat.completion.chunk` events, one per token (a word
                                with the whitespace before it), `settings.token_delay_ms`
                                apart, the usage chunk when `stream_options.include_usage`,
                                then `data: [DONE]`; the tokens join to the same content
    POST /v1/embeddings         unit vectors from a hashed bag of words (`dimensions` honoured)
    GET  /v1/models             the configured model
    GET  /healthz               {"status": "ok"}
    POST /_sim/script           {"faults": ["429", "ok", ...]} appended to the fault script
    POST /_sim/reset            clear counters and script; the fault sequence starts again
    GET  /_sim/stats            calls, chat_calls, embedding_calls, faults, in_flight,
                                max_in_flight, max_chat_in_flight, authorized_calls,
                                bad_requests, script, response_formats, last_response_format

`response_formats` counts the chat calls by the `response_format.type` they sent ("none" when
they sent no `response_format`), so its values add up to `chat_calls`; `last_response_format`
is the last chat call's `response_format` exactly as received (null when absent). Together they
let a test see what a client sends for structured output.

Faults (by `--script`/`/_sim/script` or `--fault KIND=RATE`), each taken by one chat call
(drawn faults only by calls asking for one of `settings.fault_schemas`, when given: a test can
fail one stage, e.g. reflection's `reflection_decay` and `reflection_portrait` calls):

    429         HTTP 429 rate_limit_error, with `Retry-After` when settings.retry_after_s is set
    500         HTTP 500 server_error
    timeout     holds the request for timeout_hang_s (or until the client leaves), then HTTP 504
    malformed   HTTP 200 whose content is cut short: not valid JSON, even for a JSON format
    empty       HTTP 200 whose content is ""
    garbage     HTTP 200 whose body is not JSON at all (an HTML page, as a misrouted proxy sends)
    no_choices  HTTP 200 whose envelope has `"choices": []` (as a content filter answers)
    no_usage    HTTP 200, the normal completion without its `usage` field
    cut         streamed: the role chunk and the first two tokens, then the body ends (no
                finish_reason, no `[DONE]`), as a server that crashed mid-answer; not
                streamed: as `malformed`
    echo_error  HTTP 400 invalid_request_error whose message repeats the last user message's
                text, as providers quote what they reject; lets a test check that a client
                redacts secrets from provider text. Headers are never echoed.

Invariants:

- Content is a pure function of the request's model, messages, temperature, max_tokens,
  max_completion_tokens, response_format and seed: the same request gets byte-identical
  content (and id and `created`) from any server with any settings.
- Faults and latency are a pure function of (settings, call index): the script is consumed
  first, then a PRNG seeded by (seed, index) draws from `fault_rates`. Only chat completions
  take faults; every model call (chat or embeddings; embeddings their own
  `embedding_latency` when set) takes latency, counted from the request's
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

from collections import deque
from types import TracebackType
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from mirror.serving import ServerUnavailable, ThreadedServer
from mirror.sim.routes import ROUTES, http_error
from mirror.sim.settings import (
    FAULT_KINDS,
    NO_FAULT,
    LatencyModel,
    SimSettings,
    drawn_fault,
    parse_fault_rate,
    parse_latency,
    parse_script,
)
from mirror.sim.state import SimState

__all__ = [
    "FAULT_KINDS", "NO_FAULT", "LatencyModel", "SimLLMServer", "SimSettings", "create_app",
    "drawn_fault", "parse_fault_rate", "parse_latency", "parse_script",
]


def create_app(settings: SimSettings) -> Starlette:
    """The simulator as an ASGI app; its :class:`SimState` lives on ``app.state.sim``, so two apps
    never share it. The handlers are in :mod:`mirror.sim.routes`."""
    app = Starlette(exception_handlers={HTTPException: http_error}, routes=ROUTES)
    app.state.sim = SimState(settings, parse_latency(settings.latency), script=deque(settings.script))
    return app


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
