"""The embeddings port over any OpenAI-compatible ``POST /v1/embeddings`` (hosted, vLLM, the simulator).

It rides on :class:`OpenAIChatClient` rather than a second HTTP client, so embeddings get the
same timeouts, bounded concurrency, retries with backoff, ``Retry-After`` and typed errors
(``LLMUnavailable``, ``LLMRequestRejected``, ``LLMBadResponse``) as chat, and the API key stays
out of every message. ``settings.model`` names the embedding model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..openai_client import LLMSettings, OpenAIChatClient
from .port import Embeddings


class OpenAIEmbedder:
    """:class:`Embedder` for an OpenAI-compatible endpoint.

    ``dimensions`` (optional) is both asked for (OpenAI's text-embedding-3 models shorten their
    vectors on request) and checked on every answer; without it the first answer's dimension is
    whatever the model gives, and later answers must match it (one model, one dimension).
    """

    def __init__(self, settings: LLMSettings, *, dimensions: int | None = None) -> None:
        if dimensions is not None and dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {dimensions}")
        self._client = OpenAIChatClient(settings)
        self._requested_dimensions = dimensions
        self._dimensions = dimensions

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self._client.settings.base_url!r}, model={self.model!r})"

    @property
    def model(self) -> str:
        return self._client.settings.model

    @property
    def dimensions(self) -> int | None:
        """The vector size, once asked for or once seen."""
        return self._dimensions

    @property
    def calls(self) -> int:
        """HTTP calls made (retries not counted): replay tests assert this stays at zero."""
        return self._client.calls

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        texts = list(texts)
        started = time.perf_counter()
        rows, tokens = await self._client.embed_with_usage(texts, dimensions=self._requested_dimensions)
        latency_ms = (time.perf_counter() - started) * 1000
        embeddings = Embeddings.from_rows(
            rows, texts=texts, model=self.model, latency_ms=latency_ms, tokens=tokens,
            dimensions=self._dimensions, requested_dimensions=self._requested_dimensions,
        )
        if texts and self._dimensions is None:
            self._dimensions = embeddings.dimensions
        return embeddings

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> OpenAIEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


__all__ = ["OpenAIEmbedder"]
