"""The connections a conversation talks through: the bus and its log (through their ports), the
chat model and the embedder.

:meth:`ConversationClients.open` asks the settings' infrastructure for this process's
connections; nothing in the runtime opens a broker connection of its own. A dedicated
conversation opens its own clients; a host shares one set between all the conversations it runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from mirror.cognition.embeddings import Embedder, MiniLMEmbedder, OpenAIEmbedder
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.events.infrastructure import Connections

from .settings import RuntimeSettings


@dataclass(frozen=True)
class ConversationClients:
    """What a conversation talks through (``owned=False``: shared by a host, so a conversation
    that stops leaves them open)."""

    connections: Connections
    llm: OpenAIChatClient
    embedder: Embedder | None
    owned: bool = True

    @classmethod
    async def open(cls, settings: RuntimeSettings, *, name: str, owned: bool = True) -> ConversationClients:
        connections = await settings.infrastructure.connect(name=name)
        return cls(connections, OpenAIChatClient(settings.llm), memory_embedder(settings), owned)

    async def close(self) -> None:
        await self.llm.aclose()
        if self.embedder is not None:
            await self.embedder.aclose()
        await self.connections.close()


@functools.cache
def _offline_embedder() -> MiniLMEmbedder:
    """One MiniLM per process: its weights (~90 MB) are shared by every conversation actor in it,
    and closing it releases nothing, so a conversation that stops may "close" it freely."""
    return MiniLMEmbedder()


def memory_embedder(settings: RuntimeSettings) -> Embedder | None:
    """The memory stage's embedder, as the settings ask (none when memory is off)."""
    if not settings.memory:
        return None
    if settings.embedder == "minilm":
        return _offline_embedder()
    return OpenAIEmbedder(replace(settings.llm, model=settings.embedding_model))


__all__ = ["ConversationClients", "memory_embedder"]
