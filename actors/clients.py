"""The connections a conversation talks through: the bus and its log (through their ports), the
chat model and the embedder.

:meth:`ConversationClients.open` asks the settings' infrastructure for this process's
connections; nothing in the runtime opens a broker connection of its own. A dedicated
conversation opens its own clients; a host shares one set between all the conversations it runs.

The chat model is reached through the process's :class:`~mirror.cognition.fair_share.FairShare`
(its slots are the client's ``max_concurrency``): :meth:`ConversationClients.talker` and
:meth:`ConversationClients.thinker` are the model as one tenant's Talker and Thinker call it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from mirror.cognition.embeddings import Embedder, MiniLMEmbedder, OpenAIEmbedder
from mirror.cognition.fair_share import TALKER, THINKER, AdmittedLLM, FairShare
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.cognition.talker_first import TalkerFirst
from mirror.events.infrastructure import Connections

from .settings import RuntimeSettings


@dataclass(frozen=True)
class ConversationClients:
    """What a conversation talks through (``owned=False``: shared by a host, so a conversation
    that stops leaves them open), and the process's :class:`TalkerFirst`: its conversations'
    thinking gives way to all their turns, as their model calls do in the fair share."""

    connections: Connections
    llm: OpenAIChatClient
    embedder: Embedder | None
    share: FairShare
    owned: bool = True
    talker_first: TalkerFirst = field(default_factory=TalkerFirst)

    @classmethod
    async def open(cls, settings: RuntimeSettings, *, name: str, owned: bool = True) -> ConversationClients:
        connections = await settings.infrastructure.connect(name=name)
        share = FairShare(settings.llm.max_concurrency, settings.fair_share)
        return cls(connections, OpenAIChatClient(settings.llm), memory_embedder(settings), share, owned)

    def talker(self, tenant: str) -> AdmittedLLM:
        """The chat model for ``tenant``'s Talker: a user waits, so it goes first in the tenant's share."""
        return AdmittedLLM(self.llm, self.share, tenant, TALKER, self.talker_first)

    def thinker(self, tenant: str) -> AdmittedLLM:
        """The chat model for ``tenant``'s thinking stages: queued after its Talker calls, shed when its backlog is full."""
        return AdmittedLLM(self.llm, self.share, tenant, THINKER, self.talker_first)

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
