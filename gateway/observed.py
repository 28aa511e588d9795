"""Each request counted and traced: the gateway's outermost ASGI middleware, one layer for both.

**Metrics** (:mod:`mirror.metrics`): requests counted by route template and status. The route
is the matched route's template (``/v1/conversations/{conversation}/turns``), never the raw path,
so the series stay bounded whatever ids clients send; a request no route matched counts as
``unmatched``. The duration runs to the end of the response body (a stream's whole stream). It
sits outside the limits' middleware, so a 429 it answers is counted too.

**Traces** (:mod:`mirror.tracing`): a span per HTTP request, the first hop of a turn's trace. An
incoming W3C ``traceparent`` is continued (a client's or a proxy's trace goes on through Mirror).
The span is named by the matched route's template (``POST /v1/conversations/{conversation}/turns``),
known only once the router has run, so it is renamed at the end; Prometheus's scrapes
(``/metrics``, ``/metrics/targets``) and ``/healthz`` are not traced.

One layer, not two (issue 38): each layer of a request's path wraps its ``send`` again, and this
one needs the status once for both. With both off the request goes straight through.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirror import metrics, tracing

__all__ = ["RequestObserved", "UNTRACED"]

UNTRACED = frozenset({"/metrics", "/metrics/targets", "/healthz"})
"""Paths answered without a span: what a scraper or a health check asks every few seconds."""


class RequestObserved:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        counted = metrics.enabled()
        traced = tracing.enabled() and scope["path"] not in UNTRACED
        if not counted and not traced:
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500  # what a request that raised before answering is counted as

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        if not traced:
            try:
                await self.app(scope, receive, send_status)
            finally:
                metrics.request_done(getattr(scope.get("route"), "path", "unmatched"), scope["method"], status,
                                     time.perf_counter() - started)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        method = scope["method"]
        with tracing.incoming(headers, method, {"http.request.method": method, "url.path": scope["path"]}) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                _ended(span, method, route, status)
                if counted:
                    metrics.request_done(route or "unmatched", method, status, time.perf_counter() - started)


def _ended(span: Any, method: str, route: str | None, status: int) -> None:
    if route is not None:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(StatusCode.ERROR, str(status))
