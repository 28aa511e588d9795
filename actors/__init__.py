"""Actors: what runs Mirror — processes, servers, benchmarks and the ``mirror`` CLI.

Conversation, ingester, gateway and recompute-driver actors on Ray, the HTTP gateway, the
embedded stack, benchmarks and the CLI. Modules here are imported by path (``mirror.actors.llm.sim.server``, ``mirror.actors.stack.processes``, …) so that importing
the package never starts or imports a server.
"""

__all__: list[str] = []
