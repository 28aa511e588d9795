"""Hybrid recall: BM25 and cosine ranks fused by RRF, re-scored by decay, plus edges and reviews.

For a message (its text and its embedding) at time ``now`` (the recall's own timestamp):

1. **Keyword**: BM25 over the statements' tokens under the index's analyzer (``_text``: Snowball
   stems by default); items sharing no token with the message are absent.
2. **Vector**: cosine with the message's embedding; items without a vector are absent.
3. **Fusion**: each ranking keeps its best ``depth`` items (ranks from 1); ``fused = Σ 1/(60 +
   rank)`` over the rankings an item is in (``fusion``).
4. **Decay**: ``score = fused · strength(item, now)`` (``projections.beliefs.strength``); the
   best ``limit`` by ``(-score, belief_id)``.
5. **Edges**: the 2-hop walk forward from the edge nodes the message mentions (``graph``).
6. **Reviews**: open review items with a side among the recalled items, with both statements.

Everything is a pure function of (items, edges, reviews, query text, query vector, now): no
clock, no randomness, and every tie breaks by id, so replay recomputes the exact recall from
the logged query vector. :class:`MemoryIndex` is the incremental cache that makes this cheap at
scale (~1 ms at 10,000 beliefs); :func:`recall` builds one from scratch for a single answer.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

import numpy as np

from mirror.cognition.embeddings.port import unpack_vector
from mirror.projections.beliefs import BeliefState, ReviewItem, strength
from mirror.projections.edges import EdgeState

from ._decay import ESTIMATE_TOLERANCE, DecayTable
from ._ranking import IdOrder
from ._text import DEFAULT_ANALYZER, Analyzer, analyze, check_analyzer
from .fusion import RRF_K
from .graph import EdgeIndex
from .keyword import KeywordIndex
from .vectors import VectorIndex

DEFAULT_LIMIT = 5
DEFAULT_DEPTH = 10
"""How many items of each single ranking go into the fusion (twice the recall's limit).

Not "all of them": RRF adds the two terms, so an item deep in both lists outscores one first in
only one — at depth 100, rank 20 in both (2/80) beats rank 1 in one (1/61). Over a memory of
251 sentences (the memory eval's pooled figures, MiniLM) fused recall@5 was 0.50 at depth 100,
0.70 at 10 and 0.72 at 5, against 0.73 for the vector ranking alone; with the simulator's
embeddings 0.23 / 0.31 / 0.30. 10 keeps the small memories' figures (0.886 either way) and most
of the gain. Recorded in each ``recall`` event (``depth``), so older recalls replay as made."""
DEFAULT_MAX_EDGES = 8
DEFAULT_MAX_REVIEWS = 3


@runtime_checkable
class Recallable(Protocol):
    """What recall reads from a belief: :class:`BeliefState` (v2, with ``embedding``) fits.

    ``embedding`` is float32 little-endian bytes (``pack_vector``) or an array; empty or
    missing means the belief has no vector. ``kind`` (``belief`` or ``open_loop``) is read when
    present.
    """

    @property
    def belief_id(self) -> str: ...
    @property
    def statement(self) -> str: ...
    @property
    def memory_type(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def last_reinforced(self) -> float: ...
    @property
    def recall_count(self) -> int: ...


@dataclass(frozen=True, slots=True, eq=False)
class MemoryItem:
    """A belief as recall sees it, for callers without a :class:`BeliefState` (benchmarks, evals)."""

    belief_id: str
    statement: str
    embedding: bytes | np.ndarray = b""
    memory_type: str = "standard"
    confidence: float = 0.6
    last_reinforced: float = 0.0
    recall_count: int = 0
    kind: str = "belief"


@dataclass(frozen=True, slots=True)
class RecalledItem:
    """One recalled belief and how it got there. Ranks count from 1; ``None`` = not in that list."""

    belief_id: str
    statement: str
    kind: str
    bm25_rank: int | None
    vector_rank: int | None
    fused: float
    strength: float
    score: float


@dataclass(frozen=True, slots=True)
class RecalledReview:
    """An open contradiction touching a recalled belief, with both statements to show."""

    belief_id: str
    opposed_id: str
    seq: int
    kind: str
    statement: str
    opposed_statement: str


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What one recall found: items best first, the mentioned topics, edges, reviews."""

    query: str
    now: float
    items: tuple[RecalledItem, ...]
    topics: tuple[str, ...] = ()
    edges: tuple[EdgeState, ...] = ()
    reviews: tuple[RecalledReview, ...] = ()
    depth: int = 0
    """How many items of each single ranking went into the fusion."""
    analyzer: str = DEFAULT_ANALYZER
    """The keyword ranking's tokenizer (``_text.ANALYZERS``)."""

    @property
    def belief_ids(self) -> tuple[str, ...]:
        return tuple(item.belief_id for item in self.items)


def _vector_of(item: Recallable) -> np.ndarray | None:
    embedding = getattr(item, "embedding", None)
    if embedding is None or len(embedding) == 0:
        return None
    if isinstance(embedding, bytes | bytearray | memoryview):
        return unpack_vector(bytes(embedding))
    return np.asarray(embedding, dtype=np.float32).reshape(-1)


def _fingerprint(item: Recallable) -> tuple[str, bytes]:
    # What the indexes were built from: a change means re-indexing, anything else is metadata.
    vector = _vector_of(item)
    return item.statement, b"" if vector is None else vector.astype("<f4").tobytes()


class MemoryIndex:
    """One conversation's beliefs and edges, indexed for recall; a cache, never truth.

    Beliefs only grow, so :meth:`upsert` appends in O(statement words + dimensions). An upsert
    of a known belief with the same statement and vector (a reinforcement, a recall count)
    replaces only what decay reads; a changed statement or vector marks the index for a rebuild
    before the next recall. The answer never depends on insertion order (the tests check it
    against an index built in another order and against brute force).
    """

    def __init__(
        self, items: Iterable[Recallable] = (), edges: Iterable[EdgeState] = (), *, analyzer: str = DEFAULT_ANALYZER,
    ) -> None:
        self.analyzer: Analyzer = check_analyzer(analyzer)
        self._reset()
        self._edges = EdgeIndex()
        for item in items:
            self.upsert(item)
        for edge in edges:
            self.upsert_edge(edge)

    def _reset(self) -> None:
        self._keyword = KeywordIndex()
        self._vectors = VectorIndex()
        self._ids: list[str] = []
        self._id_order = IdOrder()
        self._records: list[Recallable] = []
        self._fingerprints: list[tuple[str, bytes]] = []
        self._slot_of: dict[str, int] = {}
        self._decay = DecayTable()
        self._stale = False

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, belief_id: object) -> bool:
        return belief_id in self._slot_of

    @property
    def edge_count(self) -> int:
        return len(self._edges)

    def upsert(self, item: Recallable) -> None:
        """Add a belief, or take a known belief's new numbers (confidence, reinforcement, recalls)."""
        fingerprint = _fingerprint(item)
        slot = self._slot_of.get(item.belief_id)
        if slot is None:
            self._slot_of[item.belief_id] = len(self._ids)
            self._ids.append(item.belief_id)
            self._id_order.append(item.belief_id)
            self._records.append(item)
            self._decay.append(item)
            self._fingerprints.append(fingerprint)
            if not self._stale:
                self._keyword.add(analyze(item.statement, self.analyzer))
                self._vectors.add(_vector_of(item))
            return
        self._records[slot] = item
        self._decay.set(slot, item)
        if self._fingerprints[slot] != fingerprint:
            self._fingerprints[slot] = fingerprint
            self._stale = True

    def sync(self, items: Mapping[str, Recallable]) -> None:
        """Bring the index up to a projected ``belief_id -> belief`` map (new and changed beliefs)."""
        for belief_id, item in items.items():
            slot = self._slot_of.get(belief_id)
            if slot is None or self._records[slot] is not item:
                self.upsert(item)

    def upsert_edge(self, edge: EdgeState) -> None:
        self._edges.upsert(edge)

    def _rebuild(self) -> None:
        records = self._records
        self._reset()
        for item in records:
            self.upsert(item)

    def rankings(
        self, query: str, query_vector: np.ndarray | bytes | None, *, depth: int = DEFAULT_DEPTH
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The two single rankings recall fuses, as belief ids best first: (keyword, vector).

        For evals and the memory endpoint, which show what each retriever found on its own.
        """
        if self._stale:
            self._rebuild()
        keyword, vector = self._rank(query, query_vector, depth)
        return tuple(self._ids[slot] for slot in keyword), tuple(self._ids[slot] for slot in vector)

    def _rank(self, query: str, query_vector: np.ndarray | bytes | None, depth: int) -> tuple[list[int], list[int]]:
        if isinstance(query_vector, bytes | bytearray | memoryview):
            query_vector = unpack_vector(bytes(query_vector))
        id_order = self._id_order.view
        keyword, _ = self._keyword.rank(analyze(query, self.analyzer), depth, id_order)
        vector, _ = self._vectors.rank(query_vector, depth, id_order)
        return keyword, vector

    def recall(
        self,
        query: str,
        query_vector: np.ndarray | bytes | None,
        now: float,
        *,
        limit: int = DEFAULT_LIMIT,
        depth: int = DEFAULT_DEPTH,
        max_edges: int = DEFAULT_MAX_EDGES,
        reviews: Iterable[ReviewItem] = (),
        max_reviews: int = DEFAULT_MAX_REVIEWS,
    ) -> RecallResult:
        """The ``limit`` best beliefs for the message at ``now``, with topics, edges and reviews."""
        if self._stale:
            self._rebuild()
        keyword_ranking, vector_ranking = self._rank(query, query_vector, depth)
        items = self._fuse(keyword_ranking, vector_ranking, now, limit)
        topics = self._edges.topics(query)
        return RecallResult(
            query=query,
            now=now,
            depth=depth,
            analyzer=self.analyzer,
            items=items,
            topics=topics,
            edges=self._edges.walk(topics, now, limit=max_edges),
            reviews=self._relevant_reviews(items, reviews, max_reviews),
        )

    def _fuse(self, keyword: list[int], vector: list[int], now: float, limit: int) -> tuple[RecalledItem, ...]:
        # Candidates are visited by estimated score (fused x numpy decay); the exact strength is
        # computed as each is visited, and the walk stops once an estimate (with tolerance)
        # cannot reach the limit-th best exact score. Exact, for a handful of strength() calls.
        # Only the ~200 ranked slots are touched: nothing here grows with the index.
        if limit <= 0 or not (keyword or vector):
            return ()
        ranks = np.concatenate((np.arange(1, len(keyword) + 1), np.arange(1, len(vector) + 1))).astype(np.float64)
        slots, inverse = np.unique(np.asarray(keyword + vector, dtype=np.int64), return_inverse=True)
        # bincount adds in input order (keyword term, then vector term): the same float sums as
        # rrf_term(a) + rrf_term(b).
        fused = np.bincount(inverse, weights=1.0 / (RRF_K + ranks), minlength=slots.shape[0])
        estimate = fused * self._decay.estimate(slots, now)
        best: list[tuple[float, str, int, float, float]] = []  # (-score, id, slot, fused, strength), sorted
        for position in np.argsort(-estimate, kind="stable").tolist():
            if len(best) == limit and estimate[position] * (1.0 + ESTIMATE_TOLERANCE) < -best[-1][0]:
                break
            slot = int(slots[position])
            decay = strength(cast(BeliefState, self._records[slot]), now)
            fused_score = float(fused[position])
            entry = (-(fused_score * decay), self._ids[slot], slot, fused_score, decay)
            if len(best) < limit or entry[:2] < best[-1][:2]:
                insort(best, entry, key=lambda item: item[:2])
                del best[limit:]
        return tuple(
            self._recalled(slot, _rank_in(keyword, slot), _rank_in(vector, slot), fused_score, decay)
            for _, _, slot, fused_score, decay in best
        )

    def _recalled(
        self, slot: int, keyword_rank: int | None, vector_rank: int | None, fused: float, decay: float
    ) -> RecalledItem:
        record = self._records[slot]
        return RecalledItem(
            belief_id=record.belief_id,
            statement=record.statement,
            kind=str(getattr(record, "kind", "belief")),
            bm25_rank=keyword_rank,
            vector_rank=vector_rank,
            fused=fused,
            strength=decay,
            score=fused * decay,
        )

    def _relevant_reviews(
        self, items: tuple[RecalledItem, ...], reviews: Iterable[ReviewItem], limit: int
    ) -> tuple[RecalledReview, ...]:
        position = {item.belief_id: index for index, item in enumerate(items)}
        relevant = [
            review for review in reviews if review.belief_id in position or review.opposed_id in position
        ]
        relevant.sort(
            key=lambda review: (
                min(position.get(review.belief_id, len(items)), position.get(review.opposed_id, len(items))),
                review.seq,
                review.key,
            )
        )
        return tuple(
            RecalledReview(
                belief_id=review.belief_id,
                opposed_id=review.opposed_id,
                seq=review.seq,
                kind=review.kind,
                statement=self._statement(review.belief_id),
                opposed_statement=self._statement(review.opposed_id),
            )
            for review in relevant[: max(0, limit)]
        )

    def _statement(self, belief_id: str) -> str:
        slot = self._slot_of.get(belief_id)
        return "" if slot is None else self._records[slot].statement


def _rank_in(ranking: list[int], slot: int) -> int | None:
    """``slot``'s rank (from 1) in ``ranking``, ``None`` when absent; read for the few recalled items only."""
    try:
        return ranking.index(slot) + 1
    except ValueError:
        return None


def recall(
    items: Iterable[Recallable],
    query: str,
    query_vector: np.ndarray | bytes | None,
    now: float,
    *,
    edges: Iterable[EdgeState] = (),
    reviews: Iterable[ReviewItem] = (),
    limit: int = DEFAULT_LIMIT,
    depth: int = DEFAULT_DEPTH,
    max_edges: int = DEFAULT_MAX_EDGES,
    max_reviews: int = DEFAULT_MAX_REVIEWS,
    analyzer: str = DEFAULT_ANALYZER,
) -> RecallResult:
    """One recall from scratch: the same answer :meth:`MemoryIndex.recall` gives over these items."""
    return MemoryIndex(items, edges, analyzer=analyzer).recall(
        query, query_vector, now, limit=limit, depth=depth, max_edges=max_edges, reviews=reviews, max_reviews=max_reviews
    )


__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_EDGES",
    "DEFAULT_MAX_REVIEWS",
    "MemoryIndex",
    "MemoryItem",
    "Recallable",
    "RecallResult",
    "RecalledItem",
    "RecalledReview",
    "recall",
]
