"""The embeddings port's HTTP adapter: :class:`OpenAIEmbedder` against the simulator over real
loopback HTTP (the packing, fingerprints and the offline MiniLM: ``tests/unit/test_embeddings.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from mirror.cognition import LLMRequestRejected, LLMSettings, LLMUnavailable
from mirror.cognition.embeddings import (
    Embedder,
    OpenAIEmbedder,
    cosine_similarity,
    embedding_fingerprint,
)
from mirror.sim.server import SimLLMServer, SimSettings

# ----------------------------------------------------------------------------- the simulator, over HTTP


@pytest.fixture(scope="module")
def sim() -> Iterator[SimLLMServer]:
    with SimLLMServer(SimSettings(latency="fixed:0")) as server:
        yield server


@pytest.fixture
async def sim_embedder(sim: SimLLMServer) -> AsyncIterator[OpenAIEmbedder]:
    async with OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", timeout_s=5)) as embedder:
        yield embedder


async def test_the_simulator_puts_similar_texts_closer_than_unrelated_ones(sim_embedder: OpenAIEmbedder) -> None:
    texts = [
        "my sister lives in Porto with her two cats",
        "her two cats live in Porto with my sister",
        "quarterly revenue forecasts for the steel industry",
    ]
    embeddings = await sim_embedder.embed(texts)
    similar = cosine_similarity(embeddings.vectors[0], embeddings.vectors[1])
    unrelated = cosine_similarity(embeddings.vectors[0], embeddings.vectors[2])
    assert similar > 0.5 > unrelated, (similar, unrelated)


async def test_the_simulator_gives_a_text_the_same_vector_every_time(
    sim: SimLLMServer, sim_embedder: OpenAIEmbedder
) -> None:
    first = await sim_embedder.embed(["the lighthouse keeper", "a red kite", "the lighthouse keeper"])
    again = await sim_embedder.embed(["the lighthouse keeper"])
    assert first.packed(0) == first.packed(2) == again.packed(0) != first.packed(1)
    async with OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed")) as other:
        assert (await other.embed(["the lighthouse keeper"])).packed(0) == again.packed(0)


async def test_openai_embedder_records_provenance(sim: SimLLMServer, sim_embedder: OpenAIEmbedder) -> None:
    sim.reset()
    texts = ["one small fact", "another, slightly longer, fact about the harbour"]
    embeddings = await sim_embedder.embed(texts)
    assert isinstance(sim_embedder, Embedder)
    assert embeddings.model == sim_embedder.model == "sim-embed"
    assert embeddings.request_fingerprint == embedding_fingerprint("sim-embed", texts)
    assert embeddings.dimensions == sim_embedder.dimensions == SimSettings().embedding_dim
    assert embeddings.tokens > 0 and embeddings.latency_ms > 0
    assert np.allclose(np.linalg.norm(embeddings.vectors, axis=1), 1.0, atol=1e-6)
    empty = await sim_embedder.embed([])
    assert len(empty) == 0 and empty.dimensions == embeddings.dimensions
    assert sim.stats()["embedding_calls"] == 1 == sim_embedder.calls


async def test_a_requested_dimension_is_asked_for_and_part_of_the_fingerprint(sim: SimLLMServer) -> None:
    async with OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed"), dimensions=16) as embedder:
        embeddings = await embedder.embed(["short vectors"])
    assert embeddings.dimensions == 16
    assert embeddings.request_fingerprint == embedding_fingerprint("sim-embed", ["short vectors"], 16)


async def test_endpoint_failures_are_the_chat_clients_typed_errors(sim: SimLLMServer) -> None:
    async with OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed"), dimensions=100_000) as embedder:
        with pytest.raises(LLMRequestRejected) as rejected:
            await embedder.embed(["too many dimensions"])
    assert rejected.value.status == 400
    stopped = SimLLMServer(SimSettings()).start()
    base_url = stopped.base_url
    stopped.stop()
    settings = LLMSettings(base_url=base_url, model="sim-embed", max_retries=1, backoff_initial_s=0.01)
    async with OpenAIEmbedder(settings) as embedder:
        with pytest.raises(LLMUnavailable) as unavailable:
            await embedder.embed(["anyone there?"])
    assert unavailable.value.attempts == 2
