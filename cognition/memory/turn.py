"""Recall on the turn path: what the Talker is given from memory before it answers, as an event.

One place for the parameters (:data:`TURN_RECALL`): the live Talker, ``replay verify``,
recompute and the gateway's ``GET …/memory`` all recall with them, so the API answers exactly
what the Talker got. They are code, not per-conversation configuration, because the ``recall``
event does not record them: a replay must be able to recall again with the same numbers.

The turn's recall costs one embedding call (the user's message) and no LLM call. ``now`` is
the timestamp the ``recall`` and ``turn`` events carry, so replay recomputes decay at the same
instant from the event itself.

When the embedder fails (unreachable, too slow for the turn's budget, or a vector of the wrong
size) the turn still answers: recall runs **keyword-only** and the ``recall`` event records
that — ``query_embedding`` empty while ``embedding_model`` names the embedder that was asked.
Keyword-only recall is a pure function of the state and the message, so replay reproduces it
too. (No belief with a vector: nothing to compare a vector with, so no call is made and
``embedding_model`` stays empty.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

import numpy as np

from mirror.cognition.embeddings.port import Embedder, pack_vector, unpack_vector
from mirror.cognition.errors import CognitionError, EmbeddingShapeError
from mirror.events.payloads import Recall
from mirror.projections.beliefs import review_id
from mirror.projections.edges import EdgeKey, EdgeState
from mirror.projections.state import ConversationState

from ._text import DEFAULT_ANALYZER, WORDS_ANALYZER
from .recall import DEFAULT_DEPTH, DEFAULT_LIMIT, DEFAULT_MAX_EDGES, DEFAULT_MAX_REVIEWS, MemoryIndex, RecallResult
from .render import DEFAULT_MAX_CHARS, render_recall

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecallSettings:
    """How much the Talker recalls: items, ranking depth, edges, reviews, the block's characters,
    and the keyword ranking's analyzer (``_text.ANALYZERS``).

    ``embed_timeout_s`` bounds the message's embedding on the turn path: past it the turn
    answers with keyword-only recall rather than waiting out the client's retries.
    """

    limit: int = DEFAULT_LIMIT
    depth: int = DEFAULT_DEPTH
    max_edges: int = DEFAULT_MAX_EDGES
    max_reviews: int = DEFAULT_MAX_REVIEWS
    max_chars: int = DEFAULT_MAX_CHARS
    embed_timeout_s: float = 2.0
    analyzer: str = DEFAULT_ANALYZER


TURN_RECALL = RecallSettings()
"""The one set of recall parameters the Talker, replay and the memory API use."""


@dataclass(frozen=True, slots=True)
class TurnRecall:
    """A turn's recall: the event to append before the ``turn``, and the block the Talker reads."""

    payload: Recall
    block: str
    result: RecallResult
    embed_ms: float = 0.0
    """How long the message's embedding took (0: none was asked), for timing the turn."""


class TurnMemory:
    """A conversation's :class:`MemoryIndex` kept between turns, synced from the state each time.

    A cache, never truth: synced from the projected beliefs and edges (identity checks, so an
    unchanged item costs a dict lookup), it answers what an index built from scratch would.
    """

    def __init__(self, analyzer: str = DEFAULT_ANALYZER) -> None:
        self.index = MemoryIndex(analyzer=analyzer)
        self._edges: dict[EdgeKey, EdgeState] = {}

    def synced(self, state: ConversationState) -> MemoryIndex:
        self.index.sync(state.beliefs)
        for key, edge in state.edges.items():
            if self._edges.get(key) is not edge:
                self.index.upsert_edge(edge)
                self._edges[key] = edge
        return self.index


def wants_recall(state: ConversationState) -> bool:
    """A turn recalls when the conversation has something to recall (memory on is the caller's check)."""
    return len(state.beliefs) > 0


def wants_vector(state: ConversationState) -> bool:
    """The message is embedded only when some belief has a vector to compare it with."""
    return any(belief.embedding for belief in state.beliefs.values())


