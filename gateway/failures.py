"""How the gateway answers what failed: the handlers that look each error up in :mod:`.error_table`.

The table decides (status, ``Retry-After``, OpenAI code, how the message is built); this module
only answers: in the native body (``{"detail": ..., **fields}``) everywhere but on the
OpenAI-compatible routes (:mod:`mirror.gateway.openai`), which answer the same statuses and
headers with OpenAI's error body (``{"error": {"message", "type", "param", "code"}}``). In short:

- a dependency that is down — the broker (:class:`~mirror.events.errors.BusError`), a log's
  owner (:class:`~mirror.events.errors.LogUnavailable`), a conversation's process — is a 503 with
  ``Retry-After``;
- the model (:class:`~mirror.cognition.errors.LLMError`, raised in the conversation's process
  and carried across Ray with its fields) is a 503 with ``Retry-After`` where asking again can
  help (no server listening, no answer in time, 429 or 502/503/504 from it) and a 502 where it
  cannot (a 4xx, another 5xx, an answer that is not a usable completion). The body names the
  model's URL and the stage whose call failed (``talker``);
- a tenant at one of its limits (:class:`~mirror.gateway.errors.LimitReached`) is a 429 with
  ``Retry-After`` and the ``x-ratelimit-*`` headers; on the OpenAI routes its ``type`` is
  ``rate_limit_error``, or ``insufficient_quota`` for a day's tokens used up;
- anything else is a JSON 500 naming the error, never uvicorn's plain ``Internal Server Error``.

A body that does not parse is FastAPI's own 422 (its list of problems); on the OpenAI routes
it is OpenAI's body naming the first problem.

Every answer of 500 or more is also one warning line of the ``mirror.gateway.failures`` logger
(method, path, status, the detail), so whoever runs the gateway sees the cause without asking
the client — but for turns refused for overload (the fair share's 503s and 429s), summed up in
one line every :data:`REFUSAL_SUMMARY_S` seconds instead (:class:`RefusalSummary`): ``mirror up`` relays these lines from its gateway processes to its stderr
(:mod:`mirror.stack.log_relay`). An unexpected error's traceback goes to the log too, after its line.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from mirror.cognition.errors import AdmissionRefused
from mirror.gateway.error_table import TABLE, Answer, answer
from mirror.gateway.openai.errors import error_body, is_openai_path

__all__ = ["REFUSAL_SUMMARY_S", "RefusalSummary", "install_failure_handlers", "respond"]

log = logging.getLogger(__name__)


def install_failure_handlers(app: FastAPI) -> None:
    """One handler for every class of the table (Starlette picks the most specific registered
    class of an error's MRO; the table's own lookup agrees), and the 422 of a body that does not parse."""
    app.state.refusals = RefusalSummary()
    for cls in TABLE:
        app.add_exception_handler(cls, _answered)
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]  # narrower than Starlette's (Request, Exception) signature, as FastAPI documents


def respond(request: Request, found: Answer) -> JSONResponse:
    """``found`` as a response: the native body, or on the OpenAI-compatible routes OpenAI's."""
    if is_openai_path(request.url.path):
        body = error_body(found.status, found.message, found.code, found.param)
        if found.openai_type is not None:
            body["error"]["type"] = found.openai_type
    else:
        body = {"detail": found.detail, **found.fields}
    return JSONResponse(body, status_code=found.status, headers=found.headers)


async def _answered(request: Request, exc: Exception) -> Response:
    found = answer(exc, request)
    if found.unexpected:
        log.error("%s %s answered %d: %s", request.method, request.url.path, found.status, found.message, exc_info=exc)
    elif isinstance(exc, AdmissionRefused):
        request.app.state.refusals.count(exc, found.status)
    elif found.status >= 500:
        log.warning("%s %s answered %d: %s", request.method, request.url.path, found.status, found.message)
    return respond(request, found)


REFUSAL_SUMMARY_S = 10.0
"""How often turns refused by the fair share are summed up in one warning line (never one line each)."""


class RefusalSummary:
    """Turns refused for overload, counted and logged as one line a window: an overloaded gateway
    refuses hundreds a second, and a line each would cost the CPU the admitted turns need.

    The first refusal of a window schedules its line ``window_s`` later: ``N turns refused in the
    last 10 s (503 ×n, 429 ×m): tenant-a 812, tenant-b 3; the last: <its message>``."""

    def __init__(self, window_s: float = REFUSAL_SUMMARY_S) -> None:
        self.window_s = window_s
        self._by_tenant: dict[str, int] = {}
        self._by_status: dict[int, int] = {}
        self._last = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    def count(self, refused: AdmissionRefused, status: int) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # the loop of the scheduled line is gone (a test's app served again)
            self.flush()
        if not self._by_tenant:
            self._loop = loop
            loop.call_later(self.window_s, self.flush)
        self._by_tenant[refused.tenant] = self._by_tenant.get(refused.tenant, 0) + 1
        self._by_status[status] = self._by_status.get(status, 0) + 1
        self._last = str(refused)

    def flush(self) -> None:
        if not self._by_tenant:
            return
        statuses = ", ".join(f"{status} ×{count}" for status, count in sorted(self._by_status.items()))
        tenants = ", ".join(f"{tenant} {count}" for tenant, count in sorted(self._by_tenant.items()))
        log.warning("%d turns refused for overload in the last %g s (%s): %s; the last: %s",
                    sum(self._by_tenant.values()), self.window_s, statuses, tenants, self._last)
        self._by_tenant, self._by_status = {}, {}



async def _invalid(request: Request, exc: RequestValidationError) -> Response:
    """FastAPI's 422 for a body that does not parse; OpenAI's error body on its routes, naming the first problem."""
    if not is_openai_path(request.url.path):
        return await request_validation_exception_handler(request, exc)
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else str(first.get("msg", "invalid request"))
    return JSONResponse(error_body(422, message, "invalid_request", where or None), status_code=422)
