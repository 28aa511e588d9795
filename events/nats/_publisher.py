"""Pipelined JetStream publishing with Mirror's own ack routing.

nats-py's ``publish_async`` leaves its future pending forever when the server answers with an
API error (its reply handler raises instead of setting the exception), and a fenced append
must see those errors, so Mirror routes acks itself: one reply inbox, a token per publish.

Two ways to wait for an ack:

- :meth:`PipelinedPublisher.publish` awaits a future (one publish per call, bounded by a
  window) — the general path, used for single appends, retries and every error case;
- :meth:`PipelinedPublisher.send` calls a handler as the ack is read, which lets
  :class:`ChainedAppends` publish a conversation's next event the moment the previous ack
  arrives, without waking a task per event — the bulk path of ``append_many``.

Acks arrive on a raw subscription (:meth:`MirrorNatsClient.subscribe_raw`): each is handled
straight from the connection's read loop, without nats-py's message object and queue.

Deadlines are enforced by one sweeper task over a FIFO of (deadline, token) instead of a timer
per publish, which cost more than the publish itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import nats.errors
import nats.js.errors

from mirror.events.errors import BusError
from mirror.events.nats._client import MirrorNatsClient, status_of

HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
STATUS_NO_RESPONDERS = b"503"


class Window:
    """A FIFO counting semaphore with O(1) wake-ups.

    asyncio.Semaphore scans its waiters on every release; with a thousand conversations
    waiting on a window of 512 that scan was the publisher's largest cost.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # release() hands its slot straight to us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as we were cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


@dataclass(frozen=True, slots=True)
class Ack:
    """What a JetStream publish ack says that an append needs (cheaper than nats-py's PubAck)."""

    seq: int
    duplicate: bool


AckResult = Ack | BaseException
AckHandler = Callable[[AckResult], Awaitable[None]]


_SEQ_FIELD = b'"seq":'


def _ack_of(data: bytes, header_block: bytes | None) -> AckResult:
    status = status_of(header_block)
    if status is not None and status[0] == STATUS_NO_RESPONDERS:
        return nats.js.errors.NoStreamResponseError()
    # The common ack, {"stream":"MIRROR","seq":N} (+ "domain"), read without a JSON parser;
    # anything else (errors, duplicates, unexpected shapes) goes through json below.
    if b'"error"' not in data and b'"duplicate"' not in data:
        start = data.find(_SEQ_FIELD)
        if start >= 0:
            end = start + len(_SEQ_FIELD)
            stop = end
            while stop < len(data) and 48 <= data[stop] <= 57:
                stop += 1
            if stop > end and data[stop : stop + 1] in (b",", b"}"):
                return Ack(int(data[end:stop]), False)
    try:
        response = json.loads(data)
        if "error" in response:
            return nats.js.errors.APIError(**response["error"])
        return Ack(response["seq"], response.get("duplicate", False))
    except (ValueError, TypeError, KeyError) as exc:
        return BusError(f"unreadable JetStream ack: {exc!r}")


class PipelinedPublisher:
    """JetStream publishes whose acks are routed by token to a future or a handler."""

    SWEEP_INTERVAL_S = 0.1

    def __init__(self, nc: MirrorNatsClient, max_in_flight: int, disconnect_grace_s: float = 1.0) -> None:
        self.nc = nc
        self.max_in_flight = max_in_flight
        self.disconnect_grace_s = disconnect_grace_s
        """A publish waiting for its ack fails this long after the connection dropped, not at its
        deadline: the server that would have acked it may be gone (its retry is recognised by id)."""
        self._disconnected_at: float | None = None
        self._window = Window(max_in_flight)
        self._pending: dict[int, asyncio.Future[Ack] | AckHandler] = {}
        self._deadlines: deque[tuple[float, int]] = deque()
        self._next_token = 0
        self._prefix: str | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def _start(self) -> str:
        if self._prefix is None:
            prefix = self.nc.new_inbox()
            await self.nc.subscribe_raw(prefix + ".*", self._on_reply)
            self._prefix = prefix
            self._sweeper = asyncio.create_task(self._sweep(), name="mirror-publish-deadlines")
        return self._prefix

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.SWEEP_INTERVAL_S)
            now = loop.time()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, token = self._deadlines.popleft()
                await self._fail(token, nats.errors.TimeoutError())
            if self.nc.is_connected:
                self._disconnected_at = None
            elif self._disconnected_at is None:
                self._disconnected_at = now
            elif now - self._disconnected_at >= self.disconnect_grace_s and self._pending:
                for token in list(self._pending):
                    await self._fail(token, nats.errors.ConnectionReconnectingError())

    async def _fail(self, token: int, error: Exception) -> None:
        waiter = self._pending.pop(token, None)
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_exception(error)
        elif waiter is not None:
            await waiter(error)

    def _register(self, waiter: asyncio.Future[Ack] | AckHandler, timeout: float) -> int:
        self._next_token += 1
        token = self._next_token
        self._pending[token] = waiter
        self._deadlines.append((asyncio.get_running_loop().time() + timeout, token))
        return token

    async def publish(self, subject: str, data: bytes, headers: dict[str, str], timeout: float) -> Ack:
        """Publish and wait for the ack; raises the server's error or a timeout."""
        prefix = self._prefix or await self._start()
        await self._window.acquire()
        try:
            future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
            token = self._register(future, timeout)
            try:
                await self.nc.publish(subject, data, reply=f"{prefix}.{token}", headers=headers)
                return await future
            finally:
                self._pending.pop(token, None)
        finally:
            self._window.release()

    async def send(
        self, subject: str, data: bytes, headers: dict[str, str], timeout: float, handler: AckHandler
    ) -> None:
        """Publish; ``handler`` gets the :class:`Ack` or the exception, from the reply callback."""
        prefix = self._prefix or await self._start()
        token = self._register(handler, timeout)
        try:
            await self.nc.publish(subject, data, reply=f"{prefix}.{token}", headers=headers)
        except Exception:
            self._pending.pop(token, None)
            raise

    async def _on_reply(self, subject: bytes, reply: bytes, data: bytes, header_block: bytes | None) -> None:
        """An ack, straight from the read loop (a raw subscription: no Msg, no task switch)."""
        try:
            token = int(subject.rpartition(b".")[2])
        except ValueError:
            return
        waiter = self._pending.pop(token, None)
        if waiter is None:
            return
        result = _ack_of(data, header_block)
        if not isinstance(waiter, asyncio.Future):
            await waiter(result)
        elif not waiter.done():
            if isinstance(result, Ack):
                waiter.set_result(result)
            else:
                waiter.set_exception(result)


