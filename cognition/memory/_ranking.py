"""Best-first selection shared by the keyword and vector indexes, with ties broken by id.

Why not a plain ``argsort``: ties must break by item id (not by insertion slot) so that two
indexes built in different orders rank alike, and sorting all N items costs O(N log N) per
query. ``np.partition`` finds the ``depth``-th best score in O(N); every item scoring at least
that is then sorted by ``(-score, id)`` in Python (a few hundred at most, unless many tie).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SCORE_DECIMALS = 9
"""Scores are rounded to this many decimals before ranking. Why: scores that are equal in
exact arithmetic (the same words in another order, ``a + b + c`` against ``c + b + a``) can differ
in the last bit, and which one wins would then be float noise; rounded, they tie and break by id."""


def rounded(scores: np.ndarray) -> np.ndarray:
    """``scores`` rounded to :data:`SCORE_DECIMALS` (float64, so a float32 cosine keeps its value)."""
    return np.round(scores.astype(np.float64, copy=False), SCORE_DECIMALS)


_ROUNDING_MARGIN = 1e-8
"""More than rounding to SCORE_DECIMALS can move a score (5e-10), so preselecting on raw scores
with this margin keeps every item that could tie or win after rounding."""


def top_slots(scores: np.ndarray, candidates: np.ndarray | None, depth: int, ids: Sequence[str]) -> list[int]:
    """The ``depth`` best of ``candidates`` (slots into ``scores``; ``None`` = every slot), best first.

    Order: higher :func:`rounded` score first, then smaller id. Equal to rounding every
    candidate's score, sorting by that key and keeping the first ``depth``; but only the items
    near the top are rounded and sorted (rounding is monotone, so preselecting on the raw
    scores with :data:`_ROUNDING_MARGIN` loses none).
    """
    values = scores if candidates is None else scores[candidates]
    count = values.shape[0]
    if depth <= 0 or count == 0:
        return []
    if count > depth:
        threshold = np.float64(np.partition(values, count - depth)[count - depth]) - _ROUNDING_MARGIN
        keep = np.flatnonzero(values >= threshold)  # compared in float64, so the margin survives float32
    else:
        keep = np.arange(count)
    slots = keep if candidates is None else candidates[keep]
    kept = rounded(values[keep]).tolist()
    ranked = sorted(zip(kept, slots.tolist(), strict=True), key=lambda pair: (-pair[0], ids[pair[1]]))
    return [slot for _, slot in ranked[:depth]]


class GrowingArray:
    """A 1-D or 2-D numpy array that grows by appending rows, doubling its capacity.

    Why: ``np.append`` copies everything on each call, which makes adding the 10,000th belief
    cost as much as building the index; doubling makes an append amortised O(row).
    """

    def __init__(self, dtype: np.dtype | type, width: int | None = None, capacity: int = 64) -> None:
        shape = (capacity,) if width is None else (capacity, width)
        self._data = np.zeros(shape, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, row: object) -> int:
        """Store ``row`` at the next slot and return that slot."""
        if self._size == self._data.shape[0]:
            grown = np.zeros((self._data.shape[0] * 2, *self._data.shape[1:]), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size] = row
        self._size += 1
        return self._size - 1

    def set(self, slot: int, row: object) -> None:
        self._data[slot] = row

    @property
    def view(self) -> np.ndarray:
        """The filled part (a view: valid until the next append)."""
        return self._data[: self._size]


__all__ = ["SCORE_DECIMALS", "GrowingArray", "rounded", "top_slots"]
