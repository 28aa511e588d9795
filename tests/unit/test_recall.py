"""Recall engine properties: RRF invariants, determinism, and the incremental index against a
brute-force computation written out plainly here (and its BM25 against ``bm25s`` itself).

Vectors come from a small set of directions (one-hots and sums of two) so that equal cosines are
exactly equal in float32 and float64 alike: ties then really happen, and must break by id.
"""

from __future__ import annotations

import math

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.embeddings import pack_vector
from mirror.cognition.errors import EmbeddingShapeError
from mirror.cognition.memory import (
    ANALYZERS,
    DEFAULT_DEPTH,
    RRF_K,
    KeywordIndex,
    MemoryIndex,
    MemoryItem,
    recall,
    reciprocal_rank_fusion,
    render_recall,
)
from mirror.cognition.memory._ranking import _ROUNDING_MARGIN, SCORE_DECIMALS, IdOrder, _near_top
from mirror.cognition.memory._text import DEFAULT_ANALYZER, analyze, tokenize
from mirror.projections.beliefs import BeliefState, ReviewItem, strength
from mirror.projections.constants import SECONDS_PER_DAY
from mirror.projections.edges import EdgeState, edge_confidence

NOW = 1_800_000_000.0
DIMENSIONS = 6
WORDS = ("peanut", "allergy", "sister", "lisbon", "coffee", "morning", "train", "dog", "allergies", "trains")
"""Two pairs share a Snowball stem (allergy/allergies, train/trains): the default analyzer must match them."""
_DIRECTIONS = [tuple(1.0 if i == a or i == b else 0.0 for i in range(DIMENSIONS)) for a in range(DIMENSIONS)
               for b in range(a, DIMENSIONS)]

ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
vectors = st.sampled_from(_DIRECTIONS)
statements = st.lists(st.sampled_from(WORDS + ("the", "and", "is")), min_size=0, max_size=7).map(" ".join)


@st.composite
def items(draw: st.DrawFn) -> list[MemoryItem]:
    chosen = draw(st.lists(ids, min_size=0, max_size=14, unique=True))
    return [
        MemoryItem(
            belief_id=belief_id,
            statement=draw(statements),
            embedding=draw(st.one_of(vectors.map(pack_vector), st.just(b""))) if draw(st.booleans()) else
            pack_vector(draw(vectors)),
            memory_type=draw(st.sampled_from(["standard", "emotional", "operational", "location"])),
            confidence=draw(st.sampled_from([0.3, 0.6, 0.9])),
            last_reinforced=NOW - draw(st.sampled_from([0, 3, 30, 100, 400])) * SECONDS_PER_DAY,
            recall_count=draw(st.integers(0, 4)),
        )
        for belief_id in chosen
    ]


nodes = st.one_of(st.sampled_from(WORDS), st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(" ".join))


@st.composite
def edges(draw: st.DrawFn) -> list[EdgeState]:
    found: dict[tuple[str, str, str], EdgeState] = {}
    for _ in range(draw(st.integers(0, 25))):
        src, dst = draw(nodes), draw(nodes)
        relation = draw(st.sampled_from(["causes", "prevents", "precedes"]))
        stamp = NOW - draw(st.sampled_from([0, 5, 60, 200, 900])) * SECONDS_PER_DAY
        found[(src, relation, dst)] = EdgeState(src=src, relation=relation, dst=dst, origin="conversation",
                                                confidence=draw(st.sampled_from([0.05, 0.3, 0.6, 0.9])),
                                                created=stamp, last_reinforced=stamp, last_changed=stamp)
    return list(found.values())


queries = st.tuples(statements, vectors.map(lambda vector: np.asarray(vector, dtype=np.float32)))


# ------------------------------------------------------------------------------ brute force


