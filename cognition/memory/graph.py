"""Causal edges for recall: which edge nodes a message mentions, and the 2-hop walk from them.

A node is *mentioned* when every content word of its name (``_text.tokenize``) is among the
message's words: "peanut allergy" is mentioned by "is the peanut allergy serious?", not by
"any allergy?". The walk follows edges forwards only (``src -> dst``, what a topic leads to):
hop 1 from the topics, hop 2 from the nodes hop 1 reached. Results are ordered by
``edge_confidence(edge, now)`` descending, then nearer hop, then key, and bounded.

Why an index rather than ``projections.edges.two_hop``: that scans every edge twice per call
(and walks both directions, for the design's general 2-hop context); on the turn path with
5,000 edges a word -> nodes map and a src -> edges map make the walk cost what it reaches.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirror.projections.edges import EdgeKey, EdgeState, edge_confidence

from ._text import tokenize


class EdgeIndex:
    """Edges by source node, and nodes by the words of their names. Upserts replace by key."""

    def __init__(self) -> None:
        self._outgoing: dict[str, dict[EdgeKey, EdgeState]] = {}
        self._node_words: dict[str, frozenset[str]] = {}
        self._nodes_by_word: dict[str, set[str]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _add_node(self, node: str) -> None:
        if node in self._node_words:
            return
        words = frozenset(tokenize(node))
        self._node_words[node] = words
        for word in words:
            self._nodes_by_word.setdefault(word, set()).add(node)

    def upsert(self, edge: EdgeState) -> None:
        """Add ``edge``, or replace the stored edge with the same ``(src, relation, dst)``."""
        self._add_node(edge.src)
        self._add_node(edge.dst)
        outgoing = self._outgoing.setdefault(edge.src, {})
        if edge.key not in outgoing:
            self._count += 1
        outgoing[edge.key] = edge

    def topics(self, message: str) -> tuple[str, ...]:
        """The nodes ``message`` mentions, sorted."""
        words = set(tokenize(message))
        candidates = set().union(*(self._nodes_by_word.get(word, ()) for word in words)) if words else set()
        return tuple(sorted(node for node in candidates if self._node_words[node] <= words))

    def walk(self, topics: Iterable[str], now: float, *, limit: int) -> tuple[EdgeState, ...]:
        """Edges up to two hops forward from ``topics``, strongest at ``now`` first, at most ``limit``."""
        hop_of: dict[EdgeKey, int] = {}
        found: list[EdgeState] = []
        frontier = sorted(set(topics))
        for hop in (1, 2):
            reached: set[str] = set()
            for node in frontier:
                for key, edge in self._outgoing.get(node, {}).items():
                    if key not in hop_of:
                        hop_of[key] = hop
                        found.append(edge)
                        reached.add(edge.dst)
            frontier = sorted(reached)
        found.sort(key=lambda edge: (-edge_confidence(edge, now), hop_of[edge.key], edge.key))
        return tuple(found[: max(0, limit)])


__all__ = ["EdgeIndex"]
