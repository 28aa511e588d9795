"""Causal edges for recall: which edge nodes a message mentions, and the 2-hop walk from them.

A node is *mentioned* when every content word of its name (``_text.tokenize``) is among the
message's words: "peanut allergy" is mentioned by "is the peanut allergy serious?", not by
"any allergy?". The walk follows edges forwards only (``src -> dst``, what a topic leads to):
hop 1 from the topics, hop 2 from the nodes hop 1 reached. Results are ordered by
``edge_confidence(edge, now)`` descending, then nearer hop, then key, and bounded.

Why an index and an early stop rather than ``projections.edges.two_hop`` (which scans every
edge and scores all it reaches): with 5,000 edges, a message naming a common topic reaches
~1,500 edges within two hops, and scoring them all took ~11 ms. Here each node keeps its
outgoing edges sorted by stored confidence, and decay never raises an edge
(``edge_confidence(edge, now) <= edge.confidence``), so a node's list is read only while its
stored confidence could still beat the ``limit``-th best decayed one found so far: the answer
is exactly the sort of everything reached, at the cost of the few edges that could matter.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable

from mirror.projections.edges import EdgeKey, EdgeState, edge_confidence

from ._text import tokenize


class EdgeIndex:
    """Edges by source node, and nodes by the words of their names. Upserts replace by key."""

    def __init__(self) -> None:
        self._outgoing: dict[str, dict[EdgeKey, EdgeState]] = {}
        self._by_confidence: dict[str, list[EdgeState]] = {}  # per source, strongest stored first; rebuilt lazily
        self._successors: dict[str, set[str]] = {}
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
        self._successors.setdefault(edge.src, set()).add(edge.dst)
        self._by_confidence.pop(edge.src, None)

    def topics(self, message: str) -> tuple[str, ...]:
        """The nodes ``message`` mentions, sorted."""
        words = set(tokenize(message))
        candidates = set().union(*(self._nodes_by_word.get(word, ()) for word in words)) if words else set()
        return tuple(sorted(node for node in candidates if self._node_words[node] <= words))

    def _strongest_first(self, node: str) -> list[EdgeState]:
        ordered = self._by_confidence.get(node)
        if ordered is None:
            ordered = sorted(self._outgoing.get(node, {}).values(), key=lambda edge: (-edge.confidence, edge.key))
            self._by_confidence[node] = ordered
        return ordered

    def walk(self, topics: Iterable[str], now: float, *, limit: int) -> tuple[EdgeState, ...]:
        """Edges up to two hops forward from ``topics``, strongest at ``now`` first, at most ``limit``.

        Hop 1: edges leaving a topic. Hop 2: edges leaving a node a hop-1 edge reached (topics
        excepted: their edges are hop 1). Order: decayed confidence descending, hop, key.
        """
        if limit <= 0:
            return ()
        starts = set(topics)
        second = set().union(*(self._successors.get(node, ()) for node in starts)) - starts if starts else set()
        best: list[tuple[float, int, EdgeKey, EdgeState]] = []  # sorted by (-confidence, hop, key)
        for hop, nodes in ((1, starts), (2, second)):
            for node in nodes:
                for edge in self._strongest_first(node):
                    if len(best) == limit and edge.confidence < -best[-1][0]:
                        break  # decay only lowers: nothing further along this list can enter
                    entry = (-edge_confidence(edge, now), hop, edge.key, edge)
                    if len(best) < limit or entry[:3] < best[-1][:3]:
                        insort(best, entry, key=lambda item: item[:3])
                        del best[limit:]
        return tuple(entry[3] for entry in best)


__all__ = ["EdgeIndex"]
