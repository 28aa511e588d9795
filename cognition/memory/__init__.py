"""Memory recall: which of a conversation's beliefs, causal edges and open review items a
message calls up, as a pure function of (items, query text, query vector, now).

``recall`` (:class:`MemoryIndex`, the per-conversation index kept between recalls, and
:func:`recall`, the same answer built from scratch), ``keyword`` (an incremental BM25 inverted
index), ``vectors`` (a growing float32 matrix, one product per query), ``graph`` (topics a
message mentions and the 2-hop walk over causal edges), ``fusion`` (reciprocal rank fusion),
``render`` (the bounded block the Talker reads), ``view`` (recalls and memory items as JSON
data for the API and the CLI), ``_text`` (the one tokenizer both the keyword
index and the topic finder use), ``_ranking`` (best-first selection with ties broken by id) and
``_decay`` (decay estimated in numpy, so exact ``strength`` runs only for likely winners).

The index is a cache derived from the items, never truth: dropping it and rebuilding it from
the projected beliefs gives the same recall, so replay reproduces every recall exactly.

Part of the cognition layer: may import ``mirror.projections`` (belief and edge state, decay),
``mirror.events``, the rest of ``mirror.cognition``, numpy and ``bm25s`` (its English stopword
list); never the runtime (``actors``, ``replay``).
"""

from .fusion import RRF_K, reciprocal_rank_fusion
from .graph import EdgeIndex
from .keyword import KeywordIndex
from .recall import (
    DEFAULT_DEPTH,
    DEFAULT_LIMIT,
    DEFAULT_MAX_EDGES,
    DEFAULT_MAX_REVIEWS,
    MemoryIndex,
    MemoryItem,
    Recallable,
    RecalledItem,
    RecalledReview,
    RecallResult,
    recall,
)
from .render import DEFAULT_MAX_CHARS, render_recall
from .vectors import VectorIndex
from .view import edge_view, recall_view, sorted_beliefs, sorted_edges, sorted_reviews

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_EDGES",
    "DEFAULT_MAX_REVIEWS",
    "RRF_K",
    "EdgeIndex",
    "KeywordIndex",
    "MemoryIndex",
    "MemoryItem",
    "RecallResult",
    "Recallable",
    "RecalledItem",
    "RecalledReview",
    "VectorIndex",
    "edge_view",
    "recall",
    "recall_view",
    "reciprocal_rank_fusion",
    "render_recall",
    "sorted_beliefs",
    "sorted_edges",
    "sorted_reviews",
]
