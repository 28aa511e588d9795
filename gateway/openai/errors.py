"""The OpenAI error body, ``{"error": {"message", "type", "param", "code"}}``, for this package's routes only.

The status codes are Mirror's own (400, 401, 404, 409, 413, 422, 503 with ``Retry-After``, 502,
504); ``type`` follows OpenAI's names for them, ``code`` says what was wrong in a word a client
can test (``missing_conversation``, ``unsupported_parameter``, ``model_not_found``, ...).
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

__all__ = ["OPENAI_PATHS", "OpenAIError", "error_body", "error_type", "is_openai_path"]

OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 502: "upstream_error",
          503: "service_unavailable", 504: "timeout"}
_CODES = {401: "invalid_api_key", 404: "not_found", 409: "setting_conflict", 413: "message_too_large",
          422: "invalid_request", 502: "model_failed", 503: "unavailable", 504: "timeout"}


def is_openai_path(path: str) -> bool:
    """Whether a request's path is one of this package's routes, also under ``/c/{conversation}``
    (so its errors take this shape)."""
    if path.startswith("/c/"):
        _name, _, rest = path[3:].partition("/")
        path = "/" + rest
    return any(path == prefix or path.startswith(prefix + "/") for prefix in OPENAI_PATHS)


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type(status), "param": param,
                      "code": code or _CODES.get(status, "invalid_request" if status < 500 else "internal_error")}}


class OpenAIError(HTTPException):
    """An HTTP error of these routes with its OpenAI ``code`` and ``param``."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers=headers)
        self.code = code
        self.param = param
