"""Actors: what runs Mirror — Ray actors, the HTTP gateway, the CLI, the embedded stack, benchmarks.

The top layer: may import every layer below (replay, cognition, projections, events); nothing
below imports it. Rooms, each a module or sub-package whose docstring says what it may import:

- ``conversation`` (one live conversation in plain asyncio), ``conversation_actor`` (it as a Ray
  actor), ``directory`` (live actors per node, passivation), ``ingester_actor`` (the log's
  owner as a Ray actor), ``recompute_driver`` (recompute jobs as Ray tasks) — the runtime;
- ``gateway/`` — the HTTP API; ``stack/`` — the embedded stack and child processes;
  ``llm/`` — model servers Mirror starts (simulator, offline model); ``bench/`` — benchmarks;
  ``cli/`` — the ``mirror`` command line, the top of everything.

Modules are imported by path, so importing the package never starts or imports a server.
"""

__all__: list[str] = []
