"""What the memory endpoint is built from, without a server: the JSON views of a recall and of
memory items (pure), and where the gateway's embedder of queries points by default."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.embeddings import pack_vector
from mirror.cognition.memory import recall, recall_view, render_recall, sorted_beliefs, sorted_edges, sorted_reviews
from mirror.cognition.memory.view import edge_view
from mirror.cognition.openai_client import LLMSettings
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.gateway.settings import DEFAULT_EMBED_RETRIES, DEFAULT_EMBED_TIMEOUT_S, GatewaySettings
from mirror.projections.beliefs import BeliefState, ReviewItem, review_id
from mirror.projections.edges import EdgeState

NOW = 1_000_000.0


def _belief(belief_id: str, statement: str, vector: list[float], created: float) -> BeliefState:
    return BeliefState(belief_id, statement, "standard", 0.7, created, created, embedding=pack_vector(vector))


BELIEFS = [
    _belief("b2", "the user is allergic to peanuts", [1.0, 0.0, 0.0], NOW - 10),
    _belief("b1", "the user eats peanuts daily", [0.9, 0.1, 0.0], NOW - 10),
    _belief("b0", "the user lives in Lisbon", [0.0, 0.0, 1.0], NOW - 20),
]
EDGES = [
    EdgeState("peanuts", "cause", "allergy", "world", 0.8, NOW, NOW, NOW, contradicted_by=(("peanuts", "prevent", "allergy"),)),
    EdgeState("allergy", "requires", "epinephrine", "world", 0.7, NOW, NOW, NOW),
]
REVIEWS = [ReviewItem("b1", "b2", seq=9), ReviewItem("b0", "b2", seq=4)]


def test_a_recall_view_is_json_with_every_number_recall_computed() -> None:
    result = recall(BELIEFS, "peanuts allergy", np.array([1.0, 0.0, 0.0]), NOW, edges=EDGES, reviews=REVIEWS)
    view = recall_view(result)
    assert json.loads(json.dumps(view)) == view  # plain JSON: no tuples, bytes or numpy scalars
    assert [item["belief_id"] for item in view["items"]] == list(result.belief_ids)
    for shown, item in zip(view["items"], result.items, strict=True):
        assert (shown["bm25_rank"], shown["vector_rank"], shown["fused"], shown["strength"], shown["score"]) == (
            item.bm25_rank, item.vector_rank, item.fused, item.strength, item.score)
    assert "embedding" not in json.dumps(view)
    assert view["reviews"] and all(r["review_id"] == review_id(r["belief_id"], r["opposed_id"]) for r in view["reviews"])
    peanuts = next(edge for edge in view["edges"] if edge["src"] == "peanuts")
    assert peanuts["contradicted_by"] == [["peanuts", "prevent", "allergy"]]
    assert view["rendered"] == render_recall(result) and view["rendered"].count("\n") >= 3
    assert recall_view(result, max_chars=10)["rendered"] == ""  # the Talker's budget is honoured


def test_listings_are_in_one_order_whatever_the_order_given() -> None:
    assert [b.belief_id for b in sorted_beliefs(BELIEFS)] == ["b0", "b1", "b2"]  # created, then id
    assert [b.belief_id for b in sorted_beliefs(reversed(BELIEFS))] == ["b0", "b1", "b2"]
    assert [e.key for e in sorted_edges(EDGES)] == [("allergy", "requires", "epinephrine"), ("peanuts", "cause", "allergy")]
    assert [r.seq for r in sorted_reviews(REVIEWS)] == [4, 9]
    assert edge_view(EDGES[1])["contradicted_by"] == []


def test_the_gateway_embeds_queries_at_the_runtime_llm_with_short_limits_unless_told(tmp_path: Path) -> None:
    llm = LLMSettings(base_url="http://127.0.0.1:9/v1", model="mirror-sim", api_key="k", timeout_s=120, max_retries=6)
    runtime = RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"), llm)
    settings = GatewaySettings(runtime, str(tmp_path / "tenants.json"))
    derived = settings.embedder_settings()
    # the conversations' embedding model, not the chat model: the API embeds as the Talker's recall did
    assert (derived.base_url, derived.model, derived.api_key) == (llm.base_url, runtime.embedding_model, llm.api_key)
    assert runtime.embedding_model != llm.model
    assert derived.timeout_s == DEFAULT_EMBED_TIMEOUT_S and derived.max_retries == DEFAULT_EMBED_RETRIES
    chosen = LLMSettings(base_url="https://embeddings.example/v1", model="text-embedding-3-small")
    explicit = GatewaySettings(RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"), llm), str(tmp_path / "t.json"), embedder=chosen)
    assert explicit.embedder_settings() is chosen
