"""`mirror bench recall`: one conversation's recall latency at 10,000 beliefs and 5,000 edges.

Production path: :meth:`MemoryIndex.recall` with the Talker's recall settings (``TURN_RECALL``:
limit, depth, edges, analyzer), the call ``recall_at`` makes on every turn; the index is built
from synthetic items here rather than synced from a conversation's state.

The memory is synthetic but shaped like a long conversation's: statements from templates over
a seeded, Zipf-weighted vocabulary of made-up nouns (so a few words are common, most rare, as
in real text), embedded with the simulator's own embedding function
(``sim/content.embedding``) at 384 dimensions, the size of all-MiniLM-L6-v2, so the
matrix costs what the offline embedder's would. Edges join nouns. Queries reword the first 100
beliefs (two of their nouns, one other noun, a question frame), so the same 200 queries run
against the 100-belief memory (the first 100 beliefs) and the 10,000-belief one, and
``ratio_10k_vs_100`` compares like with like.

Timed: :meth:`MemoryIndex.recall` alone (keyword + vector + fusion + decay + edge walk), with
the query's vector embedded beforehand, as on the turn path (the embedding is its own call).
Also reported: building the index from scratch, adding one belief to the full index, and, in
the same run, rebuilding a ``bm25s`` index of the same statements — the cost the incremental
keyword index avoids on every new belief.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

import bm25s
import numpy as np

from mirror.cognition.embeddings import pack_vector
from mirror.cognition.memory import TURN_RECALL, MemoryIndex, MemoryItem, RecallResult
from mirror.projections.constants import SECONDS_PER_DAY
from mirror.projections.edges import EdgeState
from mirror.sim.content import embedding

EMBEDDING_DIMENSIONS = 384
SMALL_MEMORY = 100
_SYLLABLES = ("ka", "lo", "mi", "ren", "to", "sha", "vi", "dor", "pe", "lun", "ga", "ros", "ti", "mar", "bel", "zu")
_TEMPLATES = (
    "the {0} near the {1} is where my {2} keeps the {3}",
    "my {0} always brings {1} when we visit the {2}",
    "I think the {0} of the {1} reminds me of {2}",
    "last week the {0} broke, so the {1} went to the {2}",
    "we agreed that {0} matters more than {1} for the {2}",
    "my friend from {0} dislikes {1} but loves the {2} and {3}",
)
_QUESTIONS = ("what did I say about {0} and {1}?", "remind me: {0}, {1}, was it the {2}?", "do you remember the {0} with {1}")
_MEMORY_TYPES = ("standard", "standard", "standard", "emotional", "operational", "location")
_RELATIONS = ("causes", "enables", "prevents", "precedes", "worsens")


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(words)


class _Workload:
    """Statements, edges and queries for one seed; nouns drawn Zipf-like (weight 1/rank)."""

    def __init__(self, seed: int, beliefs: int, edges: int, queries: int, vocabulary: int = 4000) -> None:
        rng = random.Random(seed)
        self.words = _vocabulary(rng, vocabulary)
        word_set = set(self.words)
        self._weights = [1.0 / rank for rank in range(1, len(self.words) + 1)]
        self.now = 1_800_000_000.0
        self.statements = [rng.choice(_TEMPLATES).format(*self._nouns(rng, 4)) for _ in range(beliefs)]
        self.items_meta = [
            (rng.choice(_MEMORY_TYPES), rng.uniform(0.3, 0.95), self.now - rng.uniform(0, 400) * SECONDS_PER_DAY, rng.randint(0, 5))
            for _ in range(beliefs)
        ]
        self.edges = [self._edge(rng) for _ in range(edges)]
        self.queries = []
        for _ in range(queries):
            source = rng.choice(self.statements[: min(SMALL_MEMORY, beliefs)])
            nouns = [word for word in source.split() if word in word_set]
            picked = rng.sample(nouns, min(2, len(nouns))) + self._nouns(rng, 1)
            self.queries.append(rng.choice(_QUESTIONS).format(*picked, *picked))

    def _nouns(self, rng: random.Random, count: int) -> list[str]:
        return rng.choices(self.words, weights=self._weights, k=count)

    def _edge(self, rng: random.Random) -> EdgeState:
        src, dst = self._nouns(rng, 2)
        stamp = self.now - rng.uniform(0, 300) * SECONDS_PER_DAY
        return EdgeState(src=src, relation=rng.choice(_RELATIONS), dst=dst, origin="conversation",
                         confidence=rng.uniform(0.2, 0.95), created=stamp, last_reinforced=stamp, last_changed=stamp)


def _items(workload: _Workload, count: int) -> list[MemoryItem]:
    items = []
    for index, statement in enumerate(workload.statements[:count]):
        memory_type, confidence, reinforced, recalls = workload.items_meta[index]
        items.append(MemoryItem(belief_id=f"b{index:06d}", statement=statement,
                                embedding=pack_vector(embedding(statement, EMBEDDING_DIMENSIONS)),
                                memory_type=memory_type, confidence=confidence, last_reinforced=reinforced,
                                recall_count=recalls))
    return items


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _recall(index: MemoryIndex, text: str, vector: np.ndarray, now: float) -> RecallResult:
    """One recall as the Talker's turn makes it (``recall_at``'s call, with ``TURN_RECALL``)."""
    return index.recall(text, vector, now, limit=TURN_RECALL.limit, depth=TURN_RECALL.depth,
                        max_edges=TURN_RECALL.max_edges, max_reviews=TURN_RECALL.max_reviews)


def _time_recalls(index: MemoryIndex, queries: list[tuple[str, np.ndarray]], now: float, rounds: int) -> list[float]:
    for text, vector in queries[:10]:  # warm caches (posting arrays, allocator)
        _recall(index, text, vector, now)
    timings = []
    for _ in range(rounds):
        for text, vector in queries:
            started = time.perf_counter()
            _recall(index, text, vector, now)
            timings.append((time.perf_counter() - started) * 1000.0)
    return timings


def run_recall_bench(beliefs: int = 10_000, edges: int = 5_000, queries: int = 200, seed: int = 7,
                     rounds: int = 3) -> dict[str, Any]:
    """Recall p50/p99 at ``beliefs`` beliefs and ``edges`` edges, and the same queries at 100 beliefs."""
    workload = _Workload(seed, beliefs, edges, queries)
    started = time.perf_counter()
    items = _items(workload, beliefs)
    embed_s = time.perf_counter() - started
    query_mix = [(text, np.asarray(embedding(text, EMBEDDING_DIMENSIONS), dtype=np.float32)) for text in workload.queries]

    started = time.perf_counter()
    large = MemoryIndex(items[:-1], workload.edges, analyzer=TURN_RECALL.analyzer)
    build_ms = (time.perf_counter() - started) * 1000.0
    started = time.perf_counter()
    large.upsert(items[-1])
    add_one_ms = (time.perf_counter() - started) * 1000.0
    small = MemoryIndex(items[:SMALL_MEMORY], workload.edges, analyzer=TURN_RECALL.analyzer)

    large_ms = _time_recalls(large, query_mix, workload.now, rounds)
    small_ms = _time_recalls(small, query_mix, workload.now, rounds)

    started = time.perf_counter()
    bm25s.BM25().index(bm25s.tokenize(workload.statements, show_progress=False), show_progress=False)
    bm25s_rebuild_ms = (time.perf_counter() - started) * 1000.0

    sample = _recall(large, *query_mix[0], workload.now)
    p50, p50_small = statistics.median(large_ms), statistics.median(small_ms)
    return {
        "beliefs": beliefs,
        "edges": edges,
        "queries": queries,
        "rounds": rounds,
        "seed": seed,
        "embedding": f"simulator hashed bag of words, {EMBEDDING_DIMENSIONS} dimensions",
        "p50_ms": round(p50, 3),
        "p99_ms": round(_percentile(large_ms, 0.99), 3),
        "p50_ms_100": round(p50_small, 3),
        "p99_ms_100": round(_percentile(small_ms, 0.99), 3),
        "ratio_10k_vs_100": round(p50 / p50_small, 2),
        "index_build_ms": round(build_ms, 1),
        "add_one_belief_ms": round(add_one_ms, 3),
        "bm25s_rebuild_ms": round(bm25s_rebuild_ms, 1),
        "embed_beliefs_s": round(embed_s, 1),
        "sample_recall": {"items": len(sample.items), "topics": len(sample.topics), "edges": len(sample.edges)},
    }


if __name__ == "__main__":
    print(json.dumps(run_recall_bench(), indent=2))


__all__ = ["EMBEDDING_DIMENSIONS", "SMALL_MEMORY", "run_recall_bench"]
