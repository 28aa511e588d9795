"""Keyword ranking: BM25 over an inverted index that grows one document at a time.

Why hand-written rather than ``bm25s``: ``bm25s`` builds its sparse matrix in one pass and has
no way to add a document, and a conversation gains beliefs one turn at a time. Rebuilding a
``bm25s`` index of 10,000 beliefs took 140-600 ms here (2 shared cores), once per new belief;
adding a document to this index is O(its words), and a query touches only the postings of its
own words (~0.1 ms at 10,000 beliefs, see ``mirror bench recall``). The scoring is ``bm25s``'s
default ("lucene") variant, and the unit tests check the scores against ``bm25s`` itself:

    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d) = Σ_t idf(t) · tf / (tf + k1 · (1 - b + b · |d| / avgdl))     over the query's distinct words

N and avgdl are read at query time, so scores always reflect every document added so far.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ._ranking import GrowingArray, top_slots

BM25_K1 = 1.5
BM25_B = 0.75


class _Postings:
    """One word's documents and counts; the numpy copies are rebuilt only after an append."""

    __slots__ = ("slots", "counts", "_arrays")

    def __init__(self) -> None:
        self.slots: list[int] = []
        self.counts: list[int] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def append(self, slot: int, count: int) -> None:
        self.slots.append(slot)
        self.counts.append(count)
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.asarray(self.slots, dtype=np.int64), np.asarray(self.counts, dtype=np.float64))
        return self._arrays


class KeywordIndex:
    """BM25 over documents numbered 0, 1, 2… in the order they were added (their slots)."""

    def __init__(self, *, k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, _Postings] = {}
        self._lengths = GrowingArray(np.float64)
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, tokens: Sequence[str]) -> int:
        """Index one document's tokens (repeats counted) and return its slot."""
        slot = self._lengths.append(len(tokens))
        self._total_length += len(tokens)
        for word, count in sorted(Counter(tokens).items()):
            self._postings.setdefault(word, _Postings()).append(slot, count)
        return slot

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """Every document's BM25 score for the query (0 where it shares no word with it)."""
        documents = len(self)
        scores = np.zeros(documents, dtype=np.float64)
        if documents == 0 or self._total_length == 0:
            return scores
        lengths = self._lengths.view
        average = self._total_length / documents
        for word in sorted(set(query_tokens)):  # a fixed order: the same sum whatever the query's order
            postings = self._postings.get(word)
            if postings is None:
                continue
            slots, counts = postings.arrays()
            frequency = len(slots)
            idf = np.log1p((documents - frequency + 0.5) / (frequency + 0.5))
            norm = self.k1 * (1.0 - self.b + self.b * lengths[slots] / average)
            scores[slots] += idf * counts / (counts + norm)
        return scores

    def rank(self, query_tokens: Sequence[str], depth: int, id_order: np.ndarray) -> tuple[list[int], np.ndarray]:
        """The ``depth`` best-matching slots (score > 0), best first, ties by id (``id_order``: ``IdOrder.view``); and all scores."""
        scores = self.scores(query_tokens)
        return top_slots(scores, np.flatnonzero(scores > 0.0), depth, id_order), scores


__all__ = ["BM25_B", "BM25_K1", "KeywordIndex"]