def _bm25_ranking(memory: list[MemoryItem], query: str, depth: int, analyzer: str = DEFAULT_ANALYZER) -> list[str]:
    documents = [analyze(item.statement, analyzer) for item in memory]
    total = sum(len(tokens) for tokens in documents)
    if not memory or total == 0:
        return []
    average = total / len(memory)
    scores = {}
    for item, tokens in zip(memory, documents, strict=True):
        score = 0.0
        for word in sorted(set(analyze(query, analyzer))):
            frequency = sum(word in other for other in documents)
            count = tokens.count(word)
            if count:
                idf = math.log1p((len(memory) - frequency + 0.5) / (frequency + 0.5))
                score += idf * count / (count + 1.5 * (1 - 0.75 + 0.75 * len(tokens) / average))
        if score > 0:
            scores[item.belief_id] = float(np.round(score, SCORE_DECIMALS))
    return sorted(scores, key=lambda key: (-scores[key], key))[:depth]


def _vector_ranking(memory: list[MemoryItem], query: np.ndarray, depth: int) -> list[str]:
    q = query / np.linalg.norm(query)
    scores = {}
    for item in memory:
        if item.embedding:
            vector = np.frombuffer(item.embedding, dtype="<f4").astype(np.float64)
            scores[item.belief_id] = float(np.round(vector @ q / np.linalg.norm(vector), SCORE_DECIMALS))
    return sorted(scores, key=lambda key: (-scores[key], key))[:depth]


def _brute_force(memory, query, vector, memory_edges, *, limit=5, depth=DEFAULT_DEPTH, max_edges=8,
                 analyzer=DEFAULT_ANALYZER):
    keyword = _bm25_ranking(memory, query, depth, analyzer)
    cosine = _vector_ranking(memory, vector, depth)
    by_id = {item.belief_id: item for item in memory}
    scored = []
    for belief_id in set(keyword) | set(cosine):
        fused = sum(1.0 / (RRF_K + ranking.index(belief_id) + 1) for ranking in (keyword, cosine) if belief_id in ranking)
        scored.append((-(fused * strength(by_id[belief_id], NOW)), belief_id))
    words = set(tokenize(query))
    topics = {node for edge in memory_edges for node in (edge.src, edge.dst) if set(tokenize(node)) <= words and tokenize(node)}
    hop_one = [edge for edge in memory_edges if edge.src in topics]
    second = {edge.dst for edge in hop_one} - topics
    walked = [(1, edge) for edge in hop_one] + [(2, edge) for edge in memory_edges if edge.src in second]
    walked.sort(key=lambda pair: (-edge_confidence(pair[1], NOW), pair[0], pair[1].key))
    return [[belief_id for _, belief_id in sorted(scored)[:limit]], sorted(topics), [edge.key for _, edge in walked[:max_edges]]]


def _answer(result):
    return [list(result.belief_ids), list(result.topics), [edge.key for edge in result.edges]]


# -------------------------------------------------------------------------------- fusion


@given(st.lists(ids, min_size=1, max_size=20, unique=True), st.randoms())
def test_an_item_first_in_both_rankings_is_first(chosen: list[str], random) -> None:
    first, rest = chosen[0], chosen[1:]
    left, right = [first, *random.sample(rest, len(rest))], [first, *random.sample(rest, random.randint(0, len(rest)))]
    scores = reciprocal_rank_fusion([left, right])
    assert max(scores, key=lambda key: (scores[key], key == first)) == first
    assert all(scores[first] > score for key, score in scores.items() if key != first)


@given(st.lists(ids, max_size=20, unique=True), st.lists(ids, max_size=20, unique=True))
def test_fusion_is_symmetric_and_bounded(left: list[str], right: list[str]) -> None:
    scores = reciprocal_rank_fusion([left, right])
    assert scores == reciprocal_rank_fusion([right, left])
    assert set(scores) == set(left) | set(right)
    assert all(0.0 < score <= 2.0 / (RRF_K + 1) for score in scores.values())


def test_fusion_gives_the_design_numbers() -> None:
    assert reciprocal_rank_fusion([["a", "b"], ["b"]]) == {"a": 1 / 61, "b": 1 / 62 + 1 / 61}


# -------------------------------------------------------------------------- the whole recall


