"""Decay for many beliefs at once, as an estimate that orders candidates before the exact value.

``projections.beliefs.strength`` is the truth, one belief at a time (~1.5 µs each in Python).
With 200 fused candidates that was a quarter of a recall at 10,000 beliefs. This table keeps
each belief's decay inputs in arrays (``last_reinforced``, the half-life from
``projections.beliefs.half_life_days``, the floor from the constants) and evaluates the same
formula in numpy for all candidates at once; recall then computes the exact ``strength`` only
for the few candidates whose estimate could still reach the top, so results never depend on
the estimate's last bit (see ``recall.MemoryIndex._fuse``).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from mirror.projections.beliefs import BeliefState, half_life_days
from mirror.projections.constants import BELIEF_STRENGTH_FLOOR, SECONDS_PER_DAY

from ._ranking import GrowingArray

ESTIMATE_TOLERANCE = 1e-9
"""Relative error allowed between the numpy estimate and ``strength`` (both float64: ~1e-15 in fact)."""


class DecayTable:
    """Per slot: when the belief was last reinforced, its half-life in days, and its floor."""

    def __init__(self) -> None:
        self._reinforced = GrowingArray(np.float64)
        self._half_life = GrowingArray(np.float64)
        self._floor = GrowingArray(np.float64)

    @staticmethod
    def _inputs(item: object) -> tuple[float, float, float]:
        belief = cast(BeliefState, item)
        return belief.last_reinforced, half_life_days(belief), BELIEF_STRENGTH_FLOOR[belief.memory_type]

    def append(self, item: object) -> None:
        for column, value in zip((self._reinforced, self._half_life, self._floor), self._inputs(item), strict=True):
            column.append(value)

    def set(self, slot: int, item: object) -> None:
        for column, value in zip((self._reinforced, self._half_life, self._floor), self._inputs(item), strict=True):
            column.set(slot, value)

    def estimate(self, slots: np.ndarray, now: float) -> np.ndarray:
        """``max(floor, 0.5 ** (age_days / half_life))`` for each slot, age counted from 0."""
        age_days = np.maximum(0.0, (now - self._reinforced.view[slots]) / SECONDS_PER_DAY)
        return np.maximum(self._floor.view[slots], 0.5 ** (age_days / self._half_life.view[slots]))


__all__ = ["ESTIMATE_TOLERANCE", "DecayTable"]
