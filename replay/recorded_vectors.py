"""``RecordedVectors``: every embedding the log holds, so replay embeds nothing again.

Memory events carry the vectors an embedder produced — a ``belief`` assert its statement's,
a ``recall`` its query's — with the embedding request's fingerprint and model on the payload
(see :class:`~mirror.events.payloads.Belief`). This index answers from them, by fingerprint
(the exact request) or by ``(model, text)`` (the same text embedded by the same model gives the
same vector, whichever batch it came in), so an embedder adapter for replay can serve every
recorded embedding and count the rest as misses instead of calling a model.

Only the first vector seen for a key is kept: a log never holds two different vectors for one
request, and if it did, the first is the one the recorded decisions were made with.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirror.events.envelope import Event
from mirror.events.payloads import Belief, Recall


class RecordedVectors:
    """Vectors from ``belief`` and ``recall`` events, looked up without an embedding call."""

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
            elif isinstance(payload, Recall) and payload.query_embedding:
                self._keep(payload.query_fingerprint, payload.embedding_model, payload.query, payload.query_embedding)

    def _keep(self, fingerprint: str, model: str, text: str, vector: bytes) -> None:
        if fingerprint:
            self._by_fingerprint.setdefault(fingerprint, vector)
        self._by_text.setdefault((model, text), vector)

    def __len__(self) -> int:
        return len(self._by_text)

    def by_fingerprint(self, fingerprint: str) -> bytes | None:
        """The vector the request with ``fingerprint`` produced, if the log holds it."""
        return self._counted(self._by_fingerprint.get(fingerprint))

    def by_text(self, model: str, text: str) -> bytes | None:
        """The vector ``model`` gave ``text``, if the log holds it."""
        return self._counted(self._by_text.get((model, text)))

    def _counted(self, vector: bytes | None) -> bytes | None:
        if vector is None:
            self.misses += 1
        else:
            self.hits += 1
        return vector


__all__ = ["RecordedVectors"]
