"""Conversations in this very process, without Ray: a :class:`~mirror.actors.placement.table.HostedConversations`
table behind the same :class:`~mirror.actors.handle.ConversationHandle` as the Ray placements.

For tests and for embedding the runtime in one process (with the in-memory infrastructure, a
whole conversation — turns, thinking, memory — runs with nothing started but the model).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from mirror.actors.conversation import RebuildReport
from mirror.actors.handle import ConversationHandle
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.actors.token_stream import StreamItem
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey

from .table import HostedConversations

__all__ = ["LocalConversation", "LocalPlacement"]


@dataclass(frozen=True)
class LocalConversation:
    """One conversation of a :class:`LocalPlacement`."""

    table: HostedConversations
    key: StreamKey

    async def turn(self, request: TurnRequest) -> TurnResult:
        return await self.table.turn(self.key, request)

    def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        return self.table.turn_stream(self.key, request)

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        return await self.table.choose(self.key, mind)

    async def reflect(self) -> ReflectionResult:
        return await self.table.reflect(self.key)

    async def summary(self) -> ConversationSummary:
        return await self.table.summary(self.key)

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        return await self.table.wait_idle(self.key, timeout)

    async def state_bytes(self) -> bytes:
        return await self.table.state_bytes(self.key)

    async def rebuild_report(self) -> RebuildReport | None:
        return await self.table.rebuild_report(self.key)

    async def passivate(self) -> None:
        await self.table.passivate(self.key)

    async def pid(self) -> int:
        return os.getpid()

    async def node_id(self) -> str | None:
        return None  # this very process: no node of its own to lose

    def forget(self) -> None:
        """Nothing to forget: the table lives as long as this process."""


class LocalPlacement:
    """A table of live conversations in this process; ``handle(key)`` reaches one. Close it when done."""

    def __init__(self, settings: RuntimeSettings, *, max_live: int | None = None) -> None:
        self.table = HostedConversations(settings, max_live=max_live, name="local")

    def handle(self, key: StreamKey) -> ConversationHandle:
        return LocalConversation(self.table, key)

    async def close(self) -> None:
        """Passivate every live conversation (snapshots written) and close the connections."""
        await self.table.close()
