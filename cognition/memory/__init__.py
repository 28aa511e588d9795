"""Long-term memory: writing it (the memory stage) and calling it up (recall).

Writing — ``extract`` (the two schema-constrained calls of the memory stage, extraction and the
contradiction check: schemas, requests, strict parsing), ``gate`` (the dedup gate, the
contradiction decisions and the edge rules: pure functions from state and recorded vectors to
``belief`` / ``edge`` payloads) and ``stage`` (:func:`remember`, one all-or-nothing memory step
after the controller, and :func:`memory_behind`, which the writer's think loop asks). It
appends nothing itself: the :class:`~mirror.cognition.writer.ConversationWriter` does.

Recalling — ``recall`` (:class:`MemoryIndex`, the per-conversation index kept between recalls,
and :func:`recall`, the same answer built from scratch: a pure function of items, query text,
query vector and ``now``), ``keyword`` (an incremental BM25 inverted index), ``vectors`` (a
growing float32 matrix, one product per query), ``graph`` (topics a message mentions and the
2-hop walk over causal edges), ``fusion`` (reciprocal rank fusion), ``render`` (the bounded block
the Talker reads), ``view`` (recalls and memory items as JSON data for the API and the CLI),
``_text`` (the keyword analyzers — plain words, and the default Snowball stems — and the plain
word tokenizer the topic finder uses), ``_ranking`` (best-first
selection, ties broken by id) and ``_decay`` (decay estimated in numpy, so the exact
``strength`` runs only for likely winners). The index is a cache derived from the items, never
truth: rebuilt from the projected beliefs it gives the same recall, so replay reproduces every
recall exactly. ``turn`` is recall on the turn path: :data:`TURN_RECALL` (the one set of
parameters the Talker, replay and the memory API share), :func:`recall_for_turn` (embed the
message, recall, the ``recall`` event and the Talker's block; keyword-only when the embedder
fails) and :func:`replay_recall` (the same from a recorded vector).

Part of the cognition layer: may import the rest of ``mirror.cognition`` (the LLM and
:class:`~mirror.cognition.embeddings.Embedder` ports, prompts, the pipeline's result types),
``mirror.projections`` (state, decay, the confidence constants) and ``mirror.events``, plus
numpy, ``bm25s`` (its English stopword list) and PyStemmer (``Stemmer``); never the runtime (``actors``) or ``replay``.
"""

from ._text import ANALYZERS, DEFAULT_ANALYZER, analyze
from .extract import CONTRADICTION_SCHEMA, MEMORY_SCHEMA
from .fusion import RRF_K, reciprocal_rank_fusion
from .gate import OPPOSITE_RELATIONS, belief_id
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
from .stage import EMBEDDING_FAILED, RecordedStepFailure, memory_behind, remember
from .turn import TURN_RECALL, RecallSettings, TurnMemory, TurnRecall, recall_for_turn, replay_recall
from .vectors import VectorIndex
from .view import edge_view, recall_view, sorted_beliefs, sorted_edges, sorted_reviews

__all__ = [
    "ANALYZERS",
    "CONTRADICTION_SCHEMA",
    "DEFAULT_ANALYZER",
    "DEFAULT_DEPTH",
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_EDGES",
    "DEFAULT_MAX_REVIEWS",
    "EMBEDDING_FAILED",
    "MEMORY_SCHEMA",
    "OPPOSITE_RELATIONS",
    "RRF_K",
    "TURN_RECALL",
    "EdgeIndex",
    "KeywordIndex",
    "MemoryIndex",
    "MemoryItem",
    "RecallResult",
    "RecallSettings",
    "Recallable",
    "RecalledItem",
    "RecalledReview",
    "RecordedStepFailure",
    "TurnMemory",
    "TurnRecall",
    "VectorIndex",
    "analyze",
    "belief_id",
    "edge_view",
    "memory_behind",
    "recall",
    "recall_for_turn",
    "recall_view",
    "reciprocal_rank_fusion",
    "remember",
    "render_recall",
    "replay_recall",
    "sorted_beliefs",
    "sorted_edges",
    "sorted_reviews",
]
