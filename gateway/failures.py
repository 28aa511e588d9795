"""How the gateway answers what failed behind it: a JSON body that says what and where, and a log line.

- a dependency that is down — the broker (:class:`~mirror.events.errors.BusError`) or a log's
  owner (:class:`~mirror.events.errors.LogUnavailable`) — is a 503 with ``Retry-After``;
- the model (:class:`~mirror.cognition.errors.LLMError`, raised in the conversation's process
  and carried across Ray with its fields) is a 503 with ``Retry-After`` where asking again can
  help (no server listening, no answer in time, 429 or 502/503/504 from it) and a 502 where it
  cannot (a 4xx, another 5xx, an answer that is not a usable completion). The body names the
  model's URL and the stage whose call failed (``talker``);
- anything else is a JSON 500 naming the error, never uvicorn's plain ``Internal Server Error``.

The body is the native API's (``{"detail": ...}``) everywhere but on the OpenAI-compatible routes
(:mod:`mirror.gateway.openai`), which answer the same statuses and headers with OpenAI's error
body (``{"error": {"message", "type", "param", "code"}}``).

Every answer of 500 or more is also one warning line of the ``mirror.gateway.failures`` logger
(method, path, status, the detail), so whoever runs the gateway sees the cause without asking
the client: ``mirror up`` relays these lines from its gateway processes to its stderr
(:mod:`mirror.stack.log_relay`). An unexpected error's traceback goes to the log too, after its line.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from mirror.cognition.errors import LLMError, LLMRateLimited, LLMUnavailable
from mirror.events.errors import BusError, LogUnavailable
from mirror.gateway.openai.errors import error_body, is_openai_path
from mirror.gateway.runtime import RETRY_AFTER_S

__all__ = ["RETRYABLE_MODEL_STATUSES", "install_failure_handlers", "model_failure_status"]

log = logging.getLogger(__name__)

RETRYABLE_MODEL_STATUSES = frozenset({429, 502, 503, 504})
"""What a model server may answer that says "later", not "never": a turn that got one is a 503."""


def install_failure_handlers(app: FastAPI) -> None:
    """Register the handlers of this module on ``app`` (Starlette's handler type takes any ``Exception``)."""
    app.add_exception_handler(LogUnavailable, _unavailable)
    app.add_exception_handler(BusError, _unavailable)
    app.add_exception_handler(LLMError, _model_failed)  # type: ignore[arg-type]  # narrower than Starlette's (Request, Exception) signature, as FastAPI documents
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]  # same
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]  # same
    app.add_exception_handler(Exception, _unexpected)


def model_failure_status(exc: LLMError) -> tuple[int, int | None]:
    """The status a failed model call is answered with, and the ``Retry-After`` seconds of a 503."""
    if isinstance(exc, LLMUnavailable) and (exc.status is None or exc.status in RETRYABLE_MODEL_STATUSES):
        wait = exc.retry_after_s if isinstance(exc, LLMRateLimited) else None
        return 503, max(RETRY_AFTER_S, math.ceil(wait)) if wait else RETRY_AFTER_S
    return 502, None


def _answer(request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    """``body`` (the native shape), or on the OpenAI-compatible routes the OpenAI error body."""
    if is_openai_path(request.url.path):
        detail = body.get("detail")
        message = detail if isinstance(detail, str) else str(detail)
        body = error_body(status, message)
    return JSONResponse(body, status_code=status, headers=headers)


def _failed(request: Request, status: int, detail: str) -> None:
    log.warning("%s %s answered %d: %s", request.method, request.url.path, status, detail)


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 with ``Retry-After`` for a dependency that is down; the detail names what is down."""
    _failed(request, 503, str(exc))
    return _answer(request, 503, {"detail": str(exc)}, {"Retry-After": str(RETRY_AFTER_S)})


async def _model_failed(request: Request, exc: LLMError) -> JSONResponse:
    """502 or 503 (:func:`model_failure_status`) naming the model's URL, the stage and the error."""
    model_url = getattr(exc, "base_url", None) or request.app.state.runtime.settings.runtime.llm.base_url
    stage = exc.stage
    detail = (f"the {stage}'s model call failed: {exc}" if stage else f"a model call failed: {exc}")
    if model_url not in detail:
        detail += f" (model at {model_url})"
    status, retry_after = model_failure_status(exc)
    _failed(request, status, detail)
    return _answer(request, status, {"detail": detail, "error": type(exc).__name__, "stage": stage, "model_url": model_url},
                   {"Retry-After": str(retry_after)} if retry_after else None)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """FastAPI's own answer; logged first when it is a 5xx (a route's 502, 503 or 504)."""
    if exc.status_code >= 500:
        _failed(request, exc.status_code, str(exc.detail))
    if is_openai_path(request.url.path):
        body = error_body(exc.status_code, str(exc.detail), getattr(exc, "code", None), getattr(exc, "param", None))
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
    return await http_exception_handler(request, exc)


async def _invalid(request: Request, exc: RequestValidationError) -> Response:
    """FastAPI's 422 for a body that does not parse; OpenAI's error body on its routes, naming the first problem."""
    if not is_openai_path(request.url.path):
        return await request_validation_exception_handler(request, exc)
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else str(first.get("msg", "invalid request"))
    return JSONResponse(error_body(422, message, "invalid_request", where or None), status_code=422)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    """A JSON 500 naming the error; its traceback goes to the log after the line."""
    detail = f"internal error: {type(exc).__name__}: {exc}"
    log.error("%s %s answered 500: %s", request.method, request.url.path, detail, exc_info=exc)
    return _answer(request, 500, {"detail": detail, "error": type(exc).__name__})
