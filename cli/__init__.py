"""The ``mirror`` command line: one module per command group, the config file, logging and
the HTTP client the client commands use.

``app`` (the root app and ``main``, the console entry point; it registers everything below),
``options`` (the options several groups share, defined once), ``serve`` (up, node, ingest, nats,
sim-llm), ``client`` (demo, chat, status, events tail; what they show is in ``client_commands``, and for
the persona mind in ``persona_client``: the chat's mood line, ``demo --mind persona``),
``replay`` (replay state|diff|verify, recompute), ``prompts`` (prompts export|diff), ``persona`` (persona show|export|push|list), ``tenants`` (and ``tenants remove``: forget a whole tenant), ``bench`` (with ``bench_lifecycle``), ``log``, ``evals``,
``memory``, ``reflection`` (portrait, reflections, reflect), ``chaos``, ``forget`` (erase a conversation), ``lifecycle`` (export, import),
``top`` (a live view of a stack's metrics, drawn by ``top_view``);
``config_file`` (``mirror.toml`` as click's default map), ``gateway_client`` (the HTTP client
of a running stack), ``tables`` (tables that fit the terminal with every id whole), ``help_layout``
(``--help`` that fits 80 columns), ``logging_setup``, ``errors``.

The top room: may import every room (the harness, the stack, the simulator, the gateway) and every
layer; nothing imports it. The stack it starts is where adapters are chosen.
"""

__all__: list[str] = []
