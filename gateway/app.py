"""The multi-tenant HTTP gateway (FastAPI; OpenAPI at /docs): the app, assembled.

Every route but ``/healthz`` and ``/metrics`` (Prometheus's) needs ``Authorization: Bearer <token>``; the token maps to exactly
one tenant, and every identifier a route touches is scoped by that tenant — no route can name
another tenant's conversation. Turns go to the conversation through its typed handle (:class:`~mirror.actors.handle.ConversationHandle`)
(uvicorn → actor handle measured ~1.8 ms p50 here, against ~7.5 ms for Ray Serve's proxy, so
the gateway is plain uvicorn processes behind any load balancer). Reads go to the log's owner
over NATS; ``/stream`` relays the conversation's subject as server-sent events.

Bad input changes nothing: identifiers, message size, malformed JSON and unknown conversations
are refused with a 4xx that says what was wrong, before any actor or append is involved.

What lives where: this module builds the app and serves it on a thread (:class:`GatewayServer`);
the shared state and the ``Tenant``/``Runtime`` dependencies are in :mod:`.runtime`, the
settings in :mod:`.settings`, the routes in :mod:`.routes` (one module per group), the tenants'
limits in :mod:`.limits` (a middleware: 429 with ``Retry-After`` and ``x-ratelimit-*`` headers), the
server-sent-events relay in :mod:`.streaming`, the answers to failures (JSON 502/503/500, each
logged as one line) in :mod:`.failures`.
"""

from __future__ import annotations

from fastapi import FastAPI

from mirror import metrics, tracing
from mirror.gateway.failures import install_failure_handlers
from mirror.gateway.limits import LimitsMiddleware
from mirror.gateway.observed import RequestObserved
from mirror.gateway.routes import ROUTERS
from mirror.gateway.runtime import Conversations, GatewayRuntime
from mirror.gateway.settings import DEFAULT_MAX_FINISHED_JOBS, DEFAULT_MAX_MESSAGE_BYTES, GatewaySettings
from mirror.serving import ThreadedServer

__all__ = [
    "DEFAULT_MAX_FINISHED_JOBS", "DEFAULT_MAX_MESSAGE_BYTES", "KEEP_ALIVE_S", "GatewayServer", "GatewaySettings",
    "create_app",
]

KEEP_ALIVE_S = 75
"""How long the gateway keeps a client's idle connection open (uvicorn's default is 5 s).

Longer than the idle pools of the clients and proxies in front of it (httpx 5 s, aiohttp 15 s,
nginx's and AWS ALB's upstream 60 s; a load balancer should close first, so its pool never
reuses a connection the gateway is closing), so the server is not the side that closes an idle
connection in the middle of a client's reuse. An idle connection costs a socket, no CPU.
"""


def create_app(settings: GatewaySettings, conversations: Conversations | None = None) -> FastAPI:
    """The ASGI app; ``conversations(key) -> handle`` defaults to the settings' Ray placement.

    Each call builds its own :class:`GatewayRuntime` (``app.state.runtime``), so two apps in
    one process share nothing.
    """
    app = FastAPI(title="Mirror", summary="LLM conversations that think between turns", version="0.1.0",
                  # FastAPI's own OpenTelemetry spans and metrics, off: Mirror's middlewares (.traced,
                  # .observed) record each request once, under Mirror's names. On, FastAPI asks the
                  # providers on every request whether they are configured (issue 38: a share of the
                  # gateway's CPU per turn) and, with traces on, records each request a second time.
                  telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False})
    app.state.runtime = GatewayRuntime.build(settings, conversations)
    install_failure_handlers(app)
    app.add_middleware(LimitsMiddleware)  # per-tenant limits, shared on the broker (mirror.gateway.limits)
    metrics.configure(enabled=settings.runtime.metrics)
    tracing.configure(settings.runtime.traces, "gateway")
    # Outermost: every answer counted by route and status (429s included), and a span per request
    # that continues an incoming traceparent (mirror.metrics, mirror.tracing).
    app.add_middleware(RequestObserved)
    for router in ROUTERS:
        app.include_router(router)
    return app


class GatewayServer(ThreadedServer):
    """The gateway on a loopback port, served by uvicorn in a background thread (tests, `mirror up`)."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(app, name="mirror gateway", host=host, port=port, start_timeout=15.0, keep_alive_s=KEEP_ALIVE_S)
