"""The thinking modes, listed once: the pipeline, the HTTP API, the CLI and the evals all read this.

A root helper (no imports of its own) because the CLI needs the list for its options, and
importing ``mirror.cognition`` would cost every command ~0.2 s; the modes' meaning lives with
the pipeline (:mod:`mirror.cognition.pipeline`).
"""

from typing import Literal, get_args

__all__ = ["MODES", "Mode"]

Mode = Literal["baseline", "threads_only", "controller_only", "full"]
"""``baseline`` (the Talker alone), ``threads_only``, ``controller_only``, ``full`` (both thinkers)."""
MODES: tuple[Mode, ...] = get_args(Mode)
