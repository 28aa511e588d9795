"""The ingester: moves events from the JetStream stream into the DuckDB log, exactly once.

One ingester per shard owns its DuckDB file. It pulls batches from its consumer, inserts each
batch together with the stream offset in one transaction, and only then acknowledges the
messages. The offset in DuckDB is the truth about progress: on every start the consumer is
recreated to deliver from ``offset + 1``, so a crash between commit and ack costs nothing and
a crash before commit loses nothing (the messages are still in the stream).

After a batch is committed the stream's copy of older messages on each touched subject is
purged, keeping the newest committed message per subject, which writers' fences rely on.

The stream is a fast buffer, not the record: a broker's disk can come back older than what it
acknowledged, and a stream can be deleted and made again. The ingester keeps the stream's mark
with its data and checks it (:mod:`._regression`) when it starts, after every reconnect, when
a message arrives at or below its offset, before compacting and every ``check_interval_s``;
a stream that went backwards is logged, recorded in the log (``mirror log stats``) and re-read
from its first message, each event stored once.

The ingester also serves the log's reads (:mod:`mirror.events.nats.log_service`), since the process
that owns a DuckDB file is the only one that may open it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from mirror import metrics, tracing
from mirror.events.duckdb._ingest_batch import IngestBatch
from mirror.events.duckdb._regression import check_stream
from mirror.events.duckdb._sweeper import Sweeper
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.duckdb.retention import RetentionSettings, RetentionSweeper
from mirror.events.errors import BusError, DataKeyErased
from mirror.events.log import StreamMark
from mirror.events.nats._client import MirrorNatsClient
from mirror.events.nats._pull import Delivery, PullFeed
from mirror.events.nats.jetstream import (
    STREAM_SUBJECTS,
    JetStreamBus,
    StreamSettings,
    connect_nats,
    ensure_stream,
    retry_transient,
)
from mirror.events.nats.log_service import LogService
from mirror.events.nats.sealing import is_sealed, key_id_of
from mirror.tracing import TraceSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IngesterSettings:
    shard: str = "0"
    filter_subjects: tuple[str, ...] = (STREAM_SUBJECTS,)
    skip_tenants: tuple[str, ...] = ()
    """Tenants whose messages the filter delivers but another shard stores: acknowledged and
    passed over, never stored (the default shard of a :class:`mirror.events.shards.ShardMap`)."""
    batch_size: int = 5000
    fetch_timeout_s: float = 0.25
    linger_s: float = 0.05
    """A batch smaller than ``linger_below`` waits up to this long, from its first message, for
    more before it is committed. A commit costs ~5 ms of DuckDB work whatever its size, so at a
    trickle of events (a conversation's thinking writes one every model call, ~100 ms apart) one
    commit per event kept a core busy; longer than a few model calls, a thought-through turn's
    events share one or two commits. Nothing waits out the linger: acks and actors do not wait
    for commits (they fold the stream's tail), and a reader waiting for the log
    (:meth:`Ingester.wait_for_offset`, the log service's ``committed``/``caught_up``) ends it at
    once. 50 ms: an acknowledged event not yet committed lives on the broker's disk alone (one that
    comes back older loses it); at 500 ms test_broker_rollback lost an acknowledged turn 3 in 4."""
    linger_below: int = 256
    """Only batches smaller than this linger: a larger one already amortises its commit."""
    compact_interval_s: float = 10.0
    check_interval_s: float = 5.0
    """How often the stream is checked against the log's mark when nothing else prompts it (a
    reconnect, a message at or below the offset, a compaction)."""
    max_ack_pending: int = 50_000
    queue_depth: int = 2
    stop_timeout_s: float = 15.0
    metrics: bool = True
    """Prometheus metrics (lag, commits) recorded and, in the Ray actor, served (:mod:`mirror.metrics`)."""
    traces: TraceSettings = TraceSettings()
    """OpenTelemetry traces (:mod:`mirror.tracing`): a commit span in each traced turn's trace."""
    retention: RetentionSettings = RetentionSettings()
    """The tenants' retention policies this ingester enforces (:mod:`.retention`); none without a tenants file."""

    @property
    def consumer(self) -> str:
        return f"ingest-{self.shard}"


@dataclass(frozen=True, slots=True)
class _Decoded:
    batch: IngestBatch
    newest: int
    ack_subject: bytes
    """Reply subject of the batch's last message: acking it acknowledges all (AckAll)."""
    traces: tuple[str, ...] = ()
    """The ``traceparent`` of each traced turn in the batch (traces on): its commit span's parents."""


def _stream_seq(reply: bytes) -> int:
    """The stream sequence from the ack subject, without building nats-py's metadata object.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>``;
    other layouts (domains, account hashes) go through nats-py's parser.
    """
    tokens = reply.split(b".")
    if len(tokens) == 9 and tokens[1] == b"ACK":
        return int(tokens[5])
    return Msg.Metadata._from_reply(reply.decode()).sequence.stream


def _sequences(reply: bytes) -> tuple[int, int]:
    """(stream seq, consumer seq) from the ack subject. The consumer seq counts every delivery
    (redeliveries too), so a jump in it means a delivery that never arrived."""
    tokens = reply.split(b".")
    if len(tokens) == 9 and tokens[1] == b"ACK":
        return int(tokens[5]), int(tokens[6])
    sequence = Msg.Metadata._from_reply(reply.decode()).sequence
    return sequence.stream, sequence.consumer


def _pending(reply: bytes) -> int:
    """The messages still to deliver after this one, from the ack subject (0 when its layout is another)."""
    tokens = reply.split(b".")
    return int(tokens[8]) if len(tokens) == 9 and tokens[1] == b"ACK" else 0


class Ingester:
    def __init__(
        self,
        nc: MirrorNatsClient,
        event_log: DuckDBEventLog,
        settings: IngesterSettings = IngesterSettings(),
        stream: StreamSettings = StreamSettings(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=10)
        self.log = event_log
        self.settings = settings
        self.stream = stream
        self.bus = JetStreamBus(nc, stream)
        self.service = LogService(nc, event_log, shard=settings.shard, progress=lambda: self.committed_offset,
                                  stream_end=self._stream_end, skipped=lambda: self.skipped_events,
                                  forget=self.forget, forget_tenant=self.forget_tenant,
                                  wait_committed=self.wait_for_offset)
        self.committed_offset = 0
        self.committed_events = 0
        self.skipped_events = 0
        """Messages of ``skip_tenants`` acknowledged without being stored."""
        self._skip = frozenset(tenant.encode() for tenant in settings.skip_tenants)
        self._batches: asyncio.Queue[_Decoded] = asyncio.Queue(maxsize=settings.queue_depth)
        self._decoded_offset = 0
        self._to_compact: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._progress = asyncio.Condition()
        self._mark = StreamMark()
        self._stream_lock = asyncio.Lock()
        """Held while the stream is checked, re-read from the start, or compacted: a compaction
        must never purge by sequences of a stream that has since gone backwards."""
        self._checked_at = 0.0
        self._reconnects_seen = 0
        self.regressions = 0
        """Stream regressions this ingester found and recovered from since it started."""
        self.checks = 0
        """Checks of the stream against the log's mark since it started."""
        self._delivered: int | None = None
        """The consumer seq of the newest delivery taken (a jump in it: a delivery went missing)."""
        self._reconsume: str | None = None
        self._flush_requested = False
        """A reader waits for the log: the batch lingering now is committed without waiting further."""
        self.sweeper = Sweeper(self.bus, event_log, self._stream_lock)
        """Forgotten conversations and tenants being swept (stream erased, rows deleted, file copied)."""
        self.retention = RetentionSweeper(event_log, self.forget, self._caught_up, settings.retention, clock)
        self._retention_task: asyncio.Task[None] | None = None
        """Why the consumer must be made again from the committed offset, until it has been."""

    async def start(self) -> None:
        await retry_transient(ensure_stream, self.js, self.stream, servers=len(self.nc.server_urls),
                              deadline_s=self.stream.retry_deadline_s)
        self.committed_offset = await self.log.committed_offset(self.settings.consumer)
        self._mark = await self.log.stream_mark(self.settings.consumer)
        await self._check_stream()
        await self._recreate_consumer()
        self._decoded_offset = self.committed_offset
        self._feed = self._new_feed()
        await self._feed.start()
        await self.service.start()
        keys, tenants = await self.log.unfinished_forgets()  # sweeps a crash cut short
        self.sweeper.add(keys, tenants)
        self.sweeper.start()
        self._tasks = [
            asyncio.create_task(self._decode_loop(), name="ingest-decode"),
            asyncio.create_task(self._commit_loop(), name="ingest-commit"),
            asyncio.create_task(self._compact_loop(), name="ingest-compact"),
        ]
        if self.settings.retention.tenants_file is not None:
            self._retention_task = asyncio.create_task(self.retention.run(self._stopping), name="ingest-retention")
        log.info(
            "ingester %s started: %s%s from stream seq %d into %s",
            self.settings.shard, ",".join(self.settings.filter_subjects),
            f" but not {','.join(self.settings.skip_tenants)}" if self.settings.skip_tenants else "",
            self.committed_offset + 1, self.log.path,
        )

    def _new_feed(self) -> PullFeed:
        return PullFeed(self.nc, self.stream.name, self.settings.consumer,
                        batch=self.settings.batch_size, max_buffered=4 * self.settings.batch_size)

    async def _check_stream(self) -> bool:
        """Check the stream against the log's mark; on a regression, note it and move the offset
        back to the stream's first message. True if it found one (the caller re-reads)."""
        self._checked_at = asyncio.get_running_loop().time()
        self.checks += 1
        self._reconnects_seen = self.nc.stats.get("reconnects", 0)
        try:
            checked = await retry_transient(check_stream, self.js, self.stream.name, self._mark,
                                            self.committed_offset, self.bus.keys,
                                            deadline_s=self.stream.retry_deadline_s)
        except nats.js.errors.NotFoundError:  # a broker back with an empty disk: no stream at all
            log.warning("ingester %s: stream %s is gone; making it again", self.settings.shard, self.stream.name)
            await retry_transient(ensure_stream, self.js, self.stream, servers=len(self.nc.server_urls),
                                  deadline_s=self.stream.retry_deadline_s)
            checked = await retry_transient(check_stream, self.js, self.stream.name, self._mark,
                                            self.committed_offset, self.bus.keys,
                                            deadline_s=self.stream.retry_deadline_s)
        regression = checked.regression
        if regression is None:
            if checked.created is not None and self._mark.created is None:
                await self.log.mark_stream(self.settings.consumer, self.stream.name, checked.created)
                self._mark = StreamMark(created=checked.created)
            return False
        await self.log.record_regression(self.settings.consumer, self.stream.name, regression, checked.created)
        self.regressions += 1
        self._mark = StreamMark(created=checked.created)
        self.committed_offset = self._decoded_offset = regression.reread_from - 1
        self._to_compact.clear()  # its sequences are the old stream's
        log.warning("ingester %s: %s; every event the stream still holds is stored once (same key and bytes: "
                    "skipped; same key, other bytes: rejected)", self.settings.shard, regression.describe())
        return True

    async def _recover_if_regressed(self) -> bool:
        """Under the stream lock, after the batches in hand are committed: check, and if the stream
        went backwards, or a delivery went missing, consume again from the committed offset (after
        a regression: the stream's first message). True if it did. A step that fails leaves the
        reason set, so the next round of the decode loop tries again."""
        await self._batches.join()
        async with self._stream_lock:
            if await self._check_stream():
                self._reconsume = "the stream went backwards"
            if self._reconsume is None:
                return False
            with contextlib.suppress(nats.errors.Error):
                await self._feed.stop()
            await retry_transient(self._recreate_consumer, deadline_s=self.stream.retry_deadline_s)
            self._decoded_offset = self.committed_offset  # what was decoded and not committed comes again
            self._delivered = None  # a new consumer counts its deliveries from 1
            self._feed = self._new_feed()
            await self._feed.start()
            log.info("ingester %s consumes again from stream seq %d: %s",
                     self.settings.shard, self.committed_offset + 1, self._reconsume)
            metrics.stream_regressed(self.settings.shard)
            self._reconsume = None
        async with self._progress:
            self._progress.notify_all()
        return True

    def _check_due(self) -> bool:
        """A reconnect since the last check (the broker may have restarted on another disk), or the interval."""
        return (self.nc.stats.get("reconnects", 0) != self._reconnects_seen
                or asyncio.get_running_loop().time() - self._checked_at > self.settings.check_interval_s)

    async def _recreate_consumer(self) -> None:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.js.delete_consumer(self.stream.name, self.settings.consumer)
        subjects = list(self.settings.filter_subjects)
        config = ConsumerConfig(
            durable_name=self.settings.consumer,
            ack_policy=AckPolicy.ALL,
            ack_wait=60,
            max_ack_pending=self.settings.max_ack_pending,
            filter_subject=subjects[0] if len(subjects) == 1 else None,
            filter_subjects=subjects if len(subjects) > 1 else None,
        )
        if self.committed_offset:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self.committed_offset + 1
        await self.js.add_consumer(self.stream.name, config)

    async def _decode_loop(self) -> None:
        """Take what the feed has, decode it, hand it to the commit loop (overlapping DuckDB)."""
        while not self._stopping.is_set():
            if self._reconsume is not None or self._check_due():
                await self._checked(self._recover_if_regressed())
            messages = await self._lingering(
                await self._feed.take(self.settings.batch_size, self.settings.fetch_timeout_s))
            if messages and _stream_seq(messages[0][1]) <= self._decoded_offset \
                    and await self._checked(self._recover_if_regressed()):
                continue  # the stream went backwards: these come again from the re-read
            if messages:
                decoded = self._decode(messages, await self._load_keys(messages))
                if decoded is not None:
                    await self._batches.put(decoded)

    async def _lingering(self, messages: list[Delivery]) -> list[Delivery]:
        """``messages`` and whatever arrives after them within ``linger_s`` of the first, until the
        batch has ``linger_below`` messages or a reader asks for the log (:meth:`_flush`)."""
        wanted = min(self.settings.batch_size, self.settings.linger_below)
        if not messages or len(messages) >= wanted or self.settings.linger_s <= 0:
            return messages
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.linger_s
        while len(messages) < wanted and not self._flush_requested and not self._stopping.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            messages += await self._feed.take(self.settings.batch_size - len(messages), remaining)
        self._flush_requested = False
        return messages

    def _flush(self) -> None:
        """End the linger now: someone waits for what the ingester holds to be committed."""
        self._flush_requested = True
        self._feed.wake()

    async def _checked(self, check: Awaitable[bool]) -> bool:
        """A check that could not reach the broker is tried again on the next round, not fatal."""
        try:
            return await check
        except (BusError, nats.errors.Error) as exc:
            log.warning("ingester %s could not check its stream (%r); trying again shortly", self.settings.shard, exc)
            return False

    async def _load_keys(self, messages: list[Delivery]) -> dict[tuple[str, str], bool]:
        """Have the data key of every sealed message in the cache (:mod:`mirror.events.nats.sealing`),
        so :meth:`_decode` opens them without waiting. Returns the conversations whose key is gone,
        each with whether it was forgotten (usually none)."""
        keys = self.bus.keys
        wanted: dict[tuple[str, str], bytes] = {}
        for subject, _, data, _ in messages:
            if is_sealed(data) and subject.split(b".", 2)[1] not in self._skip:
                _, tenant, conversation, _ = subject.decode().split(".", 3)
                sealer = keys.cached(tenant, conversation)
                if sealer is None or sealer.key.key_id != key_id_of(data):
                    wanted[tenant, conversation] = key_id_of(data)
        gone: dict[tuple[str, str], bool] = {}
        for (tenant, conversation), key_id in wanted.items():
            try:
                await retry_transient(keys.for_reading, tenant, conversation, key_id,
                                      deadline_s=self.stream.retry_deadline_s)
            except DataKeyErased:
                gone[tenant, conversation] = await self.log.tombstone(tenant, conversation) is not None
        return gone

    def _opened(self, subject: str, stream_seq: int, data: bytes, batch: IngestBatch,
                gone: dict[tuple[str, str], bool]) -> bytes | None:
        """A message's codec record, its seal opened; None if its data key was erased — a late write
        to a forgotten conversation (dropped, as the log drops its plain late events) or, for a
        conversation not forgotten, a message nobody can read any more (recorded as rejected)."""
        _, tenant, conversation, _ = subject.split(".", 3)
        try:
            opened = self.bus.keys.open_cached(tenant, conversation, data)
        except BusError as exc:  # altered bytes, or a key of another format
            batch.reject(stream_seq, subject, str(exc), data)
            return None
        if opened is None:
            if gone.get((tenant, conversation), False):
                self.skipped_events += 1
            else:
                batch.reject(stream_seq, subject, str(DataKeyErased(tenant, conversation)), data)
        return opened

    def _decode(self, messages: list[Delivery], gone: dict[tuple[str, str], bool] | None = None) -> _Decoded | None:
        """The batch of ``messages`` up to the first delivery gap, if any (then nothing after it is
        decoded or acknowledged, and the consumer is made again: with AckAll, acknowledging a later
        message would acknowledge the missing one too). None if nothing before the gap."""
        batch = IngestBatch()
        newest = self._decoded_offset
        skip = self._skip
        last_reply = b""
        traced = tracing.traceparents(messages)  # empty, and nothing read, with traces off
        for subject, reply, data, _ in messages:
            stream_seq, delivered = _sequences(reply)
            if self._delivered is not None and delivered > self._delivered + 1:
                self._reconsume = (f"deliveries {self._delivered + 1}..{delivered - 1} of its consumer never arrived "
                                   "(its leader moved or died)")
                log.warning("ingester %s: %s; consuming again from the committed offset", self.settings.shard,
                            self._reconsume)
                break
            self._delivered = delivered if self._delivered is None else max(self._delivered, delivered)
            last_reply = reply
            if stream_seq <= newest:
                continue  # committed before a crash and redelivered, or delivered twice
            newest = stream_seq
            if skip and subject.split(b".", 2)[1] in skip:
                self.skipped_events += 1  # another shard's: the offset moves past it, the ack covers it
                continue
            subject_text = subject.decode()
            if is_sealed(data):
                opened = self._opened(subject_text, stream_seq, data, batch, gone or {})
                if opened is None:
                    continue
                data = opened
            batch.add(data, stream_seq, subject_text)
        if not last_reply:
            return None
        self._decoded_offset = newest
        metrics.ingest_seen(self.settings.shard, newest + _pending(last_reply))
        return _Decoded(batch, newest, last_reply, traced)

    async def _commit_loop(self) -> None:
        while True:
            decoded = await self._batches.get()
            try:
                await self._commit(decoded)
            finally:
                self._batches.task_done()

    async def _commit(self, decoded: _Decoded) -> None:
        if decoded.newest > self.committed_offset:
            started = time.perf_counter()
            result = await self.log.commit_batch(
                self.settings.consumer, self.stream.name, decoded.newest, decoded.batch
            )
            self.committed_offset = decoded.newest
            metrics.ingest_committed(self.settings.shard, decoded.newest, result.inserted, time.perf_counter() - started)
            tracing.committed(decoded.traces, started, self.settings.shard, result.inserted)
            self.committed_events += result.inserted
            if decoded.batch.anchor is not None:  # as the log now holds it: the newest message stored
                anchor_seq, anchor_id = decoded.batch.anchor
                self._mark = dataclasses.replace(self._mark, anchor_seq=anchor_seq, anchor_id=anchor_id)
            self._to_compact.update(self.sweeper.without_late_writes(decoded.batch.newest_by_subject))
            async with self._progress:
                self._progress.notify_all()
        # AckAll: acknowledging the newest message acknowledges the batch, after the commit.
        with contextlib.suppress(nats.errors.Error):
            await self.nc.publish(decoded.ack_subject.decode())

    async def _compact_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.compact_interval_s)
            await self.compact()

    async def compact(self) -> None:
        """Purge committed messages from the stream, keeping each subject's newest one.

        Only once the stream is known to be the one those sequences came from: purging by the
        sequences of a stream that has since gone backwards would drop uncommitted messages.
        A stream found regressed is left to the decode loop's re-read."""
        async with self._stream_lock:
            if not self._to_compact:
                return
            try:
                check = await check_stream(self.js, self.stream.name, self._mark, self.committed_offset, self.bus.keys)
            except Exception as exc:  # compaction is an optimisation: never fatal
                log.warning("compaction skipped: the stream could not be checked (%r)", exc)
                return
            if check.regression is not None:
                self._checked_at = 0.0  # the decode loop checks again and re-reads
                return
            pending, self._to_compact = self._to_compact, {}
            for subject, stream_seq in pending.items():
                try:
                    await self.bus.compact(subject, below_stream_seq=stream_seq)
                except Exception as exc:  # compaction is an optimisation: never fatal
                    log.warning("compaction of %s failed: %r", subject, exc)

    async def forget(self, tenant: str, conversation: str) -> dict[str, Any]:
        """Forget a conversation: the tombstone first (from then on its reads are refused and its
        late events dropped at ingest), then, in the background, the sweep. Returns the tombstone."""
        return (await self.forget_conversations(tenant, [conversation]))[0]

    async def forget_conversations(self, tenant: str, conversations: list[str]) -> list[dict[str, Any]]:
        """Forget several conversations of ``tenant`` (the retention sweeper's entry point): their
        tombstones in one transaction, then one sweep (one fresh copy of the database) for all."""
        tombstones = await self.log.forget_conversations(tenant, conversations)
        self.sweeper.add(keys=[(t.tenant, t.conversation) for t in tombstones if not t.finished])
        return [tombstone.as_dict() for tombstone in tombstones]

    async def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Forget a whole tenant on this shard: its tombstone and one per conversation at once, then
        one sweep for all of them. Returns the tenant's tombstone (``status`` says)."""
        tombstone, _ = await self.log.forget_tenant(tenant)
        if not tombstone.finished:
            self.sweeper.add(tenants=[tenant])
        return tombstone.as_dict()

    async def _stream_end(self) -> int:
        """The stream sequence this ingester must commit up to to hold everything published so far.

        From its consumer: with nothing pending, the last message delivered to it; otherwise the
        newest message on its filter subjects — the stream's newest for a catch-all filter, else
        the newest of its tenants' (a last-by-subject get takes wildcards), so a shard never
        waits for a newer message of another shard's.
        """
        info = await self.js.consumer_info(self.stream.name, self.settings.consumer)
        delivered = info.delivered.stream_seq if info.delivered is not None else None
        if info.num_pending == 0 and delivered is not None:
            return delivered
        if STREAM_SUBJECTS in self.settings.filter_subjects:
            stream = await self.js.stream_info(self.stream.name)
            return stream.state.last_seq
        newest = 0
        for subject in self.settings.filter_subjects:
            with contextlib.suppress(nats.js.errors.NotFoundError):  # nothing on it (any more)
                newest = max(newest, (await self.js.get_last_msg(self.stream.name, subject)).seq or 0)
        return newest

    async def _caught_up(self, timeout: float) -> bool:
        """Whether everything the stream held when asked is committed within ``timeout`` seconds."""
        return await self.wait_for_offset(await self._stream_end(), timeout)

    async def wait_for_offset(self, stream_seq: int, timeout: float) -> bool:
        """Wait until everything up to ``stream_seq`` is committed; a batch lingering meanwhile is
        committed at once (the read-your-writes barrier of the log service, tests, benchmarks)."""
        if self.committed_offset >= stream_seq:
            return True
        self._flush()
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self.committed_offset >= stream_seq), timeout
                )
            except TimeoutError:
                return False
        return True

    async def stop(self) -> None:
        """Stop fetching, commit what was fetched, stop serving reads."""
        self._stopping.set()
        self._feed.wake()  # a lingering batch is committed now
        fetch, commit, compact = self._tasks
        if self._retention_task is not None:  # a round cut here is simply run again
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
        await fetch
        await self._batches.join()
        for task in (commit, compact):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.service.stop()
        await self.sweeper.stop()  # a sweep cut here resumes at the next start
        with contextlib.suppress(nats.errors.Error):
            await self._feed.stop()
        log.info("ingester %s stopped at stream seq %d", self.settings.shard, self.committed_offset)


async def run_ingester(
    nats_url: str,
    db_path: str,
    settings: IngesterSettings = IngesterSettings(),
    stream: StreamSettings = StreamSettings(),
    stop: asyncio.Event | None = None,
    started: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Run an ingester until ``stop`` is set (or forever): the body of ``mirror ingest`` and of
    the ingester Ray actor. ``started`` is set once it consumes and serves reads."""
    event_log = DuckDBEventLog(db_path)
    try:
        nc = await connect_nats(nats_url, name=f"mirror-ingest-{settings.shard}")
    except BaseException:
        await event_log.close()
        raise
    ingester = Ingester(nc, event_log, settings, stream, clock)
    try:
        await ingester.start()
        if started is not None:
            started.set()
        await (stop or asyncio.Event()).wait()
        try:
            # Bounded: with the broker gone, stopping must not wait for it forever. Whatever
            # was not committed is still in the stream and is delivered again next start.
            await asyncio.wait_for(ingester.stop(), settings.stop_timeout_s)
        except TimeoutError:
            log.warning("ingester %s did not stop within %ss; exiting anyway", settings.shard, settings.stop_timeout_s)
    finally:
        await event_log.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)


__all__ = ["Ingester", "IngesterSettings", "run_ingester"]
