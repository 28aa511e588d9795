"""The embedder port's contract, run against every adapter: the simulator through
:class:`OpenAIEmbedder` over real loopback HTTP, and the offline :class:`MiniLMEmbedder`
(when the ``[local]`` extra is installed; CI installs it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from mirror.cognition import LLMSettings
from mirror.cognition.embeddings import (
    Embedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    embedding_fingerprint,
    minilm_installed,
    pack_vector,
    unpack_vector,
)
from mirror.sim.server import SimLLMServer, SimSettings

TEXTS = ["My sister lives in Porto.", "The quarterly report is due on the fourteenth.", "hi", "Café déjà vu 🙂"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimLLMServer]:
    with SimLLMServer(SimSettings(latency="fixed:0")) as server:
        yield server


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(params=[
    "sim",
    pytest.param("minilm", marks=pytest.mark.skipif(not minilm_installed(), reason="the [local] extra is not installed")),
])
async def embedder(request: pytest.FixtureRequest, sim: SimLLMServer) -> AsyncIterator[Embedder]:
    if request.param == "sim":
        adapter: Embedder = OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", timeout_s=5))
    else:
        adapter = request.getfixturevalue("minilm")
    yield adapter
    await adapter.aclose()


async def test_one_unit_float32_row_per_text_in_order(embedder: Embedder) -> None:
    together = await embedder.embed(TEXTS)
    assert isinstance(embedder, Embedder)
    assert together.vectors.shape[0] == len(together) == len(TEXTS) and together.dimensions > 0
    assert together.vectors.dtype == np.float32 and not together.vectors.flags.writeable
    assert np.allclose(np.linalg.norm(together.vectors, axis=1), 1.0, atol=1e-5)
    backwards = await embedder.embed(list(reversed(TEXTS)))
    assert np.allclose(backwards.vectors[::-1], together.vectors, atol=1e-5)
    assert len({together.packed(index) for index in range(len(TEXTS))}) == len(TEXTS)


async def test_the_same_text_gets_the_same_vector(embedder: Embedder) -> None:
    first = await embedder.embed(TEXTS[:2])
    again = await embedder.embed(TEXTS[:2])
    assert np.array_equal(first.vectors, again.vectors)
    assert first.request_fingerprint == again.request_fingerprint


async def test_provenance_names_the_model_and_fingerprints_the_request(embedder: Embedder) -> None:
    embeddings = await embedder.embed(TEXTS)
    assert embeddings.model == embedder.model
    assert embeddings.request_fingerprint == embedding_fingerprint(embedder.model, TEXTS)
    assert embeddings.tokens >= len(TEXTS) and embeddings.latency_ms > 0
    other = await embedder.embed(TEXTS[:3])
    assert other.request_fingerprint != embeddings.request_fingerprint
    assert other.dimensions == embeddings.dimensions  # one model, one dimension


async def test_an_empty_batch_is_empty(embedder: Embedder) -> None:
    dimensions = (await embedder.embed(["warm"])).dimensions
    calls = embedder.calls
    empty = await embedder.embed([])
    assert len(empty) == 0 and empty.tokens == 0 and empty.vectors.shape == (0, dimensions)
    assert embedder.calls == calls  # no call was made


async def test_vectors_survive_packing_for_an_event(embedder: Embedder) -> None:
    embeddings = await embedder.embed(TEXTS[:1])
    packed = embeddings.packed(0)
    assert packed == pack_vector(embeddings.vectors[0]) and len(packed) == 4 * embeddings.dimensions
    assert np.array_equal(unpack_vector(packed, embeddings.dimensions), embeddings.vectors[0])