@dataclass(slots=True)
class Chain:
    """One conversation's append in the bulk path: its encoded events and where it stands."""

    subject: str
    encoded: Sequence[bytes]
    message_ids: Sequence[str]
    fence: int
    index: int = 0


Fallback = Callable[[int, Chain], Coroutine[Any, Any, int]]


class AckSender(Protocol):
    """What :class:`ChainedAppends` needs of a publisher; :class:`PipelinedPublisher` is the one Mirror runs."""

    @property
    def max_in_flight(self) -> int: ...

    async def send(
        self, subject: str, data: bytes, headers: dict[str, str], timeout: float, handler: AckHandler
    ) -> None: ...


class ChainedAppends:
    """Run many fenced appends, at most ``max_in_flight`` conversations publishing at once.

    A clean ack (no error, not a duplicate) moves its chain to the next event straight from
    the reply callback. Anything else — an error, a timeout, a duplicate ack — hands the chain,
    from the event it reached, to ``fallback(position, chain)``: the general coroutine path, which
    recognises retries and reports conflicts. Per conversation, events go out in order.
    """

    def __init__(self, publisher: AckSender, timeout: float, fallback: Fallback) -> None:
        self.publisher = publisher
        self.timeout = timeout
        self.fallback = fallback

    async def run(self, chains: Sequence[Chain]) -> list[int | BaseException]:
        """Per chain: its final fence, or what ``fallback`` returned or raised."""
        return await _ChainedRun(self, chains).run()


class _ChainedRun:
    """One :meth:`ChainedAppends.run`: the chains, which are still waiting to start, and what each came to.

    A chain is *waiting* (not started), *active* (an event of it in flight, or in its fallback),
    or *done* (its result recorded). ``run`` starts ``max_in_flight`` chains; each chain that is
    done starts the next waiting one, so as many stay active until none waits. ``finished`` is
    set when the last chain is done.
    """

    def __init__(self, appends: ChainedAppends, chains: Sequence[Chain]) -> None:
        self.publisher = appends.publisher
        self.timeout = appends.timeout
        self.fallback = appends.fallback
        self.chains = chains
        self.loop = asyncio.get_running_loop()
        self.results: list[int | BaseException | None] = [None] * len(chains)
        self.waiting = deque(range(len(chains)))
        """Positions of the chains not started yet, in order."""
        self.remaining = len(chains)
        """Chains not done yet."""
        self.finished: asyncio.Future[None] = self.loop.create_future()
        self._tasks: set[asyncio.Task[Any]] = set()
        """Fallbacks and restarts in flight, held so the loop's weak references are not their only ones."""

    async def run(self) -> list[int | BaseException]:
        for _ in range(min(self.publisher.max_in_flight, len(self.chains))):
            await self.start_next()
        if self.chains:
            await self.finished
        return cast(list[int | BaseException], self.results)  # done() has filled every position by now

    async def start_next(self) -> None:
        """Start the next waiting chain that has events; one without any is done at once, at its fence."""
        while self.waiting:
            position = self.waiting.popleft()
            if self.chains[position].encoded:
                await self.publish(position)
                return
            self.done(position, self.chains[position].fence)

    async def publish(self, position: int) -> None:
        """Send the chain's current event, fenced on the stream seq of the one before it."""
        chain = self.chains[position]
        headers = {
            HEADER_MSG_ID: chain.message_ids[chain.index],
            HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: str(chain.fence),
        }
        on_ack = functools.partial(self.on_ack, position)
        try:
            await self.publisher.send(chain.subject, chain.encoded[chain.index], headers, self.timeout, on_ack)
        except Exception as exc:  # not even sent (connection gone): the general path retries
            await on_ack(exc)

    async def on_ack(self, position: int, result: AckResult) -> None:
        """A clean ack moves the chain to its next event (or, after its last, starts the next chain);
        anything else hands the chain to the fallback, from the event it reached."""
        chain = self.chains[position]
        if isinstance(result, Ack) and not result.duplicate:
            chain.fence = result.seq
            chain.index += 1
            if chain.index < len(chain.encoded):
                await self.publish(position)
            else:
                self.done(position, chain.fence)
                await self.start_next()
            return
        task = self._spawn(self.fallback(position, chain))
        task.add_done_callback(functools.partial(self.settle, position))

    def settle(self, position: int, fallback: asyncio.Task[int]) -> None:
        """The chain's fallback ended: its fence or exception is the chain's result; the next chain starts."""
        self.done(position, fallback.exception() or fallback.result())
        self._spawn(self.start_next())

    def done(self, position: int, result: int | BaseException) -> None:
        self.results[position] = result
        self.remaining -= 1
        if self.remaining == 0 and not self.finished.done():
            self.finished.set_result(None)

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
