"""The OpenAI-compatible API: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any client of the OpenAI Chat Completions protocol (the official SDKs, chat front ends, agent
frameworks) talks to Mirror here; the native API (``/v1/conversations/...``) is unchanged.

Lives here: the routes (``routes``), the request's reading and the response and chunk shapes
(``shapes``), where a transcript places the turn among the conversation's branches (``transcript``), the model names and the mind and mode each selects (``catalog``), and the OpenAI
error body these routes answer with (``errors``; :mod:`mirror.gateway.failures` asks
:func:`~mirror.gateway.openai.errors.is_openai_path` which shape to answer with).

May import the rest of the gateway (runtime, relay, the personas routes' mind choice), the
actors' handles and results, and ``cognition`` for the Talker's settings; nothing in the gateway
outside this package imports it but the route list and the failure handlers.
"""

__all__: list[str] = []
