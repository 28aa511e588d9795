"""Requests counted by route template and status: the gateway's outermost ASGI middleware.

The route is the matched route's template (``/v1/conversations/{conversation}/turns``), never the
raw path, so the series stay bounded whatever ids clients send; a request no route matched counts
as ``unmatched``. The duration runs to the end of the response body (a stream's whole stream). It
sits outside the limits' middleware, so a 429 it answers is counted too.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirror import metrics

__all__ = ["RequestMetrics"]


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not metrics.enabled():
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500  # what a request that raised before answering is counted as

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            metrics.request_done(getattr(route, "path", "unmatched"), scope["method"], status,
                                 time.perf_counter() - started)