@settings(max_examples=150, deadline=None)
@given(items(), edges(), queries, st.integers(1, 6), st.integers(1, 12), st.sampled_from(ANALYZERS))
def test_index_agrees_with_brute_force(memory, memory_edges, query, limit, depth, analyzer) -> None:
    text, vector = query
    result = recall(memory, text, vector, NOW, edges=memory_edges, limit=limit, depth=depth, max_edges=limit,
                    analyzer=analyzer)
    assert result.analyzer == analyzer
    assert _answer(result) == list(
        _brute_force(memory, text, vector, memory_edges, limit=limit, depth=depth, max_edges=limit, analyzer=analyzer)
    )
    for recalled in result.items:
        assert 0.0 < recalled.fused <= 2.0 / (RRF_K + 1)
        assert recalled.bm25_rank is not None or recalled.vector_rank is not None
        assert recalled.score == pytest.approx(recalled.fused * recalled.strength)
    assert [item.score for item in result.items] == sorted((item.score for item in result.items), reverse=True)


@settings(max_examples=100, deadline=None)
@given(items(), edges(), queries, st.randoms())
def test_recall_is_deterministic_whatever_the_insertion_order(memory, memory_edges, query, random) -> None:
    text, vector = query
    first = recall(memory, text, vector, NOW, edges=memory_edges)
    assert recall(memory, text, vector, NOW, edges=memory_edges) == first
    shuffled, shuffled_edges = random.sample(memory, len(memory)), random.sample(memory_edges, len(memory_edges))
    assert recall(shuffled, text, vector, NOW, edges=shuffled_edges) == first


@settings(max_examples=100, deadline=None)
@given(items(), queries, st.data())
def test_an_index_grown_one_item_at_a_time_matches_brute_force_at_every_step(memory, query, data) -> None:
    text, vector = query
    index = MemoryIndex()
    for count, item in enumerate(memory, start=1):
        index.upsert(item)
        assert _answer(index.recall(text, vector, NOW))[0] == _brute_force(memory[:count], text, vector, [])[0]
    if memory:  # new numbers for a known belief: metadata only; a new statement: a rebuild
        changed = data.draw(st.sampled_from(memory))
        index.upsert(MemoryItem(changed.belief_id, changed.statement, changed.embedding, "location", 0.5, 0.0, 0))
        index.upsert(MemoryItem(memory[0].belief_id, "coffee coffee dog", memory[0].embedding))
        now_memory = {item.belief_id: item for item in memory}
        now_memory[changed.belief_id] = MemoryItem(changed.belief_id, changed.statement, changed.embedding, "location", 0.5, 0.0, 0)
        now_memory[memory[0].belief_id] = MemoryItem(memory[0].belief_id, "coffee coffee dog", memory[0].embedding)
        assert _answer(index.recall(text, vector, NOW))[0] == _brute_force(list(now_memory.values()), text, vector, [])[0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=12),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_keyword_scores_match_bm25s(documents: list[list[str]], query: list[str]) -> None:
    index = KeywordIndex()
    for tokens in documents:
        index.add(tokens)
    reference = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    reference.index(documents, show_progress=False)
    known = [word for word in dict.fromkeys(query) if any(word in tokens for tokens in documents)]
    expected = reference.get_scores(known) if known else np.zeros(len(documents))
    assert index.scores(query) == pytest.approx(expected, rel=1e-5, abs=1e-6)


@given(st.lists(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=4), max_size=80), max_size=6))
def test_the_id_order_is_each_slots_place_among_the_sorted_ids(batches: list[list[str]]) -> None:
    order, seen = IdOrder(), []
    for batch in batches:  # small batches are placed one by one, large ones by a sort
        for item_id in dict.fromkeys(batch):
            if item_id not in seen:
                seen.append(item_id)
                order.append(item_id)
        assert order.view.tolist() == [sorted(seen).index(item_id) for item_id in seen]


@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) | st.floats(-1, 1, width=32), min_size=2, max_size=300),
       st.integers(1, 299))
def test_the_items_near_the_top_are_found_whatever_the_blocks(values: list[float], depth: int) -> None:
    depth = min(depth, len(values) - 1)
    threshold = sorted(values, reverse=True)[depth - 1] - _ROUNDING_MARGIN
    near = [position for position, value in enumerate(values) if value >= threshold]
    assert _near_top(np.asarray(values, dtype=np.float32), depth).tolist() == near


# ------------------------------------------------------------------------- edges and reviews


def _edge(src: str, dst: str, confidence: float, days: float = 0.0) -> EdgeState:
    stamp = NOW - days * SECONDS_PER_DAY
    return EdgeState(src=src, relation="causes", dst=dst, origin="conversation", confidence=confidence,
                     created=stamp, last_reinforced=stamp, last_changed=stamp)


