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

Several events at once, on a replicated stream: one atomic batch (:mod:`._atomic`), fenced on
its first message; the same messages land, in one Raft proposal. A batch not cleanly acknowledged
is appended again one fenced publish at a time, which finds out what landed as above.

Sealing: each message's data is the event's codec record sealed with its conversation's data
key (:mod:`.sealing`); :meth:`JetStreamBus._seal` on the way in and :meth:`JetStreamBus._open`
on every way out are the only places that know it. Sealing is deterministic, so the byte
comparisons above work on sealed bytes unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, RawStreamMsg, RetentionPolicy, StorageType, StreamConfig
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from mirror import tracing
from mirror.events.bus import DEFAULT_SUBSCRIPTION_BUFFER, Head, Subscription, check_batch
from mirror.events.codec import decode, encode
from mirror.events.envelope import Event
from mirror.events.errors import AppendConflict, BusError, BusUnavailable, DataKeyErased
from mirror.events.ids import StreamKey
from mirror.events.nats._atomic import BatchNotStored, allow_atomic, batchable, batches_pay_off, publish_batch
from mirror.events.nats._client import MirrorNatsClient
from mirror.events.nats._publisher import (
    HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HEADER_MSG_ID,
    Chain,
    ChainedAppends,
    PipelinedPublisher,
)
from mirror.events.nats.sealing import DataKeys, KeyInProcess, is_sealed

log = logging.getLogger(__name__)

SUBJECT_ROOT = "mirror"
STREAM_SUBJECTS = f"{SUBJECT_ROOT}.*.*.*"
ERR_WRONG_LAST_SEQUENCE = 10071
ERR_WRONG_LAST_SEQUENCE_CONSTANT = 10164
"""The same refusal without the sequence in its text: a clustered stream answers it when the
expected-last-subject-sequence check fails at the leader (seen once under racing writers)."""
FENCE_REFUSALS = frozenset({ERR_WRONG_LAST_SEQUENCE, ERR_WRONG_LAST_SEQUENCE_CONSTANT})
"""JetStream's error code when an expected-last-sequence header does not match."""
ERR_DUPLICATE_IN_PROCESS = 10158
"""JetStream's error code (409, clustered streams) for a publish whose message id is already being
replicated: the first copy is proposed to the stream's Raft group but not yet stored. Asked again
a moment later, the stream answers what it did with that copy (a ``duplicate`` ack, or 10071)."""


class DuplicateInProcess(nats.errors.Error):
    """A publish met another copy of its message id still being replicated: retried as transient."""


ERR_NO_SUITABLE_PEERS = 10005
"""JetStream's error code for a stream it cannot place yet ("insufficient resources" / "no
suitable peers for placement"): right after a cluster elects its meta leader, the other peers
may not be reported online yet, and asked again a moment later it places the stream."""


