"""The embeddings port in process: byte packing, fingerprints, and the offline :class:`MiniLMEmbedder`
against golden vectors. :class:`OpenAIEmbedder` against the simulator over loopback HTTP is in
``tests/system/test_embeddings.py``.

The golden vectors (tests/golden/minilm_vectors.json) were made once by the reference
implementation, sentence-transformers over torch, with tests/support/make_minilm_golden.py;
Mirror's numpy encoder must agree with each to cosine >= 0.999. The MiniLM tests need the
``[local]`` extra and are skipped without it, as the offline chat model's are (CI installs it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirror.cognition.embeddings import (
    MINILM_DIMENSIONS,
    MINILM_MAX_TOKENS,
    Embeddings,
    MiniLMEmbedder,
    cosine_similarity,
    embedding_fingerprint,
    minilm_installed,
    pack_vector,
    unpack_vector,
)
from mirror.cognition.embeddings._bert import gelu
from mirror.cognition.errors import EmbeddingModelInvalid, EmbeddingShapeError, PackedVectorInvalid
from mirror.harness.bench.embed import default_texts, run_embed_bench

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "minilm_vectors.json"
needs_minilm = pytest.mark.skipif(not minilm_installed(), reason="the [local] extra is not installed")


# ----------------------------------------------------------------------------- packing, fingerprints


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=512))
def test_a_packed_vector_round_trips_exactly(values: list[float]) -> None:
    data = pack_vector(values)
    assert len(data) == 4 * len(values)
    assert unpack_vector(data, len(values)).tolist() == values


def test_packing_is_little_endian_float32_and_a_384_vector_is_1536_bytes() -> None:
    assert pack_vector([1.0, -2.5]) == struct.pack("<2f", 1.0, -2.5)
    assert len(pack_vector(np.ones(MINILM_DIMENSIONS))) == 1536
    unpacked = unpack_vector(struct.pack("<3f", 0.5, 0.25, -1.0))
    assert unpacked.dtype == np.float32 and unpacked.tolist() == [0.5, 0.25, -1.0]


def test_bytes_that_are_not_a_vector_are_refused() -> None:
    with pytest.raises(PackedVectorInvalid, match="7 bytes"):
        unpack_vector(b"\0" * 7)
    with pytest.raises(PackedVectorInvalid, match="1536 bytes"):
        unpack_vector(b"\0" * 8, MINILM_DIMENSIONS)
    with pytest.raises(ValueError):  # PackedVectorInvalid is also a ValueError
        unpack_vector(b"\0" * 3)
    with pytest.raises(ValueError, match="one vector"):
        pack_vector(np.ones((2, 2)))


def test_the_fingerprint_hashes_model_texts_in_order_and_a_requested_size() -> None:
    texts = ["the river", "the old house"]
    expected = hashlib.sha256(
        json.dumps({"input": texts, "model": "m"}, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert embedding_fingerprint("m", texts) == expected == embedding_fingerprint("m", tuple(texts))
    others = {
        embedding_fingerprint("other", texts),
        embedding_fingerprint("m", list(reversed(texts))),
        embedding_fingerprint("m", ["the river"]),
        embedding_fingerprint("m", texts, 16),
    }
    assert expected not in others and len(others) == 4


def test_embeddings_are_a_frozen_float32_copy_and_refuse_bad_shapes() -> None:
    rows = np.array([[1.0, 0.0], [0.0, 1.0]])
    embeddings = Embeddings.from_rows(rows, texts=["a", "b"], model="m", latency_ms=1.0, tokens=2)
    assert embeddings.vectors.dtype == np.float32 and embeddings.dimensions == 2 and len(embeddings) == 2
    assert embeddings.request_fingerprint == embedding_fingerprint("m", ["a", "b"])
    with pytest.raises(ValueError):
        embeddings.vectors[0, 0] = 5.0
    rows[0, 0] = 9.0  # the caller's array stays theirs
    assert embeddings.vectors[0, 0] == 1.0
    assert embeddings.packed(1) == struct.pack("<2f", 0.0, 1.0)
    with pytest.raises(EmbeddingShapeError, match="asked for 3 vectors"):
        Embeddings.from_rows(rows, texts=["a", "b", "c"], model="m", latency_ms=1.0, tokens=3)
    with pytest.raises(EmbeddingShapeError, match="expected 3 dimensions"):
        Embeddings.from_rows(rows, texts=["a", "b"], model="m", latency_ms=1.0, tokens=2, dimensions=3)
    with pytest.raises(EmbeddingShapeError, match="NaN"):
        Embeddings.from_rows([[float("nan"), 0.0]], texts=["a"], model="m", latency_ms=1.0, tokens=1)


# ----------------------------------------------------------------------------- the offline MiniLM


def test_the_numpy_gelu_is_the_exact_erf_gelu() -> None:
    x = np.linspace(-12, 12, 20_001, dtype=np.float32)
    exact = np.array([value * 0.5 * (1 + math.erf(value / math.sqrt(2))) for value in x.astype(np.float64)])
    assert np.abs(gelu(x) - exact).max() < 1e-6
    assert gelu(np.array([-3.0, 0.0, 3.0], dtype=np.float32)).tolist() == pytest.approx([-0.00404969, 0.0, 2.99595031], abs=1e-6)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _golden() -> list[dict[str, Any]]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))["items"]


@needs_minilm
async def test_minilm_agrees_with_the_reference_implementation(minilm: MiniLMEmbedder) -> None:
    items = _golden()
    texts = [str(item["text"]) for item in items]
    assert len(texts) >= 12 and any(len(text) > 1500 for text in texts)  # the fixture exercises truncation
    embeddings = await minilm.embed(texts)
    assert embeddings.dimensions == MINILM_DIMENSIONS
    cosines = {
        text[:40]: cosine_similarity(vector, item["vector"])
        for text, vector, item in zip(texts, embeddings.vectors, items, strict=True)
    }
    assert min(cosines.values()) >= 0.999, cosines


@needs_minilm
async def test_minilm_vectors_do_not_depend_on_the_batch(minilm: MiniLMEmbedder) -> None:
    texts = [str(item["text"]) for item in _golden()]
    together = await minilm.embed(texts)
    for index in (0, 3, len(texts) - 1):  # the shortest pads most in a batch; the longest sets the width
        alone = await minilm.embed([texts[index]])
        assert cosine_similarity(alone.vectors[0], together.vectors[index]) > 0.99999
        assert np.abs(alone.vectors[0] - together.vectors[index]).max() < 1e-5


@needs_minilm
async def test_minilm_truncates_counts_tokens_and_leaves_the_loop_free(minilm: MiniLMEmbedder) -> None:
    long_text = " ".join(["harbour"] * 2000)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        embeddings = await minilm.embed([long_text] * 8)
    finally:
        ticker.cancel()
    assert embeddings.tokens == 8 * MINILM_MAX_TOKENS
    assert ticks > 0  # the loop kept running while the encoder worked in its thread
    assert embeddings.request_fingerprint == embedding_fingerprint("all-MiniLM-L6-v2", [long_text] * 8)
    short = await minilm.embed(["hello world"])
    assert short.tokens == 4  # [CLS] hello world [SEP]


@needs_minilm
async def test_concurrent_minilm_calls_take_turns_and_agree_with_serial_ones(minilm: MiniLMEmbedder) -> None:
    batches = [["the ferry leaves at dawn"], ["a goat named Clementine", "two bicycles"], ["the radio argued back"]]
    together = await asyncio.gather(*(minilm.embed(batch) for batch in batches))
    for batch, embeddings in zip(batches, together, strict=True):
        alone = await minilm.embed(batch)
        assert np.array_equal(alone.vectors, embeddings.vectors)


@needs_minilm
def test_minilm_refuses_an_incomplete_model(minilm: MiniLMEmbedder, tmp_path: Path) -> None:
    # The [local] extra's package: imported here so that the module loads without it.
    from safetensors.numpy import load_file, save_file

    for name in ("tokenizer.json", "config.json"):
        shutil.copy(minilm.model_dir / name, tmp_path / name)
    with pytest.raises(EmbeddingModelInvalid, match=r"model\.safetensors is missing"):
        MiniLMEmbedder(tmp_path)
    weights = load_file(str(minilm.model_dir / "model.safetensors"))
    del weights["encoder.layer.5.output.dense.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(EmbeddingModelInvalid, match=r"encoder\.layer\.5\.output\.dense\.weight"):
        MiniLMEmbedder(tmp_path)


@needs_minilm
def test_the_embed_bench_reports_both_batch_sizes() -> None:
    texts = default_texts(6)
    assert len(set(texts)) == 6
    result = run_embed_bench(texts, batch=4, repeats=1)
    assert result["texts"] == 6 and result["dimensions"] == MINILM_DIMENSIONS and result["blas_threads"] == 1
    for key in ("batch1_sentences_per_s", "single_p50_ms", "single_cpu_ms_per_sentence", "batch4_sentences_per_s",
                "batch4_cpu_ms_per_sentence", "single_p50_ms_async_port"):
        assert result[key] > 0, key
    assert 10 < result["mean_tokens_per_text"] < 40
    with pytest.raises(ValueError):
        run_embed_bench([], batch=4)
