"""The embeddings port: what an embedder returns, and how a vector is packed into an event.

Why numpy float32 and not lists of floats: the vectors are stored in events and compared by the
thousand at recall. A float32 matrix is the exact value the models produce (the OpenAI wire format
and MiniLM are float32), packs to 4 bytes a component (384 dimensions = 1,536 bytes) with no
rounding, and cosine over a whole memory is one matrix product. Python lists would take ~9 KB per
vector and round-trip through float64.

Invariants of :class:`Embeddings`: ``vectors`` is a read-only, C-contiguous float32 matrix of shape
``(len(texts), dimensions)``, row ``i`` belonging to ``texts[i]``, every value finite; the
``request_fingerprint`` depends only on the model, the texts (in order) and a requested dimension,
so replay can look a recorded answer up by it without calling anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from mirror.events.vectors import FLOAT32_BYTES, VECTOR_DTYPE

from ..errors import EmbeddingShapeError, PackedVectorInvalid
from ..llm import canonical_json

FLOAT32_LE = np.dtype(VECTOR_DTYPE)
"""The byte layout of a packed vector, as the events layer defines it (:mod:`mirror.events.vectors`):
little-endian IEEE-754 float32, as OpenAI's base64 uses. numpy packs and unpacks it here because
vectors go in and out by the thousand at recall, where ``struct`` over Python floats would not do."""


def embedding_fingerprint(model: str, texts: Sequence[str], dimensions: int | None = None) -> str:
    """sha256 hex of the canonical JSON of the request: model, texts in order, and a requested size."""
    identity: dict[str, object] = {"model": model, "input": list(texts)}
    if dimensions is not None:
        identity["dimensions"] = dimensions
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


def pack_vector(vector: Sequence[float] | np.ndarray) -> bytes:
    """One vector as little-endian float32 bytes (4 bytes a component), for an event payload."""
    array = np.asarray(vector, dtype=np.float32)
    if array.ndim != 1:
        raise ValueError(f"pack_vector takes one vector, not an array of shape {array.shape}")
    return array.astype(FLOAT32_LE, copy=False).tobytes()


def unpack_vector(data: bytes, dimensions: int | None = None) -> np.ndarray:
    """The float32 vector :func:`pack_vector` wrote (read-only); checks the size when told it."""
    size = len(data)
    if size % FLOAT32_BYTES or (dimensions is not None and size != dimensions * FLOAT32_BYTES):
        raise PackedVectorInvalid(size, dimensions)
    return np.frombuffer(data, dtype=FLOAT32_LE).astype(np.float32, copy=False)


def cosine_similarity(left: Sequence[float] | np.ndarray, right: Sequence[float] | np.ndarray) -> float:
    """Cosine of the angle between two vectors (0.0 when either has no length)."""
    a = np.asarray(left, dtype=np.float64)
    b = np.asarray(right, dtype=np.float64)
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


@dataclass(frozen=True, slots=True, eq=False)
class Embeddings:
    """Vectors for a batch of texts, and where they came from (the provenance replay records).

    ``tokens`` is what the provider reported (or the local tokenizer counted, special tokens
    included, after truncation); ``latency_ms`` is the wall time of the whole call, retries included.
    """

    vectors: np.ndarray
    model: str
    request_fingerprint: str
    latency_ms: float
    tokens: int

    def __post_init__(self) -> None:
        matrix = np.array(self.vectors, dtype=np.float32, order="C", copy=True)  # ours alone, then frozen
        if matrix.ndim != 2:
            raise EmbeddingShapeError(self.model, f"expected a (texts, dimensions) matrix, got shape {matrix.shape}")
        if not np.isfinite(matrix).all():
            raise EmbeddingShapeError(self.model, "a vector holds NaN or infinity")
        matrix.setflags(write=False)
        object.__setattr__(self, "vectors", matrix)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Sequence[float]] | np.ndarray,
        *,
        texts: Sequence[str],
        model: str,
        latency_ms: float,
        tokens: int,
        dimensions: int | None = None,
        requested_dimensions: int | None = None,
    ) -> Embeddings:
        """Build from an adapter's raw rows, checking one row per text and (if known) the dimension."""
        matrix = np.asarray(rows, dtype=np.float32)
        if matrix.ndim == 1 and matrix.size == 0:
            matrix = matrix.reshape(0, dimensions or 0)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise EmbeddingShapeError(model, f"asked for {len(texts)} vectors, got an array of shape {matrix.shape}")
        if dimensions is not None and len(texts) and matrix.shape[1] != dimensions:
            raise EmbeddingShapeError(model, f"expected {dimensions} dimensions, got {matrix.shape[1]}")
        return cls(
            vectors=matrix,
            model=model,
            request_fingerprint=embedding_fingerprint(model, texts, requested_dimensions),
            latency_ms=latency_ms,
            tokens=tokens,
        )

    @property
    def dimensions(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def packed(self, index: int) -> bytes:
        """Row ``index`` as :func:`pack_vector` bytes."""
        return pack_vector(self.vectors[index])

    def as_lists(self) -> list[list[float]]:
        """Plain floats, for JSON (each the exact float32 value, widened)."""
        return self.vectors.tolist()


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. Adapters: :class:`OpenAIEmbedder` (any OpenAI-compatible
    ``/v1/embeddings``, the simulator included) and :class:`MiniLMEmbedder` (offline, numpy).

    ``embed`` keeps order (row ``i`` is ``texts[i]``), makes no call for an empty batch, and
    gives vectors of one dimension per model. Vectors are unit length for both adapters here,
    so cosine is a dot product; a caller should not rely on that for other providers.
    """

    @property
    def model(self) -> str: ...

    @property
    def calls(self) -> int:
        """Batches sent to the model since construction (an empty batch is none): replay asserts 0."""
        ...

    async def embed(self, texts: Sequence[str]) -> Embeddings: ...

    async def aclose(self) -> None: ...


__all__ = [
    "FLOAT32_LE",
    "Embedder",
    "Embeddings",
    "cosine_similarity",
    "embedding_fingerprint",
    "pack_vector",
    "unpack_vector",
]