class PlacementPending(nats.errors.Error):
    """A new stream's replicas could not be placed yet (the cluster is still forming): retried as transient."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
    DuplicateInProcess,
    PlacementPending,
    KeyInProcess,
)


T = TypeVar("T")


async def retry_transient(
    function: Callable[..., Awaitable[T]], *args: Any, deadline_s: float, **kwargs: Any
) -> T:
    """``await function(*args, **kwargs)``, again on transient broker errors (jittered backoff).

    Past ``deadline_s`` the last transient error is raised as :class:`BusError`, which says so.
    """
    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            wait=wait_exponential_jitter(multiplier=0.05, max=1.0, jitter=0.05),
            stop=stop_after_delay(deadline_s),
            reraise=True,
        ):
            with attempt:
                return await function(*args, **kwargs)
    except TRANSIENT_ERRORS as exc:
        raise BusError(f"NATS did not answer within {deadline_s}s: {exc!r}") from exc
    raise AssertionError("unreachable: AsyncRetrying either returns or raises")


def subject_for(key: StreamKey) -> str:
    return f"{SUBJECT_ROOT}.{key.tenant}.{key.conversation}.{key.branch}"


def _stored_message(message: RawStreamMsg) -> tuple[int, bytes]:
    """A directly got message's stream sequence and data.

    nats-py types both as optional (one class serves every way of getting a message), but a
    direct get that found one always fills them in from its reply; a reply without them is
    reported here as :class:`BusError` rather than as a ``TypeError`` further on.
    """
    if message.seq is None or message.data is None:
        raise BusError(f"JetStream returned a message without its sequence or data: {message!r}")
    return message.seq, message.data


def key_of_subject(subject: str) -> StreamKey:
    root, tenant, conversation, branch = subject.split(".")
    if root != SUBJECT_ROOT:
        raise ValueError(f"{subject!r} is not a Mirror subject")
    return StreamKey(tenant, conversation, branch)


MAX_DEFAULT_REPLICAS = 3
"""JetStream's own advice: R3 survives one lost server; R5 two, at a cost in every publish."""


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How the event stream is created.

    ``replicas`` None: min(3, the number of servers in the NATS URL list) (:func:`default_replicas`):
    one server gets R1, a cluster named by two URLs R2, by three or more R3. Set it to override
    (a 5-node cluster reached through one URL, say)."""

    name: str = "MIRROR"
    replicas: int | None = None
    duplicate_window_s: float = 120.0
    publish_timeout_s: float = 5.0
    retry_deadline_s: float = 30.0
    max_in_flight: int = 512
    disconnect_grace_s: float = 1.0
    """How long an append or a head waits for a dropped connection to come back before it raises
    :class:`BusUnavailable` (a cluster fails over in well under this; a dead broker does not)."""
    seal: bool = True
    """Seal each message with its conversation's data key (:mod:`.sealing`), so that erasing the
    key erases every copy. Off only to measure its cost: readers open sealed messages either way."""
    atomic_appends: bool | None = None
    """An append of several events as one atomic batch (:mod:`._atomic`): None on a replicated
    stream only, where it saves a Raft round and an fsync per event; True or False to decide."""


PING_INTERVAL_S = 2
MAX_OUTSTANDING_PINGS = 2
"""A client leaves a server that answered none of this many pings, sent every ``PING_INTERVAL_S``
(measured across network namespaces: a client of a cut-off server moved to another in 6.9 s)."""


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS URL list: ``nats://a:4222,nats://b:4222`` (spaces allowed) → each URL."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise BusError(f"no NATS server in {url!r}; give nats://HOST:PORT, or several comma-separated")
    return servers


def default_replicas(servers: int) -> int:
    """min(3, servers): as many copies of the stream as servers were named, at most three."""
    return max(1, min(MAX_DEFAULT_REPLICAS, servers))


async def connect_nats(url: str, *, name: str = "mirror", first_connect_timeout_s: float = 10.0) -> MirrorNatsClient:
    """A connection that, once made, keeps reconnecting for as long as the process lives.

    ``url`` is one server or several comma-separated (a cluster): nats-py gets them all and
    fails over between them, and also to the other servers the cluster tells it about. The
    first connection must succeed within ``first_connect_timeout_s``; otherwise
    :class:`BusError` says which URL could not be reached (nats-py alone would retry forever).
    """
    servers = nats_servers(url)

    async def report_error(exc: Exception) -> None:
        log.debug("nats connection error: %r", exc)

    nc = MirrorNatsClient(servers)
    try:
        await asyncio.wait_for(
            nc.connect(
                servers,
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,  # type: ignore[arg-type]  # nats-py annotates int, but only sleeps and compares with it: a float works
                connect_timeout=5,
                # A server that went silent (its machine cut off) is left after ~2 unanswered pings:
                # nats-py's default (every 2 min) kept a client on it for minutes, every publish timing out.
                ping_interval=PING_INTERVAL_S,
                max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                error_cb=report_error,
            ),
            first_connect_timeout_s,
        )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        raise BusError(
            f"cannot connect to NATS at {url} within {first_connect_timeout_s}s: {exc!r}; is nats-server running?"
        ) from exc
    return nc


async def ensure_stream(js: JetStreamContext, settings: StreamSettings, *, servers: int = 1) -> StreamConfig:
    """Create the stream if it is missing, with ``settings.replicas`` or :func:`default_replicas`
    of ``servers`` (how many the connection was given). An existing stream with fewer replicas is
    raised to that many if the cluster can hold them; if it cannot, a warning says so and the
    stream stays as it is. A stream with more replicas is left alone. Atomic batches
    (``allow_atomic``) are allowed on a new stream and turned on for an existing one.
    Returns the stream's configuration as the server holds it."""
    replicas = settings.replicas or default_replicas(servers)
    config = StreamConfig(
        name=settings.name,
        subjects=[STREAM_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        num_replicas=replicas,
        duplicate_window=settings.duplicate_window_s,
        allow_direct=True,
        allow_atomic=True,
    )
    try:
        info = await js.stream_info(settings.name)
    except nats.js.errors.NotFoundError:
        try:
            created = await js.add_stream(config)
        except nats.js.errors.APIError as exc:
            if exc.err_code == ERR_NO_SUITABLE_PEERS:
                raise PlacementPending(f"stream {settings.name} with {replicas} replicas: {exc.description}") from exc
            raise
        log.info("created JetStream stream %s on %s with %d replica(s)", settings.name, STREAM_SUBJECTS, replicas)
        return created.config
    current = info.config
    if not current.allow_atomic:
        current = await allow_atomic(js, current)
    existing = current.num_replicas or 1
    if existing >= replicas:
        return current
    try:
        raised = await js.update_stream(dataclasses.replace(current, num_replicas=replicas))
    except nats.js.errors.APIError as exc:
        log.warning("JetStream stream %s has %d replica(s) and %d were wanted, but the servers refused to add them "
                    "(%s); it keeps %d: run a cluster of at least %d servers, or set the stream's replicas",
                    settings.name, existing, replicas, exc.description, existing, replicas)
        return current
    log.info("JetStream stream %s raised from %d to %d replicas", settings.name, existing, replicas)
    return raised.config


class JetStreamBus:
    """Appends events to JetStream with fencing, deduplication and pipelining."""

    def __init__(self, nc: MirrorNatsClient, settings: StreamSettings = StreamSettings()) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.publish_timeout_s)
        self.settings = settings
        self._publisher = PipelinedPublisher(nc, settings.max_in_flight, settings.disconnect_grace_s)
        self.keys = DataKeys(self.js, settings.name, settings.replicas or default_replicas(len(nc.server_urls)))
        """The conversations' data keys (:mod:`.sealing`), cached in this process."""
        self.atomic_batches = False
        """Whether an append of several events goes as one atomic batch: set by :meth:`connect`
        from the stream it found (:func:`~._atomic.batches_pay_off`)."""

    @classmethod
    async def connect(cls, url: str, settings: StreamSettings = StreamSettings(), *,
                      first_connect_timeout_s: float = 10.0, name: str = "mirror-bus") -> JetStreamBus:
        nc = await connect_nats(url, name=name, first_connect_timeout_s=first_connect_timeout_s)
        bus = cls(nc, settings)
        config = await bus._retrying(ensure_stream, bus.js, settings, servers=len(nc.server_urls))
        bus.atomic_batches = batches_pay_off(config.num_replicas or 1, config.allow_atomic, settings.atomic_appends)
        return bus

    async def close(self) -> None:
        await self._publisher.close()
        if not self.nc.is_closed:
            await self.nc.drain()

    async def _retrying(self, function: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return await retry_transient(function, *args, deadline_s=self.settings.retry_deadline_s, **kwargs)

    async def _connected(self) -> None:
        """Raise :class:`BusUnavailable` unless connected, or reconnected within the grace.

        The turn path (head, append) checks this before each attempt instead of riding out the
        publish and retry deadlines (5 s and 30 s) against a broker that is gone: its caller
        answers 503 at once, and nothing was published, or what was is recognised by id."""
        if not await self.nc.wait_connected(self.settings.disconnect_grace_s):
            raise BusUnavailable(self.nc.server_list, self.settings.disconnect_grace_s)

    async def _retrying_connected(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """:meth:`_retrying`, but giving up with :class:`BusUnavailable` while the connection is down."""

        async def attempt() -> T:
            await self._connected()  # BusUnavailable is not transient: it ends the retrying at once
            return await function(*args)

        return await self._retrying(attempt)

    # ------------------------------------------------------------------------- sealing

    async def _seal(self, key: StreamKey, encoded: list[bytes], head: Head) -> list[bytes]:
        """The messages' data: ``encoded`` sealed with the conversation's key (made if it has none).
        The first message of a subject (fence 0: compaction always keeps a subject's last one)
        reads the key from the key stream, not the cache: a forget may have erased it since."""
        if not self.settings.seal:
            return encoded
        sealer = self.keys.cached(key.tenant, key.conversation) if head.fence else None  # the common case: no await
        if sealer is None:
            sealer = await self._retrying(self.keys.for_writing, key.tenant, key.conversation, fresh=head.fence == 0)
        return [sealer.seal(data) for data in encoded]

    def prepare_append(self, key: StreamKey, head: Head) -> None:
        """The key the append will seal with, read or made meanwhile (:meth:`~.sealing.DataKeys.prepare`)."""
        if self.settings.seal:
            self.keys.prepare(key.tenant, key.conversation, head.fence, self._retrying)

    async def _open(self, key: StreamKey, data: bytes) -> bytes:
        """A message's data as the codec record it sealed (:class:`DataKeyErased` if its key is gone)."""
        opened = self.keys.open_cached(key.tenant, key.conversation, data)  # the common case: no await
        if opened is not None:
            return opened
        return await self._retrying(self.keys.open, key.tenant, key.conversation, data)

    # ------------------------------------------------------------------------- reading

    async def head(self, key: StreamKey) -> Head:
        return await self._retrying_connected(self._head, key)

    async def _head(self, key: StreamKey) -> Head:
        try:
            message = await self.js.get_last_msg(self.settings.name, subject_for(key), direct=True)
        except nats.js.errors.NotFoundError:
            return Head(last_seq=None, fence=0)
        stream_seq, data = _stored_message(message)
        return Head(last_seq=decode(await self._open(key, data)).seq, fence=stream_seq)

    async def _stored_after(self, subject: str, stream_seq: int, *, direct: bool = True) -> tuple[int, bytes] | None:
        """The first message on ``subject`` after ``stream_seq``, if any.

        ``direct``: any replica answers (fast, but a follower may lag the leader by a few
        messages); ``direct=False`` asks the stream's leader, for the answers an append's
        outcome depends on."""
        try:
            message = await self.js.get_msg(
                self.settings.name, seq=stream_seq + 1, subject=subject, next=True, direct=direct
            )
        except nats.js.errors.NotFoundError:
            return None
        return _stored_message(message)

    async def tail(self, key: StreamKey, after_position: int) -> AsyncIterator[tuple[int, Event]]:
        """One direct get per message (``next`` from a stream sequence, on the subject)."""
        subject = subject_for(key)
        position = after_position
        while True:
            stored = await self._retrying(self._stored_after, subject, position)
            if stored is None:
                return
            position = stored[0]
            yield position, decode(await self._open(key, stored[1]))

    async def subscribe(self, key: StreamKey, *, buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        """An ordered push consumer from the next stored message: unlike a plain subscription
        to the subject, it never shows a publish the stream refused (a fenced-off writer's) or
        a retry's duplicate, and it resumes in order after a reconnect."""
        subscription = Subscription(key, buffer)

        async def on_message(message: Any) -> None:
            try:
                subscription.deliver(await self._open(key, message.data))
            except DataKeyErased:  # a late write to a conversation forgotten meanwhile: nothing to show
                log.info("subscription to %s: a message whose data key was erased is passed over", key)

        consumer = await self._retrying(
            self.js.subscribe, subject_for(key), cb=on_message, stream=self.settings.name,
            ordered_consumer=True, deliver_policy=DeliverPolicy.NEW,
        )

        async def unsubscribe() -> None:
            with contextlib.suppress(nats.errors.Error):  # the connection may be closing already
                await consumer.unsubscribe()

        subscription.on_close(unsubscribe)
        return subscription

    # ------------------------------------------------------------------------- writing

    async def append(self, key: StreamKey, events: Sequence[Event], head: Head) -> Head:
        check_batch(key, events, head.next_seq(key))
        encoded = await self._seal(key, [encode(event) for event in events], head)
        fence = None
        if self.atomic_batches and batchable(len(events)):
            fence = await self._append_batch(key, events, encoded, head.fence)
        if fence is None:
            fence = await self._append_from(key, events, encoded, 0, head.fence)
        return Head(last_seq=events[-1].seq if events else head.last_seq, fence=fence)

    async def _append_batch(self, key: StreamKey, events: Sequence[Event], encoded: Sequence[bytes], fence: int) -> int | None:
        """The events as one atomic batch: the stream sequence of the last, or None when the batch
        was not acknowledged (then :meth:`_append_from` finds out what landed and appends the rest)."""
        await self._connected()
        try:
            return await publish_batch(self.nc, self._publisher, subject_for(key), [event.id for event in events],
                                       encoded, fence, self.settings.publish_timeout_s)
        except BatchNotStored as exc:
            if exc.disabled:
                self.atomic_batches = False
            log.debug("%s: batch of %d events not stored (%s); appending them one at a time", key, len(events), exc)
            return None

    async def _append_from(
        self, key: StreamKey, events: Sequence[Event], encoded: Sequence[bytes], index: int, fence: int
    ) -> int:
        """Publish ``events[index:]`` one by one, fenced; returns the last stream sequence."""
        subject = subject_for(key)
        while index < len(events):
            event, data = events[index], encoded[index]
            try:
                try:
                    await self._connected()
                    fence = await self._publish_fenced(key, subject, event, data, fence)
                except TRANSIENT_ERRORS:
                    # Same message id and fence: a copy that did land is recognised, not doubled.
                    fence = await self._retrying_connected(self._publish_fenced, key, subject, event, data, fence)
            except AppendConflict:
                landed = await self._retrying(self._landed_part, subject, events, encoded)
                if landed is None or landed[0] < index:
                    raise
                index, fence = landed
            index += 1
        return fence

    async def _landed_part(
        self, subject: str, events: Sequence[Event], encoded: Sequence[bytes]
    ) -> tuple[int, int] | None:
        """Is the subject's newest message one of this batch's own events? (index, stream seq)

        A retry whose first attempt landed, after compaction removed the older messages it
        would be compared with: each event is fenced on the previous one, so if event k is
        the newest message, events before it landed too. Anything else is another writer.
        """
        try:
            last = await self.js.get_last_msg(self.settings.name, subject)  # from the leader: see _stored_after
        except nats.js.errors.NotFoundError:
            return None
        last_seq, last_data = _stored_message(last)
        for index in range(len(events) - 1, -1, -1):
            if encoded[index] == last_data:
                return index, last_seq
        return None

    async def _publish_fenced(
        self, key: StreamKey, subject: str, event: Event, data: bytes, fence: int
    ) -> int:
        headers = tracing.inject({  # the turn's traceparent, for the ingester's commit span
            HEADER_MSG_ID: event.id,
            HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: str(fence),
        })
        try:
            ack = await self._publisher.publish(subject, data, headers, self.settings.publish_timeout_s)
        except nats.js.errors.APIError as exc:
            if exc.err_code == ERR_DUPLICATE_IN_PROCESS:
                raise DuplicateInProcess(f"{key}#{event.seq}: {exc.description}") from exc
            if exc.err_code not in FENCE_REFUSALS:
                raise BusError(f"JetStream refused {key}#{event.seq}: {exc}") from exc
            # Either another writer got there first, or this is our own retry whose first
            # attempt was stored but whose ack was lost: the stream's leader tells which.
            stored = await self._stored_after(subject, fence, direct=False)
            if stored is not None and stored[1] == data:
                return stored[0]
            raise AppendConflict(
                key.tenant, key.conversation, key.branch,
                expected_seq=event.seq,
                detail=f"{exc.description} (writer expected subject sequence {fence})",
            ) from exc
        if ack.duplicate:
            try:
                _, stored_data = _stored_message(await self.js.get_msg(self.settings.name, seq=ack.seq))
            except nats.js.errors.NotFoundError as exc:  # stored within the window, erased since (a forget)
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch, expected_seq=event.seq,
                    detail=f"message id {event.id} was stored within the duplicate window "
                           f"({self.settings.duplicate_window_s:g} s) and erased since: write it after the window",
                ) from exc
            if stored_data != data:
                raise AppendConflict(
                    key.tenant, key.conversation, key.branch,
                    expected_seq=event.seq,
                    detail=f"message id {event.id} is already stored with other content",
                )
        return ack.seq

    async def append_many(
        self, batches: Sequence[tuple[StreamKey, Sequence[Event], Head]]
    ) -> list[Head | AppendConflict]:
        """Many conversations at once, up to ``max_in_flight`` publishing, order kept per stream.

        Clean acks drive each conversation's next publish from the reply callback
        (:class:`~mirror.events.nats._publisher.ChainedAppends`); any other answer hands that
        conversation to the general path of :meth:`append` from the event it reached.
        """
        chains: list[Chain] = []
        for key, events, head in batches:
            check_batch(key, events, head.next_seq(key))
            encoded = await self._seal(key, [encode(event) for event in events], head)
            chains.append(Chain(subject_for(key), encoded, [event.id for event in events], head.fence))

        async def fallback(position: int, chain: Chain) -> int:
            key, events, _ = batches[position]
            return await self._append_from(key, events, chain.encoded, chain.index, chain.fence)

        runner = ChainedAppends(self._publisher, self.settings.publish_timeout_s, fallback)
        results: list[Head | AppendConflict] = []
        for (_, events, head), outcome in zip(batches, await runner.run(chains), strict=True):
            if isinstance(outcome, AppendConflict):
                results.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results.append(Head(last_seq=events[-1].seq if events else head.last_seq, fence=outcome))
        return results

    # ------------------------------------------------------------------------- retention

    async def compact(self, subject: str, below_stream_seq: int) -> None:
        """Drop the stream's copy of ``subject``'s messages older than ``below_stream_seq``.

        Called by the ingester with the stream sequence of the newest message it has
        committed for that subject, so the last committed message (and everything not yet
        committed) stays: writers' fences and heads keep working from the stream alone.
        """
        await self._retrying(self.js.purge_stream, self.settings.name, seq=below_stream_seq, subject=subject)

    async def erase(self, tenant: str, conversation: str) -> int:
        """Erase the conversation's data key (``*``: the keys of every conversation of the tenant),
        then every message of it (every branch) still in the stream; how many messages.

        The key goes first (:meth:`~.sealing.DataKeys.erase`, one secure erase): from then on every
        copy of its messages is ciphertext nobody can open — those :meth:`compact` purged earlier,
        whose bytes stay in the store's block files until a block is retired, and a cluster's Raft
        logs. The messages still addressable are then purged; only one written before sealing
        (plaintext) is first deleted with JetStream's secure erase (``STREAM.MSG.DELETE`` without
        ``no_erase``: the server overwrites it with random bytes, ~6-100 ms a message), since a purge
        alone leaves the bytes in the store's block file (measured: harness/bench/erasure_residue.py).
        See docs/operations.md, "Forgetting and retention"."""
        await self._retrying(self.keys.erase, tenant, conversation)
        subjects = f"{SUBJECT_ROOT}.{tenant}.{conversation}.*"
        erased, seq = 0, 1
        while True:
            try:
                message = await self.js.get_msg(self.settings.name, seq=seq, subject=subjects, next=True)
            except nats.js.errors.NotFoundError:
                break
            assert message.seq is not None, "a stored message has its sequence"
            if not is_sealed(message.data or b""):  # from before sealing: its bytes must go
                await self._retrying(self.js.delete_msg, self.settings.name, message.seq)
            erased, seq = erased + 1, message.seq + 1
        await self._retrying(self.js.purge_stream, self.settings.name, subject=subjects)
        return erased


__all__ = [
    "ERR_DUPLICATE_IN_PROCESS", "ERR_NO_SUITABLE_PEERS", "MAX_OUTSTANDING_PINGS", "PING_INTERVAL_S", "ERR_WRONG_LAST_SEQUENCE", "ERR_WRONG_LAST_SEQUENCE_CONSTANT", "FENCE_REFUSALS", "MAX_DEFAULT_REPLICAS", "STREAM_SUBJECTS", "SUBJECT_ROOT",
    "TRANSIENT_ERRORS", "DuplicateInProcess", "JetStreamBus", "PlacementPending", "StreamSettings", "connect_nats", "default_replicas",
    "ensure_stream", "key_of_subject", "nats_servers", "retry_transient", "subject_for",
]
