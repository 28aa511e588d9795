"""``RecordedVectors``: every embedding the log holds, so replay embeds nothing again.

Memory events carry the vectors an embedder produced — a ``belief`` assert its statement's,
a ``recall`` its query's; so do the persona mind's, a ``retrieval`` its query's and an
``episode`` its exchange's — with the embedding request's fingerprint and model on the payload
(see :class:`~mirror.events.payloads.Belief`). This index answers from them, by fingerprint
(the exact request) or by ``(model, text)`` (the same text embedded by the same model gives the
same vector, whichever batch it came in), so an embedder adapter for replay can serve every
recorded embedding and count the rest as misses instead of calling a model.

Only the first vector seen for a key is kept: a log never holds two different vectors for one
request, and if it did, the first is the one the recorded decisions were made with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from mirror.cognition.embeddings.port import Embedder, Embeddings, embedding_fingerprint, unpack_vector
from mirror.cognition.errors import EmbeddingError
from mirror.events.envelope import Event
from mirror.events.payloads import Belief, Episode, Recall, Retrieval


class RecordedVectors:
    """Vectors from ``belief``, ``recall``, ``retrieval`` and ``episode`` events, looked up without
    an embedding call."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._by_fingerprint: dict[str, bytes] = {}
        self._by_text: dict[tuple[str, str], bytes] = {}
        self.hits = 0
        self.misses = 0
        self.add(events)

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            payload = event.payload
            if isinstance(payload, Belief) and payload.embedding:
                self._keep(payload.embedding_fingerprint, payload.embedding_model, payload.statement, payload.embedding)
            elif isinstance(payload, (Recall, Retrieval)) and payload.query_embedding:
                self._keep(payload.query_fingerprint, payload.embedding_model, payload.query, payload.query_embedding)
            elif isinstance(payload, Episode) and payload.embedding:
                self._keep(payload.embedding_fingerprint, payload.embedding_model, payload.text, payload.embedding)

    def _keep(self, fingerprint: str, model: str, text: str, vector: bytes) -> None:
        if fingerprint:
            self._by_fingerprint.setdefault(fingerprint, vector)
        self._by_text.setdefault((model, text), vector)

    def __len__(self) -> int:
        return len(self._by_text)

    def by_fingerprint(self, fingerprint: str) -> bytes | None:
        """The vector the request with ``fingerprint`` produced, if the log holds it."""
        return self._counted(self._by_fingerprint.get(fingerprint))

    def holds_fingerprint(self, fingerprint: str) -> bool:
        """Whether some stored vector came from the request with ``fingerprint`` (not counted)."""
        return fingerprint in self._by_fingerprint

    def by_text(self, model: str, text: str) -> bytes | None:
        """The vector ``model`` gave ``text``, if the log holds it."""
        return self._counted(self._by_text.get((model, text)))

    def _counted(self, vector: bytes | None) -> bytes | None:
        if vector is None:
            self.misses += 1
        else:
            self.hits += 1
        return vector


class NotRecorded(EmbeddingError):
    """A text replay has no recorded vector for, and no live embedder to ask."""


class RecordedEmbedder:
    """The :class:`Embedder` port answered from :class:`RecordedVectors`, by ``(model, text)``.

    Each text of a batch is looked up on its own, so a batch that mixes recorded and new texts
    (a recompute whose changed prompt changed some statements) sends only the new ones to
    ``live`` — in one call — and none at all when every text is recorded. The answer's
    fingerprint is the one the whole batch had live (:func:`embedding_fingerprint`, with the
    vector size when the recorded request asked for one — whichever of the two the log holds),
    so the events written from it are the recorded ones; a batch only ``live`` answered keeps
    the live fingerprint, and a mixed batch (recompute) one computed as if asked without a size. Without ``live`` a missing text raises
    ``missing`` (default :class:`NotRecorded`): verify passes the failure a step recorded, so
    a step whose embedding failed then fails again the same way. ``calls`` counts live batches.
    """

    def __init__(self, vectors: RecordedVectors, model: str, *, live: Embedder | None = None,
                 missing: Exception | None = None) -> None:
        self.vectors, self._model, self.live, self.missing = vectors, model, live, missing
        self.live_calls = 0

    @property
    def model(self) -> str:
        return self._model

    @property
    def calls(self) -> int:
        """Batches this embedder sent to ``live`` (a shared live embedder's own count may be higher)."""
        return self.live_calls

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        texts = list(texts)
        found = {text: self.vectors.by_text(self._model, text) for text in dict.fromkeys(texts)}
        new = [text for text, vector in found.items() if vector is None]
        rows = {text: unpack_vector(vector) for text, vector in found.items() if vector is not None}
        tokens, latency_ms = 0, 0.0
        fingerprint = self._fingerprint(texts, rows)
        if new:
            if self.live is None:
                raise self.missing or NotRecorded(
                    f"no recorded vector of {self._model} for {len(new)} text(s), e.g. {new[0][:80]!r}, and no "
                    "live embedder to ask"
                )
            self.live_calls += 1
            answered = await self.live.embed(new)
            rows.update((text, answered.vectors[index]) for index, text in enumerate(new))
            tokens, latency_ms = answered.tokens, answered.latency_ms
            if len(new) == len(found):
                fingerprint = answered.request_fingerprint
        matrix = np.stack([rows[text] for text in texts]) if texts else np.zeros((0, 0), dtype=np.float32)
        return Embeddings(matrix, self._model, fingerprint, latency_ms, tokens)

    def _fingerprint(self, texts: list[str], rows: dict[str, np.ndarray]) -> str:
        plain = embedding_fingerprint(self._model, texts)
        if rows and not self.vectors.holds_fingerprint(plain):
            sized = embedding_fingerprint(self._model, texts, len(next(iter(rows.values()))))
            if self.vectors.holds_fingerprint(sized):
                return sized
        return plain

    async def aclose(self) -> None:
        if self.live is not None:
            await self.live.aclose()


def recorded_embedding_model(events: Iterable[Event]) -> str | None:
    """The embedding model the log's first stored vector came from (``None``: no vector stored)."""
    for event in events:
        payload = event.payload
        if isinstance(payload, Belief) and payload.embedding_model:
            return payload.embedding_model
        if isinstance(payload, (Recall, Retrieval, Episode)) and payload.embedding_model:
            return payload.embedding_model
    return None


__all__ = ["NotRecorded", "RecordedEmbedder", "RecordedVectors", "recorded_embedding_model"]
