"""JetStream adapter of the bus port: fenced, deduplicated, pipelined appends.

Layout: one stream (``MIRROR`` by default) holds the subjects
``mirror.<tenant>.<conversation>.<branch>``; each subject is one conversation branch.

Fencing: every publish carries ``Nats-Expected-Last-Subject-Sequence`` = the stream sequence of
the last message this writer saw on its subject. The server rejects the publish (error 10071)
when another message landed there first, so two writers can never both append a seq. Every
publish also carries ``Nats-Msg-Id`` = the deterministic event id, so a retry after a lost ack
is recognised: on 10071 or a ``duplicate`` ack we read what the stream holds at that place and
accept only our own bytes. The fence keeps working after the ingester compacts the stream,
because compaction (:meth:`JetStreamBus.compact`) always keeps each subject's last message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from .bus import Head, check_batch
from .codec import decode, encode
from .envelope import Event
from .errors import AppendConflict, BusError
from .ids import StreamKey

log = logging.getLogger(__name__)

SUBJECT_ROOT = "mirror"
STREAM_SUBJECTS = f"{SUBJECT_ROOT}.*.*.*"
HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
HEADER_STATUS = "Status"
STATUS_NO_RESPONDERS = "503"
ERR_WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code when an expected-last-sequence header does not match."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
)


def subject_for(key: StreamKey) -> str:
    return f"{SUBJECT_ROOT}.{key.tenant}.{key.conversation}.{key.branch}"


def key_of_subject(subject: str) -> StreamKey:
    root, tenant, conversation, branch = subject.split(".")
    if root != SUBJECT_ROOT:
        raise ValueError(f"{subject!r} is not a Mirror subject")
    return StreamKey(tenant, conversation, branch)


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How the event stream is created. ``replicas`` is 3 on a production JetStream cluster."""

    name: str = "MIRROR"
    replicas: int = 1
    duplicate_window_s: float = 120.0
    publish_timeout_s: float = 5.0
    retry_deadline_s: float = 30.0
    max_in_flight: int = 512


_CRLF = b"\r\n"


def _parse_header_lines(raw: bytes) -> dict[str, str]:
    """NATS header block -> dict, without nats-py's per-character whitespace scan.

    nats-py 2.16 checks every character of every header name with a generator; for an
    ingester reading fenced messages that scan was its largest single cost. Header names
    containing whitespace are still dropped, as nats-py does.
    """
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip()
        if not key or len(key.split()) != 1 or not key.isascii():
            continue
        out[key.decode("ascii")] = value.strip().decode("utf-8", "replace")
    return out


class MirrorNatsClient(NatsClient):
    """nats-py's client with a faster header parser; behaviour is otherwise unchanged."""

    _parse_header_lines = staticmethod(_parse_header_lines)


async def connect_nats(url: str, *, name: str = "mirror", first_connect_timeout_s: float = 10.0) -> NatsClient:
    """A connection that, once made, keeps reconnecting for as long as the process lives.

    The first connection must succeed within ``first_connect_timeout_s``; otherwise
    :class:`BusError` says which URL could not be reached (nats-py alone would retry forever).
    """

    async def report_error(exc: Exception) -> None:
        log.debug("nats connection error: %r", exc)

    nc = MirrorNatsClient()
    try:
        await asyncio.wait_for(
            nc.connect(
                url,
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                connect_timeout=5,
                error_cb=report_error,
            ),
            first_connect_timeout_s,
        )
    except (OSError, nats.errors.Error, asyncio.TimeoutError) as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        raise BusError(
            f"cannot connect to NATS at {url} within {first_connect_timeout_s}s: {exc!r}; is nats-server running?"
        ) from exc
    return nc


