"""Reciprocal rank fusion: ``score(item) = Σ 1 / (RRF_K + rank)`` over the rankings it is in.

Why RRF: BM25 scores and cosines live on unrelated scales, and ranks need no calibration. Ranks
count from 1; an item absent from a ranking adds nothing to its score. With two rankings every
fused score lies in ``(0, 2 / (RRF_K + 1)]``, the top reached only by an item first in both.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

RRF_K = 60
"""The rank offset from Cormack et al. (2009), as the design fixes it."""

Key = TypeVar("Key", bound=Hashable)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[Key]], *, k: int = RRF_K) -> dict[Key, float]:
    """Each item's fused score over ``rankings`` (each best first, without repeats).

    Scores are summed in a fixed order per item (ranking order), so the result does not depend
    on how a caller built its dictionaries; the order of the rankings themselves cannot change
    a score beyond float rounding of a two-term sum, which is exact in both orders.
    """
    scores: dict[Key, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return scores


def rrf_term(rank: int | None, *, k: int = RRF_K) -> float:
    """One ranking's contribution: ``1 / (k + rank)``, or 0 for an item the ranking lacks."""
    return 0.0 if rank is None else 1.0 / (k + rank)


__all__ = ["RRF_K", "reciprocal_rank_fusion", "rrf_term"]
