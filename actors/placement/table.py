"""The conversations one host runs: activation, a mailbox per conversation, LRU cap, idle passivation.

:class:`HostedConversations` is plain asyncio (a host actor wraps it; tests drive it directly).
Each conversation keeps everything that made it an actor of its own:

- **Activated on its first message**, once: concurrent first messages share one activation
  (single flight), and an activation that fails leaves nothing behind (the next message tries
  again).
- **One mailbox, processed in order**: a conversation's calls run one at a time in arrival
  order (an ``asyncio.Lock`` is FIFO), so a turn never interleaves with another of the same
  conversation; different conversations never wait for each other, whatever one of them is
  doing (a slow model call is an ``await``).
- **A single fenced writer**: its :class:`~mirror.actors.conversation.Conversation`'s writer.
- **Passivated** when idle for ``passivate_after_s`` or crowded out (more than ``max_live``
  live: least recently used first). Passivation finishes the thinking in progress and writes
  a snapshot; a message that arrives meanwhile waits for it and re-activates from that
  snapshot.
- **Errors stay with their conversation**: an exception in one conversation's call reaches
  that call's caller only; a conversation whose writer was fenced off is dropped, so the next
  message rebuilds it from the log.

The connections (NATS, the chat model, the embedder) and the prompt set are the host's, shared
by all its conversations: a live conversation costs its state and indexes, not a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mirror.actors.clients import ConversationClients
from mirror.actors.conversation import Conversation, RebuildReport
from mirror.actors.errors import Fenced
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.settings import RuntimeSettings, settings_prompts
from mirror.actors.token_stream import StreamItem, streamed_turn
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.projections.snapshot import snapshot_bytes

log = logging.getLogger(__name__)

T = TypeVar("T")

SWEEP_EVERY_S = 5.0
"""How often idle conversations are looked for (at most; half the idle time when that is shorter)."""


@dataclass
class _Live:
    """One live conversation: its state machine, mailbox and last use."""

    conversation: Conversation
    mailbox: asyncio.Lock
    last_active: float


@dataclass
class HostStats:
    live: int
    activations: int
    passivations: int
    evictions: int
    failed_activations: int
    activation_ms_total: float
    activation_phases_ms_total: dict[str, float] = field(default_factory=dict)
    """Where the activations' time went, summed per phase: ``queued`` (waiting for the event
    loop), ``clients`` (the host's connections, the first time), the rebuild's phases
    (:attr:`~mirror.actors.rebuild.RebuildReport.phases_ms`) and ``start`` (the rest of starting)."""

    def add_phases(self, phases: dict[str, float]) -> None:
        for phase, ms in phases.items():
            self.activation_phases_ms_total[phase] = self.activation_phases_ms_total.get(phase, 0.0) + ms


class HostedConversations:
    """Many live conversations in one event loop (see the module docstring)."""

    def __init__(self, settings: RuntimeSettings, *, max_live: int | None = None, name: str = "host") -> None:
        self.settings = settings
        self.max_live = max_live if max_live is not None else settings.max_live_per_host
        self.name = name
        self.prompts = settings_prompts(settings)
        self._clients: ConversationClients | None = None
        self._opening = asyncio.Lock()
        """Conversations activated at once open the shared clients once: each open awaits, and two
        opened sets would be two fair shares, each with all the model's slots."""
        self._live: OrderedDict[StreamKey, _Live] = OrderedDict()
        self._activating: dict[StreamKey, asyncio.Task[_Live]] = {}
        self._passivating: dict[StreamKey, asyncio.Task[None]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        """Fenced-off conversations being stopped: kept so the loop cannot drop them, awaited by close()."""
        self._sweeper: asyncio.Task[None] | None = None
        self.stats = HostStats(0, 0, 0, 0, 0, 0.0)

    # ------------------------------------------------------------------------ lifecycle

    async def clients(self) -> ConversationClients:
        if self._clients is None:
            async with self._opening:
                if self._clients is None:
                    self._clients = await ConversationClients.open(self.settings, name=f"mirror-{self.name}",
                                                                   owned=False)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_idle(), name=f"{self.name}-idle-sweep")
        return self._clients

    async def close(self) -> None:
        """Passivate every live conversation (snapshots written), then close the connections."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await asyncio.gather(*(self.passivate(key) for key in list(self._live)), return_exceptions=True)
        await asyncio.gather(*self._passivating.values(), *self._stopping, return_exceptions=True)
        if self._clients is not None:
            await self._clients.close()
            self._clients = None

    def live_keys(self) -> list[StreamKey]:
        """The live conversations, least recently used first."""
        return list(self._live)

    # ------------------------------------------------------------------------ calls

    async def call(self, key: StreamKey, method: Callable[[Conversation], Awaitable[T]], *, mailbox: bool = True) -> T:
        """Run ``method(conversation)`` for ``key``: activated if need be, in its mailbox's order.

        ``mailbox=False`` is for reads that must not queue behind a long call (a summary while a
        turn waits on the model): they see the state as it is.
        """
        live = await self._activated(key)
        while self._live.get(key) is not live:  # crowded out before this call resumed: activate again
            live = await self._activated(key)
        # No await from the check to the mailbox's queue: a later eviction's passivation queues after this call.
        live.last_active = time.monotonic()
        self._live.move_to_end(key)
        try:
            if not mailbox:
                return await method(live.conversation)
            async with live.mailbox:
                return await method(live.conversation)
        except Fenced:
            self._drop(key, live)  # another writer has moved on: the next message rebuilds from the log
            raise

    # The calls a handle makes (a host's methods and the local placement's), each in its place:
    # a turn in the mailbox; the reads beside it, on the state as it is.

    async def turn(self, key: StreamKey, request: TurnRequest) -> TurnResult:
        self._refuse_early(key, request)
        return await self.call(key, lambda conversation: conversation.turn(request))

    def turn_stream(self, key: StreamKey, request: TurnRequest) -> AsyncIterator[StreamItem]:
        """:meth:`turn`, streamed (:func:`~mirror.actors.token_stream.streamed_turn`), in the same mailbox."""
        self._refuse_early(key, request)
        return streamed_turn(lambda sink: self.call(key, lambda conversation: conversation.turn(request.streamed(), sink)))

    def _refuse_early(self, key: StreamKey, request: TurnRequest) -> None:
        """The fair share's refusal of a turn (429/503), before its conversation is activated: an
        overloaded host refuses in microseconds, not after a rebuild. A keyed turn goes on to its
        conversation, which may answer it as the replay of one already taken (no model call)."""
        if self._clients is not None and request.idempotency_key is None:
            self._clients.talker(key.tenant).check()

    async def choose(self, key: StreamKey, mind: MindChoice) -> ConversationSummary:
        """The mind's choice, in the mailbox (a turn queued before it goes first)."""
        return await self.call(key, lambda conversation: conversation.choose(mind))

    async def reflect(self, key: StreamKey) -> ReflectionResult:
        """A forced reflection, beside the mailbox: it waits for the thinker, not for the turns
        queued behind it (the writer keeps it from racing the think loop)."""
        return await self.call(key, _reflect, mailbox=False)

    async def summary(self, key: StreamKey) -> ConversationSummary:
        return await self.call(key, _summary, mailbox=False)

    async def wait_idle(self, key: StreamKey, timeout: float | None = None) -> bool:
        return await self.call(key, lambda conversation: conversation.wait_idle(timeout), mailbox=False)

    async def state_bytes(self, key: StreamKey) -> bytes:
        return await self.call(key, _state_bytes, mailbox=False)

    async def rebuild_report(self, key: StreamKey) -> RebuildReport | None:
        return await self.call(key, _rebuild_report, mailbox=False)

    async def passivate(self, key: StreamKey) -> None:
        """Finish the conversation's thinking, snapshot it and let it go (no-op when not live)."""
        live = self._live.pop(key, None)
        task = self._passivating.get(key) if live is None else self._begin_passivation(key, live)
        if task is not None:
            await asyncio.shield(task)

    def _begin_passivation(self, key: StreamKey, live: _Live) -> asyncio.Task[None]:
        """Start passivating a conversation already taken out of ``_live`` (at once: no await)."""
        task = self._passivating[key] = asyncio.create_task(self._passivate(key, live), name=f"passivate-{key}")
        return task

    async def _passivate(self, key: StreamKey, live: _Live) -> None:
        try:
            async with live.mailbox:  # after the calls already queued
                await live.conversation.passivate()
            self.stats.passivations += 1
        except Exception:
            log.exception("%s: passivating %s failed; its state is in the log", self.name, key)
            with contextlib.suppress(Exception):
                await live.conversation.stop()
        finally:
            self._passivating.pop(key, None)

    async def _activated(self, key: StreamKey) -> _Live:
        live = self._live.get(key)
        if live is not None:
            return live
        passivating = self._passivating.get(key)
        if passivating is not None:  # its snapshot first, then a fresh activation from it
            await asyncio.shield(passivating)
            return await self._activated(key)
        task = self._activating.get(key)
        if task is None:
            task = asyncio.create_task(self._activate(key, time.perf_counter()), name=f"activate-{key}")
            self._activating[key] = task
        return await asyncio.shield(task)

    async def _activate(self, key: StreamKey, asked: float) -> _Live:
        started = time.perf_counter()
        try:
            clients = await self.clients()
            opened = time.perf_counter()
            conversation = await Conversation(key, self.settings, prompts=self.prompts).start(clients)
        except BaseException:
            self.stats.failed_activations += 1
            raise
        finally:
            self._activating.pop(key, None)
        live = self._live[key] = _Live(conversation, asyncio.Lock(), time.monotonic())
        done = time.perf_counter()
        self.stats.activations += 1
        self.stats.activation_ms_total += (done - started) * 1000
        rebuilt = conversation.rebuilt
        rebuild_ms = 0.0 if rebuilt is None else rebuilt.rebuild_ms
        self.stats.add_phases({"queued": (started - asked) * 1000, "clients": (opened - started) * 1000,
                               **({} if rebuilt is None else rebuilt.phases_ms),
                               "start": (done - opened) * 1000 - rebuild_ms})
        self._evict_over_cap()
        return live

    def _evict_over_cap(self) -> None:
        while len(self._live) > self.max_live:
            victim, live = self._live.popitem(last=False)
            self.stats.evictions += 1
            self._begin_passivation(victim, live)

    def _drop(self, key: StreamKey, live: _Live) -> None:
        if self._live.get(key) is live:
            del self._live[key]
            task = asyncio.create_task(live.conversation.stop(), name=f"stop-{key}")  # a fenced writer has nothing to save
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _sweep_idle(self) -> None:
        every = min(SWEEP_EVERY_S, self.settings.passivate_after_s / 2)
        while True:
            await asyncio.sleep(every)
            cutoff = time.monotonic() - self.settings.passivate_after_s
            for key, live in list(self._live.items()):
                if live.last_active <= cutoff and not live.mailbox.locked() \
                        and await live.conversation.wait_idle(0) and self._live.get(key) is live:
                    del self._live[key]
                    self._begin_passivation(key, live)

    def metrics_figures(self) -> dict[str, Any]:
        """:meth:`figures`, the conversations thinking and the fair share's, as a scrape reads them
        (:func:`mirror.metrics.watch`, from the metrics server's thread: copies, no awaits)."""
        share = None if self._clients is None else self._clients.share.figures()
        thinking = sum(1 for live in list(self._live.values()) if live.conversation.thinking)
        return {**self.figures(), "thinking": thinking, "fair_share": share}

    def figures(self) -> dict[str, Any]:
        stats = self.stats
        return {
            "name": self.name, "live": len(self._live), "passivating": len(self._passivating), "max_live": self.max_live,
            "activations": stats.activations, "passivations": stats.passivations, "evictions": stats.evictions,
            "failed_activations": stats.failed_activations,
            "activation_ms_mean": round(stats.activation_ms_total / stats.activations, 3) if stats.activations else None,
            "activation_phases_ms_mean": {phase: round(total / stats.activations, 3) for phase, total
                                          in stats.activation_phases_ms_total.items()} if stats.activations else None,
            "model_slots": None if self._clients is None else self._clients.share.figures(),
        }


async def _reflect(conversation: Conversation) -> ReflectionResult:
    return await conversation.reflect()


async def _summary(conversation: Conversation) -> ConversationSummary:
    return conversation.summary()


async def _state_bytes(conversation: Conversation) -> bytes:
    return snapshot_bytes(conversation.state)


async def _rebuild_report(conversation: Conversation) -> RebuildReport | None:
    return conversation.rebuilt


__all__ = ["HostStats", "HostedConversations", "SWEEP_EVERY_S"]
