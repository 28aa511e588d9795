"""Vector ranking: cosine similarity against a float32 matrix kept between recalls.

Rows are normalised once when added, so a query costs one dot product per row. Why
``np.vecdot(matrix, query)`` rather than ``matrix @ query``: ``@`` hands the whole
matrix-vector product to OpenBLAS's ``sgemv``, which starts its own threads; on this machine
(2 cores shared by several processes) that product of 10,000 x 384 took 6-20 ms, against 0.4
ms with one thread. Scoping one thread to the call costs more than it saves
(``threadpoolctl.threadpool_limits(1)`` added ~0.4 ms per call) and is process-wide anyway
(OpenBLAS's ``openblas_set_num_threads_local`` changes every thread's count too). ``vecdot``
instead calls BLAS ``sdot`` once per row, which stays on the calling thread for rows this short
(measured: CPU time = wall time): 0.34-0.42 ms at 10,000 x 384, against
0.56-0.63 ms for numpy's own ``einsum`` loop, which this used before (and still uses on numpy
< 2, which lacks ``vecdot``). The two sum a row in a different order, so a cosine may differ
in its last float32 bit; scores are rounded to ``SCORE_DECIMALS`` before ranking either way
(``_ranking``). An approximate index (``usearch``, ``hnswlib``) would cost exactness (the
index must agree with brute force) for no need at this size.

Items without a vector (beliefs written before embeddings existed) are not in the ranking.
"""

from __future__ import annotations

import numpy as np

from ..errors import EmbeddingShapeError
from ._ranking import GrowingArray, top_slots


def _row_dots(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    if _vecdot is None:  # numpy < 2
        return np.einsum("ij,j->i", matrix, vector)
    return _vecdot(matrix, vector)


_vecdot = getattr(np, "vecdot", None)


def unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` as float32 scaled to length 1 (left at zero when it has no length)."""
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(array.astype(np.float64)))
    return array / np.float32(norm) if norm > 0.0 else array


class VectorIndex:
    """Unit rows numbered by slot, plus which slots really have a vector."""

    def __init__(self, *, capacity: int = 64) -> None:
        self._capacity = capacity
        self._rows: GrowingArray | None = None  # created with the first vector's width
        self._rows_width: int | None = None
        self._present = GrowingArray(np.bool_, capacity=capacity)
        self._missing = 0  # items without a vector; while 0 every slot is a candidate

    def __len__(self) -> int:
        return len(self._present)

    @property
    def dimensions(self) -> int | None:
        """The width of the stored vectors, fixed by the first one (``None`` before it)."""
        return self._rows_width

    def _check(self, vector: np.ndarray, what: str) -> None:
        if self._rows_width is not None and vector.shape[0] != self._rows_width:
            raise EmbeddingShapeError(
                "memory index",
                f"{what} has {vector.shape[0]} dimensions but the index holds {self._rows_width}-dimensional "
                "vectors; embed the query and the beliefs with the same model",
            )

    def add(self, vector: np.ndarray | None) -> int:
        """Store one item's vector (``None`` or empty: no vector) and return its slot."""
        array = None if vector is None else np.asarray(vector, dtype=np.float32).reshape(-1)
        if array is not None and array.size == 0:
            array = None
        if array is not None:
            if self._rows is None:
                self._rows_width = int(array.shape[0])
                self._rows = GrowingArray(np.float32, width=self._rows_width, capacity=self._capacity)
                for _ in range(len(self._present)):
                    self._rows.append(0.0)
            self._check(array, "a belief's embedding")
        if self._rows is not None:
            self._rows.append(unit(array) if array is not None else 0.0)
        self._missing += array is None
        return self._present.append(array is not None)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine of the query with every row (0 for items without a vector)."""
        if self._rows is None:
            return np.zeros(len(self), dtype=np.float32)
        direction = unit(query)
        self._check(direction, "the query's embedding")
        return _row_dots(self._rows.view, direction)

    def rank(self, query: np.ndarray | None, depth: int, id_order: np.ndarray) -> tuple[list[int], np.ndarray]:
        """The ``depth`` most similar slots with a vector, best first, ties by id (``id_order``: ``IdOrder.view``).

        An absent or zero-length query vector ranks nothing: a direction is needed to compare.
        """
        empty = np.zeros(len(self), dtype=np.float32)
        if query is None or self._rows is None:
            return [], empty
        array = np.asarray(query, dtype=np.float32).reshape(-1)
        if array.size == 0 or not np.any(array):
            return [], empty
        similarities = self.similarities(array)
        present = self._present.view
        candidates = None if self._missing == 0 else np.flatnonzero(present)
        return top_slots(similarities, candidates, depth, id_order), similarities


__all__ = ["VectorIndex", "unit"]
