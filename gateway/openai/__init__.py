"""The OpenAI-compatible API: ``POST /v1/chat/completions`` and ``GET /v1/models``, also under
``/c/{conversation}`` (a base URL that names the conversation).

Any client of the OpenAI Chat Completions protocol (the official SDKs, chat front ends, agent
frameworks) talks to Mirror here; the native API (``/v1/conversations/...``) is unchanged.

Lives here: the routes (``routes``), the request's reading and the response and chunk shapes
(``shapes``), which conversation a request names, in one order (``naming``), a front end's
background tasks answered statelessly (``background``), the model names and the mind and mode
each selects (``catalog``), and the OpenAI error body these routes answer with (``errors``;
:mod:`mirror.gateway.failures` asks :func:`~mirror.gateway.openai.errors.is_openai_path` which
shape to answer with), and where a transcript places the turn among the conversation's
branches (``transcript``).

May import the rest of the gateway (runtime, relay, the personas routes' mind choice), the
actors' handles and results, and ``cognition`` for the Talker's settings and model client; nothing in the gateway
outside this package imports it but the route list, the failure handlers and the limits'
middleware (which names a request's conversation as ``naming`` does).
"""

__all__: list[str] = []
