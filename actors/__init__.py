"""Actors: what runs Mirror — processes, servers, benchmarks and the ``mirror`` CLI.

Ray conversation actors and the HTTP gateway arrive with the runtime issue; modules here are
imported by path (``mirror.actors.sim_llm``, ``mirror.actors.processes``, …) so that importing
the package never starts or imports a server.
"""

__all__: list[str] = []
