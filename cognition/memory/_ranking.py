"""Best-first selection shared by the keyword and vector indexes, with ties broken by id.

Why not a plain ``argsort``: ties must break by item id (not by insertion slot) so that two
indexes built in different orders rank alike, and sorting all N items costs O(N log N) per
query. ``np.partition`` finds the ``depth``-th best score in O(N); every item scoring at least
that is then sorted by ``(-score, id order)`` with ``np.lexsort``. The id order is an integer per
slot (:class:`IdOrder`), kept between queries: sorting ~100 kept items by their string ids in
Python cost ~0.07 ms per ranking at 10,000 items, ``lexsort`` on integers ~0.01 ms.
"""

from __future__ import annotations

from bisect import bisect_left

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


def top_slots(scores: np.ndarray, candidates: np.ndarray | None, depth: int, id_order: np.ndarray) -> list[int]:
    """The ``depth`` best of ``candidates`` (slots into ``scores``; ``None`` = every slot), best first.

    Order: higher :func:`rounded` score first, then smaller id (``id_order[slot]``, the slot's
    position among the ids sorted: :attr:`IdOrder.view`). Equal to rounding every
    candidate's score, sorting by that key and keeping the first ``depth``; but only the items
    near the top are rounded and sorted (rounding is monotone, so preselecting on the raw
    scores with :data:`_ROUNDING_MARGIN` loses none).
    """
    values = scores if candidates is None else scores[candidates]
    count = values.shape[0]
    if depth <= 0 or count == 0:
        return []
    keep = _near_top(values, depth) if count > depth else np.arange(count)
    slots = keep if candidates is None else candidates[keep]
    best_first = np.lexsort((id_order[slots], -rounded(values[keep])))[:depth]
    return slots[best_first].tolist()


def _near_top(values: np.ndarray, depth: int) -> np.ndarray:
    """Positions of the values at least the ``depth``-th largest minus :data:`_ROUNDING_MARGIN`.

    ``0 < depth < len(values)``. Cut (a prefix of) ``values`` into ``depth`` blocks: each
    block's maximum is at least the smallest of those maxima, so at least ``depth`` values
    reach it, and it is a lower bound for the ``depth``-th largest. Only the values at or above
    it (~470 of 10,000 cosines in ``mirror bench recall``) are partitioned and compared again:
    ~0.03 ms at 10,000 cosines, against ~0.08 ms to partition and compare them all. When the
    margin reaches below the bound, every value is compared (the answer is the same).
    """
    pool: np.ndarray | None = None
    pooled = values
    block = values.shape[0] // depth
    if block >= _MIN_BLOCK:
        bound = values[: block * depth].reshape(depth, block).max(axis=1).min()
        pool = np.flatnonzero(values >= bound)
        pooled = values[pool]
    cut = pooled.shape[0] - depth
    threshold = np.float64(np.partition(pooled, cut)[cut]) - _ROUNDING_MARGIN  # float64: the margin survives float32
    if pool is None or threshold < bound:
        return np.flatnonzero(values >= threshold)
    return pool[pooled >= threshold]


_MIN_BLOCK = 4
"""Below this many values per block the bound prunes too little to pay for itself."""


class IdOrder:
    """Each slot's position among all ids sorted (an ``int64`` per slot), kept as ids arrive.

    Why incremental: a conversation adds a belief or two per turn and then recalls, so each new
    id is placed by bisection and the positions after it shift by one (O(N) in numpy, ~0.04 ms
    at 10,000, paid by the next recall). Many ids arriving before the next query (an index
    being built) are placed by one sort instead, when the order is next read (~4 ms for 10,000).
    """

    _BATCH = 32
    """Above this many pending ids, one sort of everything beats one bisection per id."""

    def __init__(self) -> None:
        self._sorted: list[str] = []
        self._positions = GrowingArray(np.int64)
        self._pending: list[tuple[str, int]] = []  # (id, slot) not yet placed

    def __len__(self) -> int:
        return len(self._positions)

    def append(self, item_id: str) -> int:
        """Give the next slot to ``item_id`` (ids are unique) and return the slot."""
        slot = self._positions.append(-1)
        self._pending.append((item_id, slot))
        return slot

    @property
    def view(self) -> np.ndarray:
        """Per slot, the position of its id in sorted order (valid until the next append)."""
        if len(self._pending) > self._BATCH:
            self._sort_all()
        for item_id, slot in self._pending:
            position = bisect_left(self._sorted, item_id)
            self._sorted.insert(position, item_id)
            positions = self._positions.view
            positions[positions >= position] += 1
            positions[slot] = position
        self._pending.clear()
        return self._positions.view

    def _sort_all(self) -> None:
        placed = self._positions.view
        known = np.flatnonzero(placed >= 0)
        pairs = sorted([*zip(self._sorted, known[np.argsort(placed[known])].tolist(), strict=True), *self._pending])
        self._sorted = [item_id for item_id, _ in pairs]
        placed[np.fromiter((slot for _, slot in pairs), dtype=np.int64, count=len(pairs))] = np.arange(len(pairs))
        self._pending.clear()


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


__all__ = ["SCORE_DECIMALS", "GrowingArray", "IdOrder", "rounded", "top_slots"]
