"""The HTTP gateway: the public API in front of the conversation actors.

Lives here: the FastAPI app, assembled (``app``); its routes, one module per group
(``routes/``); what its requests share and the ``Tenant``/``Runtime`` dependencies
(``runtime``); its settings (``settings``); the server-sent-events relay (``streaming``); the
Ray actor that serves it (``actor``); and the tenant registry behind bearer tokens (``tenants``). May import the conversation runtime
(``mirror.actors.conversation``, ``conversation_actor``, ``recompute_driver``), ``replay``,
``cognition`` and ``events`` — never the CLI, the stack or the benchmarks, which import it.
"""

__all__: list[str] = []
