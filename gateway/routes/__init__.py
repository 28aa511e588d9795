"""The gateway's routes, one module per group; :func:`mirror.gateway.app.create_app` includes them all.

``health`` (liveness), ``metrics`` (Prometheus: this process's metrics, every process's endpoint), ``turns`` (a user message → the conversation's actor), ``conversations``
(list, summary, paged events), ``replay`` (time travel: state at a seq or time, diff),
``recompute`` (re-think on a branch in a driver actor), ``stream`` (server-sent events),
``memory`` (beliefs, edges, review items, and what a message recalls), ``reflection`` (the
portrait, each reflection and what it changed, a forced reflection), ``personas`` (the persona store, a
conversation's choice of mind, the character's state), ``why`` (what produced an event, a belief or an
edge), ``forget`` (erase a conversation: a job to poll), ``transfer`` (export and import archives), ``tenants`` (forget a whole tenant: a job to poll); the OpenAI-compatible routes live in a room of their own (:mod:`mirror.gateway.openai`), and so
does the inspector's page (:mod:`mirror.gateway.inspector`); both are listed last.
Each route takes the tenant and the shared :class:`~mirror.gateway.runtime.GatewayRuntime`
as dependencies (``Tenant``, ``Runtime``) and keeps no state of its own.
"""

from mirror.gateway.inspector import routes as inspector
from mirror.gateway.openai import routes as openai
from mirror.gateway.routes import (
    conversations,
    forget,
    health,
    memory,
    metrics,
    personas,
    recompute,
    reflection,
    replay,
    stream,
    tenants,
    transfer,
    turns,
    why,
)

ROUTERS = (health.router, turns.router, conversations.router, replay.router, recompute.router, stream.router,
           memory.router, reflection.router, personas.router, why.router, forget.router, transfer.router, tenants.router, openai.router, inspector.router,
           metrics.router)
"""In the order the routes were declared (so is ``/openapi.json``); newer groups last."""

__all__ = ["ROUTERS"]
