"""`mirror sim-llm`: the deterministic OpenAI-compatible simulator.

``server`` (the ASGI app and its threaded server), ``settings`` (settings and the seeded fault
and latency schedule), ``content`` (what it says: pure functions from a request to content).
"""

__all__: list[str] = []
