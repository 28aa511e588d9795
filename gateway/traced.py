"""A span per HTTP request (:mod:`mirror.tracing`): the first hop of a turn's trace.

An incoming W3C ``traceparent`` is continued (a client's or a proxy's trace goes on through
Mirror). The span is named by the matched route's template (``POST /v1/conversations/{conversation}/turns``),
known only once the router has run, so it is renamed at the end; Prometheus's scrapes
(``/metrics``, ``/metrics/targets``) and ``/healthz`` are not traced. With traces off the request
goes straight through.
"""

from __future__ import annotations

from opentelemetry.trace import StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirror import tracing

__all__ = ["RequestTraces", "UNTRACED"]

UNTRACED = frozenset({"/metrics", "/metrics/targets", "/healthz"})
"""Paths answered without a span: what a scraper or a health check asks every few seconds."""


class RequestTraces:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled() or scope["path"] in UNTRACED:
            return await self.app(scope, receive, send)
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        method = scope["method"]
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracing.incoming(headers, method, {"http.request.method": method, "url.path": scope["path"]}) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(StatusCode.ERROR, str(status))
