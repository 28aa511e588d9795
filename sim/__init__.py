"""The deterministic OpenAI-compatible model simulator (``mirror sim-llm``): the one stand-in for a
model that tests, benchmarks and the demo use, always over real loopback HTTP.

``server`` (the ASGI app, its threaded server, and the docstring describing every endpoint),
``routes`` (one handler function per endpoint), ``state`` (the per-app counters and fault
script), ``settings`` (settings and the seeded fault and latency schedule), ``content`` (what it
says: pure functions from a request to content), ``memory``, ``reflection``, ``curate`` and ``persona`` (its
answers to Mirror's memory stage, to its reflection, to the CuRaTe judge and to the persona mind's
steps and order judge, read from the request), ``errors``.

A room beside the layers, usable by every layer's tests: it imports only ``mirror.projections``
(it counts tokens as Mirror estimates them), ``mirror.events.errors`` and the root helpers
(``mirror.serving``, ``mirror.processes``). Nothing in the runtime imports it.
"""

__all__: list[str] = []