def recall_at(
    state: ConversationState, query: str, vector: np.ndarray | bytes | None, now: float, *,
    memory: TurnMemory | None = None, settings: RecallSettings = TURN_RECALL,
) -> RecallResult:
    """The recall for ``query`` from ``state`` at ``now``: pure, the same live, in replay and in the API.

    ``memory`` is used when it tokenizes as ``settings`` asks; otherwise (a replayed recall made
    with another analyzer) an index is built for this one recall.
    """
    if memory is None or memory.index.analyzer != settings.analyzer:
        memory = TurnMemory(settings.analyzer)
    index = memory.synced(state)
    return index.recall(
        query, vector, now, limit=settings.limit, depth=settings.depth, max_edges=settings.max_edges,
        reviews=state.review_items.values(), max_reviews=settings.max_reviews,
    )


def recall_event(result: RecallResult, vector: np.ndarray | bytes | None, model: str, fingerprint: str) -> Recall:
    """The ``recall`` payload naming what ``result`` gave the Talker (with the query's vector)."""
    packed = b"" if vector is None else (bytes(vector) if isinstance(vector, bytes) else pack_vector(vector))
    return Recall(
        query=result.query, query_embedding=packed, embedding_model=model, query_fingerprint=fingerprint,
        belief_ids=result.belief_ids,
        review_ids=tuple(review_id(review.belief_id, review.opposed_id) for review in result.reviews),
        edges=tuple(edge.key for edge in result.edges), depth=result.depth, analyzer=result.analyzer,
    )


async def recall_for_turn(
    state: ConversationState, message: str, embedder: Embedder | None, now: float, *,
    memory: TurnMemory | None = None, settings: RecallSettings = TURN_RECALL,
) -> TurnRecall | None:
    """Embed ``message`` (one call, when a belief has a vector) and recall; ``None`` with no beliefs.

    Never raises for the embedder: its failure is a keyword-only recall (see the module docstring).
    """
    if not wants_recall(state):
        return None
    vector: np.ndarray | None = None
    model = fingerprint = ""
    embed_ms = 0.0
    if embedder is not None and wants_vector(state):
        model = embedder.model
        started = time.perf_counter()
        try:
            embedded = await asyncio.wait_for(embedder.embed([message]), settings.embed_timeout_s)
            vector, fingerprint = embedded.vectors[0], embedded.request_fingerprint
        except (CognitionError, TimeoutError, OSError) as exc:  # LLMError and EmbeddingError are CognitionErrors
            log.warning("%s: recall without a vector, the embedder failed: %r", state.key, exc)
        embed_ms = (time.perf_counter() - started) * 1000
    try:
        result = recall_at(state, message, vector, now, memory=memory, settings=settings)
    except EmbeddingShapeError as exc:  # a vector of another size than the beliefs': keyword-only
        log.warning("%s: recall without a vector, it does not fit the beliefs: %s", state.key, exc)
        vector, fingerprint = None, ""
        result = recall_at(state, message, None, now, memory=memory, settings=settings)
    return TurnRecall(recall_event(result, vector, model, fingerprint), render_recall(result, settings.max_chars),
                      result, embed_ms)


def replay_recall(
    state: ConversationState, recorded: Recall, now: float, *, settings: RecallSettings = TURN_RECALL,
) -> TurnRecall:
    """A recorded recall re-run from ``state`` with its recorded vector (none: keyword-only), its
    recorded ranking depth and keyword analyzer (a recall made before either changed is re-made as
    it was; :class:`~mirror.cognition.errors.UnknownAnalyzer` for an analyzer this Mirror lacks)."""
    vector = unpack_vector(recorded.query_embedding) if recorded.query_embedding else None
    if recorded.depth:
        settings = replace(settings, depth=recorded.depth)
    settings = replace(settings, analyzer=recorded.analyzer or WORDS_ANALYZER)
    result = recall_at(state, recorded.query, vector, now, settings=settings)
    payload = recall_event(result, recorded.query_embedding or None, recorded.embedding_model,
                           recorded.query_fingerprint)
    return TurnRecall(payload, render_recall(result, settings.max_chars), result)


__all__ = [
    "TURN_RECALL",
    "RecallSettings",
    "TurnMemory",
    "TurnRecall",
    "recall_at",
    "recall_event",
    "recall_for_turn",
    "replay_recall",
    "wants_recall",
    "wants_vector",
]