def test_the_walk_follows_edges_forward_two_hops_from_mentioned_topics() -> None:
    walk = [_edge("peanut allergy", "hives", 0.6), _edge("hives", "itching", 0.9), _edge("itching", "bad sleep", 0.95),
            _edge("stress", "peanut allergy", 0.99), _edge("peanut", "snack", 0.2)]
    result = recall([], "Is my peanut allergy getting worse?", None, NOW, edges=walk)
    assert result.topics == ("peanut", "peanut allergy")
    assert [edge.key for edge in result.edges] == [("hives", "causes", "itching"), ("peanut allergy", "causes", "hives"),
                                                   ("peanut", "causes", "snack")]
    assert recall([], "any allergy?", None, NOW, edges=walk).edges == ()


def test_a_decayed_strong_edge_ranks_below_a_fresh_weaker_one() -> None:
    walk = [_edge("coffee", "insomnia", 0.9, days=400), _edge("coffee", "alertness", 0.5)]
    result = recall([], "coffee", None, NOW, edges=walk, max_edges=1)
    assert [edge.dst for edge in result.edges] == ["alertness"]


def test_reviews_touching_recalled_beliefs_come_with_both_statements() -> None:
    memory = [MemoryItem("a", "I live in Lisbon", pack_vector([1, 0])), MemoryItem("b", "I live in Porto", pack_vector([0, 1])),
              MemoryItem("c", "My dog is called Rex", pack_vector([0, 1]))]
    reviews = [ReviewItem("b", "a", seq=7), ReviewItem("c", "x", seq=9)]
    result = recall(memory, "where do I live, Lisbon?", np.array([1, 0], dtype=np.float32), NOW, reviews=reviews, limit=2)
    assert result.belief_ids[0] == "a"
    assert [(review.statement, review.opposed_statement) for review in result.reviews] == [("I live in Porto", "I live in Lisbon")]


def test_vectors_of_another_size_are_refused_with_a_clear_error() -> None:
    index = MemoryIndex([MemoryItem("a", "coffee", pack_vector([1.0, 0.0, 0.0]))])
    with pytest.raises(EmbeddingShapeError, match="same model"):
        index.recall("coffee", np.ones(4, dtype=np.float32), NOW)
    with pytest.raises(EmbeddingShapeError):
        index.upsert(MemoryItem("b", "tea", pack_vector([1.0, 0.0])))


# ------------------------------------------------------------------------------- rendering


@given(items(), queries, st.integers(0, 400))
def test_the_talker_block_stays_within_its_budget_and_keeps_the_order(memory, query, budget) -> None:
    text, vector = query
    result = recall(memory, text, vector, NOW)
    block = render_recall(result, budget)
    assert len(block) <= budget
    shown = [line for line in block.splitlines()[1:]]
    expected = [item.statement for item in result.items][: len(shown)]
    assert [line.split(") ", 1)[1] for line in shown] == expected
    if result.items and budget >= 400:
        assert block


# ---------------------------------------------------------------------- projected beliefs


@settings(max_examples=50, deadline=None)
@given(items(), items(), queries)
def test_sync_to_a_projection_equals_an_index_built_fresh(before, after, query) -> None:
    index = MemoryIndex()
    index.sync({item.belief_id: item for item in before})
    index.sync({item.belief_id: item for item in before + after})
    merged = {item.belief_id: item for item in before + after}
    text, vector = query
    assert index.recall(text, vector, NOW) == recall(list(merged.values()), text, vector, NOW)


def test_beliefs_without_embeddings_are_recalled_by_their_words() -> None:
    old = BeliefState("b1", "I am allergic to peanuts", "standard", 0.8, created=NOW, last_reinforced=NOW)
    other = BeliefState("b2", "My sister lives in Lisbon", "location", 0.8, created=NOW, last_reinforced=NOW)
    result = recall([old, other], "peanuts?", np.ones(4, dtype=np.float32), NOW)
    assert [(item.belief_id, item.bm25_rank, item.vector_rank) for item in result.items] == [("b1", 1, None)]
    assert result.items[0].strength == 1.0
