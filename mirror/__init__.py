"""Mirror: an event-sourced actor runtime for LLM conversations that think between turns.

The layers are sub-packages: ``mirror.events`` (what happened), ``mirror.projections``
(state folded from events), ``mirror.cognition`` (what to think), ``mirror.actors`` (Ray,
HTTP, CLI) and ``mirror.replay`` (re-reading and re-running history).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
