"""A streamed turn, relayed from the conversation's process to a response: :class:`TurnRelay`.

The route starts the relay (the conversation's :meth:`~mirror.actors.handle.ConversationHandle.turn_stream`,
through :meth:`~mirror.gateway.runtime.GatewayRuntime.ask`, so a passivating or re-fenced
conversation is asked again as for a plain turn) and awaits its first item *before* it answers:
whatever fails before the first piece of the reply — a bad setting, the broker, the model — is
still answered with its status code (409, 503, ...). After that the response has begun, so a
failure ends the stream with an error event instead, and it is never asked again (the client
has seen pieces of a reply that was not logged).

The last item is the :class:`~mirror.actors.results.TurnResult`, which the conversation sends
only once its ``turn`` event is acknowledged by the bus: the response's final event, the one
that says "done" and carries the seq, is written after it and never before.

The machine running the turn may be declared dead meanwhile (:mod:`mirror.gateway.node_watch`):
before the first piece that is :class:`~mirror.gateway.errors.HostLost` as for a plain turn (sent
once more elsewhere when ``resend_safe``: a keyed turn), after it a :class:`StreamCut` of it.

A client that disconnects mid-stream does not stop the turn: the relay's task (kept here) reads
on to the end, and the conversation appends the whole turn (or, failing, none of it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from mirror.actors.handle import ConversationHandle
from mirror.actors.results import TurnResult
from mirror.actors.token_stream import StreamItem
from mirror.events.ids import StreamKey
from mirror.gateway.errors import HostLost
from mirror.gateway.runtime import GatewayRuntime

log = logging.getLogger(__name__)

__all__ = ["StreamCut", "TurnRelay"]

_RELAYS: set[asyncio.Task[TurnResult]] = set()
"""Relays still reading, whatever their response does (a client may have left)."""


class StreamCut(Exception):
    """The turn failed after pieces of its reply were sent; ``error`` is why. Never asked again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the turn failed after its reply began: {error}")
        self.error = error


class TurnRelay:
    """One streamed turn: ``await relay.next()`` gives the pieces (``str``), then the TurnResult."""

    def __init__(self, runtime: GatewayRuntime, key: StreamKey,
                 start: Callable[[ConversationHandle], AsyncIterator[StreamItem]], *, resend_safe: bool = False) -> None:
        self.key = key
        self._start = start
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._began = False
        self._task = asyncio.create_task(self._relay(runtime, resend_safe), name=f"relay-{key}")
        _RELAYS.add(self._task)
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[TurnResult]) -> None:
        _RELAYS.discard(task)
        self._pieces.put_nowait(None)
        if not task.cancelled() and task.exception() is not None and self._began:
            log.warning("a streamed turn of %s failed after its reply began: %r", self.key, task.exception())

    async def _relay(self, runtime: GatewayRuntime, resend_safe: bool) -> TurnResult:
        try:
            return await runtime.ask(self.key, self._read, resend_safe=lambda: resend_safe and not self._began)
        except HostLost as lost:
            if self._began:
                raise StreamCut(lost) from lost
            raise

    async def _read(self, handle: ConversationHandle) -> TurnResult:
        result: TurnResult | None = None
        try:
            async for item in self._start(handle):
                if isinstance(item, TurnResult):
                    result = item
                else:
                    self._began = True
                    self._pieces.put_nowait(item)
        except Exception as exc:
            if self._began:
                raise StreamCut(exc) from exc
            raise
        if result is None:
            raise StreamCut(RuntimeError("the stream ended without its turn"))
        return result

    async def next(self) -> StreamItem:
        """The next piece, else the TurnResult; the turn's error, raised (a :class:`StreamCut` after
        the first piece). Call again after the result: it is given again."""
        piece = await self._pieces.get()
        if piece is not None:
            return piece
        self._pieces.put_nowait(None)  # the end stays the end
        return self._task.result()
