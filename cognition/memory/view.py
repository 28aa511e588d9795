"""Recall results and memory items as JSON-ready data, for the HTTP API and the CLI.

Why a module of its own: the memory endpoint, its tests and any tool that shows a recall must
print the *same* numbers recall computed, so the conversion lives in one pure place, next to
the dataclasses it reads. Floats are passed through unrounded (a client comparing a recall it
made itself with the API's gets equality, not closeness); vectors never appear, only their
sizes. Every list comes in a deterministic order, so two answers over one log are equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from mirror.projections.beliefs import BeliefState, ReviewItem, review_id
from mirror.projections.edges import EdgeState

from .recall import RecallResult
from .render import DEFAULT_MAX_CHARS, render_recall


def edge_view(edge: EdgeState) -> dict[str, Any]:
    """An edge with its ``contradicted_by`` keys as lists (JSON has no tuples)."""
    view = asdict(edge)
    view["contradicted_by"] = [list(key) for key in edge.contradicted_by]
    return view


def sorted_edges(edges: Iterable[EdgeState]) -> list[EdgeState]:
    """Edges by ``(src, relation, dst)``: unique per edge, so the order is total."""
    return sorted(edges, key=lambda edge: edge.key)


def sorted_beliefs(beliefs: Iterable[BeliefState]) -> list[BeliefState]:
    """Beliefs oldest first (``created``), ties by id: the order they entered the conversation."""
    return sorted(beliefs, key=lambda belief: (belief.created, belief.belief_id))


def sorted_reviews(reviews: Iterable[ReviewItem]) -> list[ReviewItem]:
    """Review items by the seq that opened them, ties by their (unique) key."""
    return sorted(reviews, key=lambda item: (item.seq, item.key))


def recall_view(result: RecallResult, *, max_chars: int = DEFAULT_MAX_CHARS) -> dict[str, Any]:
    """A recall as data: each item's ranks and scores, topics, edges, reviews and the Talker's block.

    ``items[i]`` carries ``bm25_rank`` and ``vector_rank`` (from 1; ``None`` when that
    retriever did not find it), ``fused`` (the RRF sum), ``strength`` (decay at ``now``) and
    ``score`` (``fused · strength``, what orders them). ``rendered`` is exactly what
    :func:`render_recall` gives the Talker.
    """
    return {
        "query": result.query,
        "now": result.now,
        "items": [asdict(item) for item in result.items],
        "topics": list(result.topics),
        "edges": [edge_view(edge) for edge in result.edges],
        "reviews": [
            {"review_id": review_id(review.belief_id, review.opposed_id), **asdict(review)}
            for review in result.reviews
        ],
        "rendered": render_recall(result, max_chars),
    }


__all__ = ["edge_view", "recall_view", "sorted_beliefs", "sorted_edges", "sorted_reviews"]
