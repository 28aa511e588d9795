"""The one way callers reach a live conversation: :class:`ConversationHandle`.

A typed, keyword-argument interface with typed results, implemented by each placement — a
conversation host's slot (:class:`~mirror.actors.placement.handles.HostedConversation`), a
dedicated Ray actor (:class:`~mirror.actors.placement.handles.DedicatedConversation`), or a
table in this very process (:class:`~mirror.actors.placement.local.LocalConversation`, no Ray).
The gateway, the CLI, recompute, the benchmarks and the tests all call through it, so a turn can
be followed from the route into the conversation by a reader and by mypy alike; no method is
named by a string.

Errors: what the conversation raises reaches the caller as itself or, across Ray, as a Ray
error whose ``cause`` is it (:class:`~mirror.actors.errors.Fenced`,
:class:`~mirror.actors.errors.Passivated`, :class:`~mirror.actors.errors.SettingConflict`,
:class:`~mirror.cognition.errors.ReflectionRefused`, a bus or log error); a process that is gone for good raises Ray's actor errors, after which
:meth:`ConversationHandle.forget` lets the next call make it again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey

from .conversation import RebuildReport
from .results import ConversationSummary, ReflectionResult, TurnResult
from .token_stream import StreamItem


@runtime_checkable
class ConversationHandle(Protocol):
    """A live conversation, wherever it runs (activated by the first call)."""

    @property
    def key(self) -> StreamKey: ...

    async def turn(self, request: TurnRequest) -> TurnResult:
        """Reply to ``request.message``; its ``turn`` event is acknowledged before this returns.
        ``request.sync`` waits for the previous turn's thinking first; its ``mode``, ``memory`` and
        ``reflection`` are fixed by the first turn (a later one asking for others is ``SettingConflict``)."""
        ...

    def turn_stream(self, request: TurnRequest) -> AsyncIterator[StreamItem]:
        """:meth:`turn`, streamed: the reply's pieces (``str``) as the model writes them, then the
        :class:`TurnResult`, which comes only once the ``turn`` event is acknowledged
        (:mod:`mirror.actors.token_stream`). Closing the iterator early does not stop the turn."""
        ...

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        """Fix the conversation's mind before its first turn (a ``persona`` event for a character);
        the same choice again changes nothing, another one is ``SettingConflict``."""
        ...

    async def reflect(self) -> ReflectionResult:
        """Force a reflection once the thinker is current: its event's seq and what it did.
        Raises ``ReflectionRefused`` (cooldown: ``turns_left``; hourly cap: ``next_slot``;
        reflection off; no turn yet) or ``ReflectionFailed`` (every attempt failed)."""
        ...

    async def summary(self) -> ConversationSummary: ...

    async def wait_idle(self, *, timeout: float | None = None) -> bool:
        """Wait until no thinking runs; False if it still does after ``timeout`` seconds."""
        ...

    async def state_bytes(self) -> bytes:
        """The live state, as snapshot bytes (``state_from_snapshot`` reads them)."""
        ...

    async def rebuild_report(self) -> RebuildReport | None:
        """How the current incarnation rebuilt its state."""
        ...

    async def passivate(self) -> None:
        """Finish thinking, write a snapshot, let go; the next call activates it again."""
        ...

    async def pid(self) -> int:
        """The process the conversation runs in."""
        ...

    async def node_id(self) -> str | None:
        """The Ray node the conversation's process runs on (``None``: this very process); the same
        for as long as the handle lives, so a caller asks it once (the gateway's node watch)."""
        ...

    def forget(self) -> None:
        """The process behind this handle is gone for good: the next call makes it anew."""
        ...


__all__ = ["ConversationHandle"]