async def ensure_stream(js: JetStreamContext, settings: StreamSettings) -> None:
    config = StreamConfig(
        name=settings.name,
        subjects=[STREAM_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        num_replicas=settings.replicas,
        duplicate_window=settings.duplicate_window_s,
        allow_direct=True,
    )
    try:
        await js.stream_info(settings.name)
    except nats.js.errors.NotFoundError:
        await js.add_stream(config)
        log.info("created JetStream stream %s on %s", settings.name, STREAM_SUBJECTS)


class _Window:
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


class PipelinedPublisher:
    """JetStream publishes whose acks are awaited together: one reply inbox, one future per ack.

    nats-py's ``publish_async`` leaves the future pending forever when the server answers with
    an API error (its reply handler raises instead of setting the exception), and a fenced
    append must see those errors, so Mirror routes the acks itself. ``max_in_flight`` bounds
    the publishes awaiting an ack at once. Deadlines are enforced by one sweeper task over a
    FIFO of (deadline, token) instead of a timer per publish, which cost more than the publish.
    """

    SWEEP_INTERVAL_S = 0.1

    def __init__(self, nc: NatsClient, max_in_flight: int) -> None:
        self.nc = nc
        self._window = _Window(max_in_flight)
        self._pending: dict[str, asyncio.Future[Ack]] = {}
        self._deadlines: deque[tuple[float, str]] = deque()
        self._next_token = 0
        self._prefix: str | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def _start(self) -> str:
        if self._prefix is None:
            prefix = self.nc.new_inbox()
            await self.nc.subscribe(prefix + ".*", cb=self._on_reply)
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
                future = self._pending.pop(token, None)
                if future is not None and not future.done():
                    future.set_exception(nats.errors.TimeoutError())

    async def publish(self, subject: str, data: bytes, headers: dict[str, str], timeout: float) -> Ack:
        prefix = self._prefix or await self._start()
        await self._window.acquire()
        try:
            self._next_token += 1
            token = str(self._next_token)
            loop = asyncio.get_running_loop()
            future: asyncio.Future[Ack] = loop.create_future()
            self._pending[token] = future
            self._deadlines.append((loop.time() + timeout, token))
            try:
                await self.nc.publish(subject, data, reply=f"{prefix}.{token}", headers=headers)
                return await future
            finally:
                self._pending.pop(token, None)
        finally:
            self._window.release()

    async def _on_reply(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject.rpartition(".")[2], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get(HEADER_STATUS) == STATUS_NO_RESPONDERS:
            future.set_exception(nats.js.errors.NoStreamResponseError())
            return
        try:
            response = json.loads(msg.data)
            if "error" in response:
                future.set_exception(nats.js.errors.APIError(**response["error"]))
            else:
                future.set_result(Ack(response["seq"], response.get("duplicate", False)))
        except (ValueError, TypeError, KeyError) as exc:
            future.set_exception(BusError(f"unreadable JetStream ack: {exc!r}"))


class JetStreamBus:
    """Appends events to JetStream with fencing, deduplication and pipelining."""

    def __init__(self, nc: NatsClient, settings: StreamSettings = StreamSettings()) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.publish_timeout_s)
        self.settings = settings
        self._publisher = PipelinedPublisher(nc, settings.max_in_flight)

    @classmethod
    async def connect(cls, url: str, settings: StreamSettings = StreamSettings()) -> "JetStreamBus":
        nc = await connect_nats(url, name="mirror-bus")
        bus = cls(nc, settings)
        await bus._retrying(ensure_stream, bus.js, settings)
        return bus

    async def close(self) -> None:
        await self._publisher.close()
        if not self.nc.is_closed:
            await self.nc.drain()

    async def _retrying(self, function, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Run ``function`` again on transient broker errors, with jittered backoff."""
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(TRANSIENT_ERRORS),
                wait=wait_exponential_jitter(multiplier=0.05, max=1.0, jitter=0.05),
                stop=stop_after_delay(self.settings.retry_deadline_s),
                reraise=True,
            ):
                with attempt:
                    return await function(*args, **kwargs)
        except TRANSIENT_ERRORS as exc:
            raise BusError(
                f"NATS did not answer within {self.settings.retry_deadline_s}s: {exc!r}"
            ) from exc

    # ------------------------------------------------------------------------- reading

    async def head(self, key: StreamKey) -> Head:
        return await self._retrying(self._head, key)

    async def _head(self, key: StreamKey) -> Head:
        try:
            message = await self.js.get_last_msg(self.settings.name, subject_for(key), direct=True)
        except nats.js.errors.NotFoundError:
            return Head(last_seq=None, fence=0)
        return Head(last_seq=decode(message.data).seq, fence=message.seq)

    async def _stored_after(self, subject: str, stream_seq: int) -> tuple[int, bytes] | None:
        """The first message on ``subject`` after ``stream_seq``, if any."""
        try:
            message = await self.js.get_msg(
                self.settings.name, seq=stream_seq + 1, subject=subject, next=True, direct=True
            )
        except nats.js.errors.NotFoundError:
            return None
        return message.seq, message.data

    # ------------------------------------------------------------------------- writing

    async def append(self, key: StreamKey, events: Sequence[Event], head: Head) -> Head:
        check_batch(key, events, head.next_seq(key))
        subject = subject_for(key)
        encoded = [encode(event) for event in events]
        fence = head.fence
        index = 0
        while index < len(events):
            event, data = events[index], encoded[index]
            try:
                try:
                    fence = await self._publish_fenced(key, subject, event, data, fence)
                except TRANSIENT_ERRORS:
                    # Same message id and fence: a copy that did land is recognised, not doubled.
                    fence = await self._retrying(self._publish_fenced, key, subject, event, data, fence)
            except AppendConflict:
                landed = await self._landed_part(subject, events, encoded)
                if landed is None or landed[0] < index:
                    raise
                index, fence = landed
            index += 1
        return Head(last_seq=events[-1].seq if events else head.last_seq, fence=fence)

    async def _landed_part(
        self, subject: str, events: Sequence[Event], encoded: Sequence[bytes]
    ) -> tuple[int, int] | None:
        """Is the subject's newest message one of this batch's own events? (index, stream seq)

        A retry whose first attempt landed, after compaction removed the older messages it
        would be compared with: each event is fenced on the previous one, so if event k is
        the newest message, events before it landed too. Anything else is another writer.
        """
        try:
            last = await self.js.get_last_msg(self.settings.name, subject, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        for index in range(len(events) - 1, -1, -1):
            if encoded[index] == last.data:
                return index, last.seq
        return None

    async def _publish_fenced(
        self, key: StreamKey, subject: str, event: Event, data: bytes, fence: int
    ) -> int:
        headers = {
            HEADER_MSG_ID: event.id,
            HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: str(fence),
        }
        try:
            ack = await self._publisher.publish(subject, data, headers, self.settings.publish_timeout_s)
        except nats.js.errors.APIError as exc:
            if exc.err_code != ERR_WRONG_LAST_SEQUENCE:
                raise BusError(f"JetStream refused {key}#{event.seq}: {exc}") from exc
            # Either another writer got there first, or this is our own retry whose first
            # attempt was stored but whose ack was lost: the stream tells which.
            stored = await self._stored_after(subject, fence)
            if stored is not None and stored[1] == data:
                return stored[0]
            raise AppendConflict(
                key.tenant, key.conversation, key.branch,
                expected_seq=event.seq,
                detail=f"{exc.description} (writer expected subject sequence {fence})",
            ) from exc
        if ack.duplicate:
            stored = await self.js.get_msg(self.settings.name, seq=ack.seq, direct=True)
            if stored.data != data:
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch,
                    expected_seq=event.seq,
                    detail=f"message id {event.id} is already stored with other content",
                )
        return ack.seq

    async def append_many(
        self, batches: Sequence[tuple[StreamKey, Sequence[Event], Head]]
    ) -> list[Head | AppendConflict]:
        """Many conversations at once: up to ``max_in_flight`` publishes awaiting their acks."""

        async def one(key: StreamKey, events: Sequence[Event], head: Head) -> Head | AppendConflict:
            try:
                return await self.append(key, events, head)
            except AppendConflict as conflict:
                return conflict

        return list(await asyncio.gather(*(one(*batch) for batch in batches)))

    # ------------------------------------------------------------------------- retention

    async def compact(self, subject: str, below_stream_seq: int) -> None:
        """Drop the stream's copy of ``subject``'s messages older than ``below_stream_seq``.

        Called by the ingester with the stream sequence of the newest message it has
        committed for that subject, so the last committed message (and everything not yet
        committed) stays: writers' fences and heads keep working from the stream alone.
        """
        await self._retrying(self.js.purge_stream, self.settings.name, seq=below_stream_seq, subject=subject)
