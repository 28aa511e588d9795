"""Causal edges ``src -relation-> dst``: confidence, contradiction flags, decay, 2-hop context.

Edges are keyed by ``(src, relation, dst)``. Like beliefs, they change only through events and
decay only when asked, so the fold does not depend on wall-clock time.

Invariants:

* ``0 <= confidence <= CONFIDENCE_CAP`` for every edge.
* Contradictory edges are flagged, never merged: each side lists the other in
  ``contradicted_by`` and keeps its own confidence.
* ``edge_confidence(edge, now)`` is non-increasing in ``now``, equals the stored confidence for
  the first ``EDGE_DECAY_EXEMPT_DAYS`` after a reinforcement, and never falls below
  ``min(EDGE_CONFIDENCE_FLOOR, confidence)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from mirror.events.payloads import Edge, EdgeOrigin

from ._frozen import FrozenMap
from .beliefs import clamp_confidence
from .constants import (
    EDGE_CONFIDENCE_FLOOR,
    EDGE_DECAY_EXEMPT_DAYS,
    EDGE_HALF_LIFE_DAYS,
    EDGE_INITIAL_CONFIDENCE,
    EDGE_PRUNE_AFTER_DAYS,
    EDGE_PRUNE_BELOW,
    REINFORCE_STEP,
    SECONDS_PER_DAY,
)
from .errors import UnhandledEvent

EdgeKey = tuple[str, str, str]
"""``(src, relation, dst)``."""


@dataclass(frozen=True, slots=True)
class EdgeState:
    """One causal edge. Timestamps are event timestamps (epoch seconds).

    ``last_reinforced`` drives decay; ``last_changed`` (any event touching the edge, a
    contradiction flag included) drives pruning. ``contradicted_by`` is sorted and unique.
    """

    src: str
    relation: str
    dst: str
    origin: EdgeOrigin
    confidence: float
    created: float
    last_reinforced: float
    last_changed: float
    contradicted_by: tuple[EdgeKey, ...] = ()

    @property
    def key(self) -> EdgeKey:
        return (self.src, self.relation, self.dst)

    @property
    def flagged(self) -> bool:
        """True once any other edge contradicted this one, or this one contradicted another."""
        return bool(self.contradicted_by)


Edges = FrozenMap[EdgeKey, EdgeState]


def initial_confidence(origin: str) -> float:
    """The confidence a new edge starts with, by where the claim came from."""
    try:
        return EDGE_INITIAL_CONFIDENCE[origin]
    except KeyError:
        raise UnhandledEvent(
            f"edge origin {origin!r} has no initial confidence; known origins are "
            f"{sorted(EDGE_INITIAL_CONFIDENCE)}"
        ) from None


# ------------------------------------------------------------------------------------- apply


def _asserted(edges: Edges, payload: Edge, timestamp: float) -> EdgeState:
    # Asserting an existing edge, or reinforcing a missing one, both mean "this edge, again";
    # an existing edge keeps its origin and gains one reinforcement step.
    existing = edges.get((payload.src, payload.relation, payload.dst))
    if existing is None:
        return EdgeState(
            src=payload.src,
            relation=payload.relation,
            dst=payload.dst,
            origin=payload.origin,
            confidence=clamp_confidence(initial_confidence(payload.origin)),
            created=timestamp,
            last_reinforced=timestamp,
            last_changed=timestamp,
        )
    return replace(
        existing,
        confidence=clamp_confidence(existing.confidence + REINFORCE_STEP),
        last_reinforced=timestamp,
        last_changed=timestamp,
    )


def _flagged(edge: EdgeState, by: EdgeKey, timestamp: float) -> EdgeState:
    if by in edge.contradicted_by:
        return replace(edge, last_changed=timestamp)
    return replace(edge, contradicted_by=tuple(sorted((*edge.contradicted_by, by))), last_changed=timestamp)


def apply_edge(edges: Edges, payload: Edge, *, timestamp: float) -> Edges:
    """The edges after one edge event stamped ``timestamp``."""
    if payload.operation not in ("assert", "reinforce", "contradict"):
        raise UnhandledEvent(
            f"edge operation {payload.operation!r} has no handler; "
            "known operations are ['assert', 'contradict', 'reinforce']"
        )
    edge = _asserted(edges, payload, timestamp)
    if payload.operation != "contradict" or payload.contradicts is None:
        return edges.set(edge.key, edge)
    opposed_key: EdgeKey = payload.contradicts
    opposed = edges.get(opposed_key)
    if opposed_key == edge.key:
        # An edge cannot contradict itself; what remains is an ordinary assertion.
        return edges.set(edge.key, edge)
    if opposed is None:
        # Nothing to flag on the other side: an edge this branch never saw is not invented,
        # but the new edge still remembers what it contradicts.
        return edges.set(edge.key, _flagged(edge, opposed_key, timestamp))
    return edges.set_many(
        ((edge.key, _flagged(edge, opposed_key, timestamp)), (opposed_key, _flagged(opposed, edge.key, timestamp)))
    )


# ------------------------------------------------------------------------------------- decay


def edge_confidence(edge: EdgeState, now: float) -> float:
    """The edge's confidence at ``now``.

    Reinforced within ``EDGE_DECAY_EXEMPT_DAYS``: the stored confidence. After that, decay
    starts from where the exemption ended (no step down on day 7):
    ``confidence * 0.5 ** ((days_since_reinforcement - exempt_days) / EDGE_HALF_LIFE_DAYS)``, held at
    ``EDGE_CONFIDENCE_FLOOR`` — unless the stored confidence is already below the floor, in
    which case it is returned as it is (decay never raises an edge).
    """
    days = max(0.0, (now - edge.last_reinforced) / SECONDS_PER_DAY)
    if days <= EDGE_DECAY_EXEMPT_DAYS:
        return edge.confidence
    decayed = edge.confidence * 0.5 ** ((days - EDGE_DECAY_EXEMPT_DAYS) / EDGE_HALF_LIFE_DAYS)
    return max(min(EDGE_CONFIDENCE_FLOOR, edge.confidence), decayed)


def _values(edges: Mapping[EdgeKey, EdgeState] | Iterable[EdgeState]) -> list[EdgeState]:
    return list(edges.values()) if isinstance(edges, Mapping) else list(edges)


def prune_candidates(edges: Mapping[EdgeKey, EdgeState] | Iterable[EdgeState], now: float) -> tuple[EdgeState, ...]:
    """Edges whose decayed confidence is below ``EDGE_PRUNE_BELOW`` and that nothing has
    changed for at least ``EDGE_PRUNE_AFTER_DAYS``, sorted by key.

    Candidates only: removing an edge is a decision (and an event) for someone else.
    """
    horizon = EDGE_PRUNE_AFTER_DAYS * SECONDS_PER_DAY
    return tuple(
        sorted(
            (
                edge
                for edge in _values(edges)
                if edge_confidence(edge, now) < EDGE_PRUNE_BELOW and now - edge.last_changed >= horizon
            ),
            key=lambda edge: edge.key,
        )
    )


def two_hop(
    edges: Mapping[EdgeKey, EdgeState] | Iterable[EdgeState],
    topics: Iterable[str],
    now: float,
    *,
    limit: int | None = None,
) -> tuple[EdgeState, ...]:
    """The edges within two hops of the ``topics`` nodes, strongest first, for Talker context.

    Hop 1: edges touching a topic, in either direction (both what a topic causes and what
    causes it matter). Hop 2: edges touching a node that a hop-1 edge reached. Ordered by
    ``edge_confidence(edge, now)`` descending, then nearer hops, then key, so the order is
    deterministic; ``limit`` keeps the first ``limit``.
    """
    all_edges = _values(edges)
    topic_nodes = frozenset(topics)
    hop_of: dict[EdgeKey, int] = {}
    reached: set[str] = set()
    for edge in all_edges:
        if edge.src in topic_nodes or edge.dst in topic_nodes:
            hop_of[edge.key] = 1
            reached.update((edge.src, edge.dst))
    frontier = reached - topic_nodes
    for edge in all_edges:
        if edge.key not in hop_of and (edge.src in frontier or edge.dst in frontier):
            hop_of[edge.key] = 2
    ranked = sorted(
        (edge for edge in all_edges if edge.key in hop_of),
        key=lambda edge: (-edge_confidence(edge, now), hop_of[edge.key], edge.key),
    )
    return tuple(ranked if limit is None else ranked[:limit])


__all__ = [
    "EdgeKey",
    "EdgeState",
    "initial_confidence",
    "apply_edge",
    "edge_confidence",
    "prune_candidates",
    "two_hop",
]
