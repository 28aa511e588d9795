"""Mirror: an event-sourced actor runtime for LLM conversations that think between turns.

The layers are sub-packages: ``mirror.events`` (what happened), ``mirror.projections``
(state folded from events), ``mirror.cognition`` (what to think), ``mirror.actors`` (running
it on Ray) and ``mirror.replay`` (re-reading and re-running history). Beside them stand
``mirror.gateway`` (the HTTP API), ``mirror.cli`` (the ``mirror`` command), ``mirror.stack``
(starting the parts), ``mirror.sim`` (the simulated model) and ``mirror.harness`` (benchmarks,
evals, chaos).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
