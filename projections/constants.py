"""Every number the belief and edge arithmetic uses, in one place.

The values come from the design (the Citadel cognitive loop): half-lives and floors per memory
type, the reinforcement step, the cap, the edge origins and the edge decay rules. Changing one
changes what every replay folds to, so a change here is a new ``PROJECTION_VERSION``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

SECONDS_PER_DAY = 86_400.0

# ----------------------------------------------------------------------- confidence, shared

CONFIDENCE_MIN = 0.0
CONFIDENCE_CAP = 0.99
"""No belief or edge is ever certain: confidence stays within [CONFIDENCE_MIN, CONFIDENCE_CAP]."""

REINFORCE_STEP = 0.05
"""Added when the dedup gate finds the same belief or edge again."""

# ----------------------------------------------------------------------------------- beliefs

CONSISTENT_BOOST = 0.02
"""Added to each related belief when a new belief is judged consistent with it."""

BELIEF_HALF_LIFE_DAYS: Mapping[str, float] = MappingProxyType(
    {"standard": 56.0, "emotional": 168.0, "operational": 28.0, "location": 14.0}
)
BELIEF_STRENGTH_FLOOR: Mapping[str, float] = MappingProxyType(
    {"standard": 0.10, "emotional": 0.10, "operational": 0.02, "location": 0.01}
)
DEDUP_COSINE: Mapping[str, float] = MappingProxyType({"belief": 0.90, "open_loop": 0.85})
"""By ``Belief.kind``: a candidate at least this similar to an existing belief reinforces it.

Used by the memory stage's dedup gate, not by the fold; here so the design's numbers sit together.
"""
RECALLS_TO_EXTEND_HALF_LIFE = 3
"""A belief recalled this many times or more decays more slowly ..."""
RECALLED_HALF_LIFE_FACTOR = 2.0
"""... its half-life is multiplied by this."""

REFLECTION_DECAY_FACTOR = 0.5
"""A reflection's applied ``decay`` decision multiplies the belief's confidence by this."""

# ------------------------------------------------------------------------------------- edges

EDGE_INITIAL_CONFIDENCE: Mapping[str, float] = MappingProxyType(
    {"conversation": 0.6, "world": 0.75, "data": 0.6, "user_confirmed": 0.9}
)
EDGE_DECAY_EXEMPT_DAYS = 7.0
"""An edge reinforced at most this many days ago does not decay at all."""
EDGE_HALF_LIFE_DAYS = 90.0
EDGE_CONFIDENCE_FLOOR = 0.15
"""Decay never takes an edge below this (nor raises one that was already below it)."""
EDGE_PRUNE_BELOW = 0.10
EDGE_PRUNE_AFTER_DAYS = 180.0
"""An edge below EDGE_PRUNE_BELOW and unchanged for this long is a pruning candidate."""

__all__ = [
    "SECONDS_PER_DAY",
    "CONFIDENCE_MIN",
    "CONFIDENCE_CAP",
    "REINFORCE_STEP",
    "CONSISTENT_BOOST",
    "BELIEF_HALF_LIFE_DAYS",
    "BELIEF_STRENGTH_FLOOR",
    "DEDUP_COSINE",
    "RECALLS_TO_EXTEND_HALF_LIFE",
    "RECALLED_HALF_LIFE_FACTOR",
    "REFLECTION_DECAY_FACTOR",
    "EDGE_INITIAL_CONFIDENCE",
    "EDGE_DECAY_EXEMPT_DAYS",
    "EDGE_HALF_LIFE_DAYS",
    "EDGE_CONFIDENCE_FLOOR",
    "EDGE_PRUNE_BELOW",
    "EDGE_PRUNE_AFTER_DAYS",
]
