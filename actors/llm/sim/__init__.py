"""`mirror sim-llm`: the deterministic OpenAI-compatible simulator.

``server`` (the ASGI app, its threaded server, and the docstring describing every endpoint),
``routes`` (one handler function per endpoint), ``state`` (the per-app counters and fault
script), ``settings`` (settings and the seeded fault and latency schedule), ``content`` (what it
says: pure functions from a request to content), ``memory`` (its answers to Mirror's memory
stage, read from the request).
"""

__all__: list[str] = []
