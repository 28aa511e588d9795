"""The HTTP gateway: the public API in front of the conversation runtime.

Lives here: the FastAPI app, assembled (``app``); its routes, one module per group
(``routes/``); what its requests share and the ``Tenant``/``Runtime`` dependencies
(``runtime``), and the watch that ends its calls to a machine Ray declared dead (``node_watch``); its settings (``settings``); the server-sent-events relay (``streaming``); a streamed turn relayed from its conversation to a response (``relay``); the idempotency headers of a turn (``idempotency``);
the OpenAI-compatible API (``openai/``: chat completions and models, with OpenAI's shapes and error body); the inspector, a web page that watches a conversation's mind through the API (``inspector/``: its route and its static assets); its
answers to failures, JSON and one log line each, overload refusals summed up (``failures``), from the one table of what each error is answered with (``error_table``), and the
errors it raises itself (``errors``); the Ray actor that serves it in a process of its own (``actor``); and the tenant registry behind
bearer tokens, with each tenant's limits (``tenants``); the limits' enforcement, counted on the broker (``limits/``); its view of the hosts' model slots, refusing overload with no Ray hop (``slots``); the tenants' persona stores, in a key-value bucket of the broker (``personas``); each request counted by route template and status for Prometheus and traced as a span that continues an incoming ``traceparent``, in one middleware (``observed``).

May import the runtime (``mirror.actors``: conversation handles, recompute driver, settings),
``replay``, ``cognition``, ``projections``, ``events`` and the root helpers (``mirror.serving``);
never the stack, the harness or the CLI, which import it.
"""

__all__: list[str] = []
