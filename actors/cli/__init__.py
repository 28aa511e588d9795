"""The ``mirror`` command line: one module per command group, the config file, logging and
the HTTP client the client commands use.

The top of the actor layer: may import every other room of ``mirror.actors`` and every layer
below; nothing imports it. ``app.main`` is the console entry point.
"""

__all__: list[str] = []
