"""The log's read API over NATS request-reply, served by the process that owns the DuckDB file.

Subjects: ``_MIRROR.log.<shard>.<operation>``; requests and replies are msgpack maps. A reply
is ``{"ok": result}`` or ``{"error": {"type": ..., "message": ...}}``, and the client raises
the matching typed error. Event lists travel as encoded records and are paged to stay well
under NATS's maximum message size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgpack
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed

from mirror.events.codec import decode
from mirror.events.envelope import Event
from mirror.events.errors import ConversationForgotten, EventError, InvalidIdentifier, LogError, LogUnavailable
from mirror.events.ids import StreamKey
from mirror.events.log import ConversationSummary, IndexEntry, Loaded, LogStats, Snapshot, check_range, check_types

log = logging.getLogger(__name__)

SERVICE_ROOT = "_MIRROR.log"
MAX_IN_FLIGHT = 64
"""Requests answered at once; the DuckDB work itself queues for the log's read threads."""
MAX_CATCH_UP_S = 5.0
"""The longest a ``caught_up`` request may wait; the client adds it to its request timeout."""
CATCH_UP_POLL_S = 0.005
PAGE_BYTES = 512 * 1024
"""Largest total size of encoded events in one reply (NATS's default max payload is 1 MiB)."""
INDEX_PAGE = 16_384
"""Most index rows in one reply: ~30 bytes each as msgpack, well under the payload limit."""

_ERRORS: dict[str, type[Exception]] = {
    "InvalidIdentifier": ValueError,
    "ValueError": ValueError,
    "LogError": LogError,
}


def service_subject(shard: str, operation: str) -> str:
    return f"{SERVICE_ROOT}.{shard}.{operation}"


def _key(args: dict[str, Any]) -> StreamKey:
    return StreamKey(args["tenant"], args["conversation"], args.get("branch", "main"))


class LogService:
    """Answers read requests against a :class:`~mirror.events.duckdb.log.DuckDBEventLog`."""

    def __init__(
        self, nc: NatsClient, event_log: Any, *, shard: str, progress: Callable[[], int] | None = None,
        stream_end: Callable[[], Awaitable[int]] | None = None, skipped: Callable[[], int] | None = None,
        forget: Callable[[str, str], Awaitable[dict[str, Any]]] | None = None,
        wait_committed: Callable[[int, float], Awaitable[bool]] | None = None,
        forget_tenant: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        """``progress()``: the stream sequence committed so far; ``stream_end()``: the stream's
        newest sequence now. An ingester passes both; a plain reader of a file passes neither.
        ``skipped()``: messages of other shards' tenants the ingester passed over.
        ``wait_committed(position, timeout)``: the ingester's wait for a position, which also ends
        its linger (without it, the service polls ``progress``)."""
        self.nc = nc
        self.log = event_log
        self.shard = shard
        self._progress = progress
        self._stream_end = stream_end
        self._skipped = skipped
        self._forget = forget
        self._wait_committed = wait_committed
        self._forget_whole_tenant = forget_tenant
        """The ingester's :meth:`~mirror.events.duckdb.ingester.Ingester.forget` (tombstone, then the sweep)."""
        self._subscription: Subscription | None = None
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "read": self._read,
            "index": self._index,
            "find": self._find,
            "last_seq": self._last_seq,
            "load": self._load,
            "seq_at_time": self._seq_at_time,
            "conversations": self._conversations,
            "save_snapshot": self._save_snapshot,
            "discard_snapshot": self._discard_snapshot,
            "stats": self._stats,
            "progress": self._committed_offset,
            "caught_up": self._caught_up,
            "committed": self._committed,
            "forget": self._forget_conversation,
            "tombstone": self._tombstone,
            "forget_tenant": self._forget_tenant,
            "tenant_tombstone": self._tenant_tombstone,
            "release": self._release,
        }

    async def start(self) -> None:
        self._subscription = await self.nc.subscribe(service_subject(self.shard, "*"), cb=self._dispatch)
        # Until the server has the subscription, a reader on another connection gets "no
        # responders": started means answering.
        await self.nc.flush()

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._subscription.unsubscribe()
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _dispatch(self, msg: Msg) -> None:
        """Answer each request in a task of its own: nats-py runs a subscription's callbacks one
        at a time, and a reader must not wait for another's query (up to MAX_IN_FLIGHT at once;
        past that, the subscription waits for a slot)."""
        await self._slots.acquire()
        task = asyncio.create_task(self._on_request(msg))
        self._in_flight.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._slots.release()

    async def _on_request(self, msg: Msg) -> None:
        operation = msg.subject.rpartition(".")[2]
        try:
            handler = self._handlers[operation]
            args = msgpack.unpackb(msg.data, raw=False) if msg.data else {}
            reply: dict[str, Any] = {"ok": await handler(args)}
        except KeyError as exc:
            reply = {"error": {"type": "ValueError", "message": f"missing or unknown field {exc}"}}
        except ConversationForgotten as exc:
            reply = {"error": {"type": "ConversationForgotten", "message": str(exc), "tenant": exc.tenant,
                               "conversation": exc.conversation, "tombstone": exc.tombstone}}
        except InvalidIdentifier as exc:
            reply = {"error": {"type": "InvalidIdentifier", "message": str(exc)}}
        except ValueError as exc:
            reply = {"error": {"type": "ValueError", "message": str(exc)}}
        except EventError as exc:
            reply = {"error": {"type": "LogError", "message": str(exc)}}
        except Exception as exc:  # a reader must get an answer, not a timeout
            log.exception("log service %s failed", operation)
            reply = {"error": {"type": "LogError", "message": f"{operation} failed: {exc!r}"}}
        if msg.reply:
            try:
                await self.nc.publish(msg.reply, msgpack.packb(reply, use_bin_type=True))
            except nats.errors.Error as exc:  # the connection is closing: the caller times out
                log.warning("log service could not answer %s: %r", operation, exc)

    async def _read(self, args: dict[str, Any]) -> dict[str, Any]:
        raw = await self.log.read_raw(
            _key(args), after_seq=args.get("after_seq", 0), until_seq=args.get("until_seq"), limit=args.get("limit")
        )
        return self._page(raw)

    async def _index(self, args: dict[str, Any]) -> dict[str, Any]:
        limit = args.get("limit")
        asked = INDEX_PAGE if limit is None or (isinstance(limit, int) and limit > INDEX_PAGE) else limit
        entries: list[IndexEntry] = await self.log.index(
            _key(args), after_seq=args.get("after_seq", 0), until_seq=args.get("until_seq"), limit=asked)
        rows = [[entry.seq, entry.type, entry.turn, entry.timestamp] for entry in entries]
        return {"rows": rows, "more": len(rows) == INDEX_PAGE}

    async def _find(self, args: dict[str, Any]) -> dict[str, Any]:
        raw = await self.log.find_raw(_key(args), args["types"], args.get("mentioning"), args.get("after_seq", 0),
                                      args.get("until_seq"))
        return self._page(raw)

    @staticmethod
    def _page(raw: list[bytes]) -> dict[str, Any]:
        """As many of ``raw`` as fit :data:`PAGE_BYTES` (one at least); ``more`` when some did not."""
        page: list[bytes] = []
        size = 0
        for data in raw:
            if page and size + len(data) > PAGE_BYTES:
                break
            page.append(data)
            size += len(data)
        return {"events": page, "more": len(page) < len(raw)}

    async def _last_seq(self, args: dict[str, Any]) -> int:
        return await self.log.last_seq(_key(args))

    async def _load(self, args: dict[str, Any]) -> dict[str, Any]:
        """The snapshot, and with ``events`` the first page of the events after it, so a
        conversation activates in one round trip (a new one's answer is two empty fields); the
        client pages the rest with ``read``. Without ``events`` (a client of an older release),
        the snapshot only."""
        key, version, until = _key(args), args.get("projection_version"), args.get("until_seq")
        if not args.get("events"):
            snapshot: Snapshot | None = await self.log.latest_snapshot(key, projection_version=version, until_seq=until)
            return {"snapshot": _snapshot_fields(snapshot)}
        snapshot, raw = await self.log.load_raw(key, projection_version=version, until_seq=until)
        return {"snapshot": _snapshot_fields(snapshot), **self._page(raw)}

    async def _seq_at_time(self, args: dict[str, Any]) -> int:
        timestamp = args["timestamp"]
        if not isinstance(timestamp, (int, float)) or timestamp != timestamp:
            raise ValueError(f"timestamp must be a number of seconds, got {timestamp!r}")
        return await self.log.seq_at_time(_key(args), float(timestamp))

    async def _conversations(self, args: dict[str, Any]) -> list[list[Any]]:
        summaries = await self.log.conversations(args["tenant"], args.get("conversation"))
        return [[s.conversation, list(s.branches), s.events, s.last_seq, s.updated_at, s.turns, s.mind]
                for s in summaries]

    async def _save_snapshot(self, args: dict[str, Any]) -> None:
        await self.log.save_snapshot(Snapshot(_key(args), args["seq"], args["projection_version"], args["state"]))

    async def _discard_snapshot(self, args: dict[str, Any]) -> None:
        snapshot = Snapshot(_key(args), args["seq"], args["projection_version"], b"")
        await self.log.discard_snapshot(snapshot, str(args["reason"]))

    async def _committed_offset(self, args: dict[str, Any]) -> int:
        """The stream sequence committed so far, from memory: cheap enough to poll."""
        if self._progress is None:
            raise LogError("this log service does not track ingest progress")
        return self._progress()

    async def _caught_up(self, args: dict[str, Any]) -> bool:
        """Wait (at most ``timeout`` s) until the log holds everything the stream held when asked.

        The read-your-writes barrier for reads that span conversations (a tenant's list), where
        no single conversation's seq says what to wait for. Polls the in-memory offset.
        """
        if self._progress is None or self._stream_end is None:
            raise LogError("this log service does not track ingest progress")
        timeout = float(args.get("timeout", 0.0))
        if not 0.0 <= timeout <= MAX_CATCH_UP_S:
            raise ValueError(f"timeout must be within 0..{MAX_CATCH_UP_S} s, got {timeout}")
        end = await self._stream_end()
        return await self._wait(end, timeout)

    async def _committed(self, args: dict[str, Any]) -> bool:
        """Wait (at most ``timeout`` s) until the log holds everything up to stream sequence
        ``position``: the read-your-writes barrier of one conversation's read, answered when the
        ingester commits rather than polled (and the ingester's linger ends at the request)."""
        if self._progress is None:
            raise LogError("this log service does not track ingest progress")
        timeout = float(args.get("timeout", 0.0))
        if not 0.0 <= timeout <= MAX_CATCH_UP_S:
            raise ValueError(f"timeout must be within 0..{MAX_CATCH_UP_S} s, got {timeout}")
        return await self._wait(int(args["position"]), timeout)

    async def _wait(self, position: int, timeout: float) -> bool:
        assert self._progress is not None, "checked by the callers"
        if self._progress() >= position:
            return True
        if self._wait_committed is not None:
            return await self._wait_committed(position, timeout)
        deadline = asyncio.get_running_loop().time() + timeout
        while self._progress() < position:  # a wait for the ingester, not a retry
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(CATCH_UP_POLL_S)
        return True

    async def _forget_conversation(self, args: dict[str, Any]) -> dict[str, Any]:
        """Write the tombstone and start the sweep; the tombstone as it is now (``status`` says)."""
        if self._forget is None:
            raise LogError("this log service does not own an ingester: it cannot forget")
        return await self._forget(args["tenant"], args["conversation"])

    async def _forget_tenant(self, args: dict[str, Any]) -> dict[str, Any]:
        """Write the tenant's tombstones and start the sweep; the tenant's tombstone as it is now."""
        if self._forget_whole_tenant is None:
            raise LogError("this log service does not own an ingester: it cannot forget")
        return await self._forget_whole_tenant(args["tenant"])

    async def _tenant_tombstone(self, args: dict[str, Any]) -> dict[str, Any] | None:
        found = await self.log.tenant_tombstone(args["tenant"])
        return None if found is None else found.as_dict()

    async def _tombstone(self, args: dict[str, Any]) -> dict[str, Any] | None:
        found = await self.log.tombstone(args["tenant"], args["conversation"])
        return None if found is None else found.as_dict()

    async def _release(self, args: dict[str, Any]) -> bool:
        if self._forget is None:
            raise LogError("this log service does not own an ingester: it cannot lift a tombstone")
        return await self.log.release(args["tenant"], args["conversation"])

    async def _stats(self, args: dict[str, Any]) -> dict[str, Any]:
        stats: LogStats = await self.log.stats()
        return {"events": stats.events, "conversations": stats.conversations, "rejected": stats.rejected, "offsets": stats.offsets,
                "skipped": self._skipped() if self._skipped is not None else 0,
                "snapshots_discarded": stats.snapshots_discarded, "stream_regressions": stats.stream_regressions,
                "last_stream_regression": stats.last_stream_regression}


def _snapshot_fields(snapshot: Snapshot | None) -> list[Any] | None:
    return None if snapshot is None else [snapshot.seq, snapshot.projection_version, snapshot.state]


NO_RESPONDER_GRACE_S = 0.5
"""How long a read asks again while no ingester answers its subject, before it is a 503.

"No responders" is the broker saying that no subscription matches *right now*: the ingester
may be down, or its connection between a reconnect and the re-subscription nats-py sends after
it. The latter lasts milliseconds; a failed read for it was seen once under load in the suite.
Half a second keeps a dependency that is really down a fast 503 (well inside 2 s)."""
NO_RESPONDER_RETRY_S = 0.05


class LogClient:
    """The log port for processes that do not own the DuckDB file: asks the owner over NATS."""

    def __init__(self, nc: NatsClient, *, shard: str = "0", timeout: float = 10.0,
                 no_responder_grace_s: float = NO_RESPONDER_GRACE_S) -> None:
        self.nc = nc
        self.shard = shard
        self.timeout = timeout
        self.no_responder_grace_s = no_responder_grace_s

    async def _request(self, subject: str, payload: bytes, timeout: float) -> Msg:
        async for attempt in AsyncRetrying(retry=retry_if_exception_type(nats.errors.NoRespondersError),
                                           wait=wait_fixed(NO_RESPONDER_RETRY_S),
                                           stop=stop_after_delay(self.no_responder_grace_s), reraise=True):
            with attempt:
                return await self.nc.request(subject, payload, timeout=timeout)
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    async def _call(self, operation: str, **args: Any) -> Any:
        subject = service_subject(self.shard, operation)
        timeout = self.timeout + float(args.get("timeout", 0.0))  # a request that waits on purpose gets its wait on top
        try:
            reply = await self._request(subject, msgpack.packb(args, use_bin_type=True), timeout)
        except nats.errors.NoRespondersError as exc:
            raise LogUnavailable(f"no ingester serves shard {self.shard!r} right now (restarting, or reconnecting to "
                                 f"NATS, after a crash; or not started: is `mirror up` or `mirror ingest` running?)") from exc
        except (TimeoutError, nats.errors.TimeoutError) as exc:
            raise LogUnavailable(f"the ingester of shard {self.shard!r} did not answer {operation} in {timeout:g}s") from exc
        answer = msgpack.unpackb(reply.data, raw=False)
        if "error" in answer:
            error = answer["error"]
            if error["type"] == "ConversationForgotten":
                raise ConversationForgotten(error["tenant"], error["conversation"], error.get("tombstone"))
            raise _ERRORS.get(error["type"], LogError)(error["message"])
        return answer["ok"]

    async def forget(self, tenant: str, conversation: str) -> dict[str, Any]:
        """Forget a conversation (every branch): the tombstone is written before this returns, the
        sweep runs on in the ingester; poll :meth:`tombstone` until its ``status`` is ``forgotten``."""
        result: dict[str, Any] = await self._call("forget", tenant=tenant, conversation=conversation)
        return result

    async def tombstone(self, tenant: str, conversation: str) -> dict[str, Any] | None:
        """A forgotten conversation's tombstone (``None``: it was never forgotten)."""
        result: dict[str, Any] | None = await self._call("tombstone", tenant=tenant, conversation=conversation)
        return result

    async def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Forget every conversation of ``tenant`` this shard holds: the tombstones are written before
        this returns, the sweep runs on; poll :meth:`tenant_tombstone` until it is ``forgotten``."""
        result: dict[str, Any] = await self._call("forget_tenant", tenant=tenant)
        return result

    async def tenant_tombstone(self, tenant: str) -> dict[str, Any] | None:
        """A forgotten tenant's tombstone on this shard (``None``: never forgotten here)."""
        result: dict[str, Any] | None = await self._call("tenant_tombstone", tenant=tenant)
        return result

    async def release(self, tenant: str, conversation: str) -> bool:
        """Lift a finished tombstone (an import with ``force``); False when there is none or its sweep runs."""
        return bool(await self._call("release", tenant=tenant, conversation=conversation))

    @staticmethod
    def _key_args(key: StreamKey) -> dict[str, str]:
        return {"tenant": key.tenant, "conversation": key.conversation, "branch": key.branch}

    async def read(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        check_range(after_seq, until_seq, limit)
        events: list[Event] = []
        while True:
            remaining = None if limit is None else limit - len(events)
            page = await self._call(
                "read", **self._key_args(key), after_seq=after_seq, until_seq=until_seq, limit=remaining
            )
            events.extend(decode(data) for data in page["events"])
            if not page["more"] or not page["events"]:
                return events
            after_seq = events[-1].seq

    async def index(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[IndexEntry]:
        check_range(after_seq, until_seq, limit)
        entries: list[IndexEntry] = []
        while True:
            remaining = None if limit is None else limit - len(entries)
            page = await self._call("index", **self._key_args(key), after_seq=after_seq, until_seq=until_seq,
                                    limit=remaining)
            entries.extend(IndexEntry(*row) for row in page["rows"])
            if not page["more"] or not page["rows"] or (limit is not None and len(entries) >= limit):
                return entries
            after_seq = entries[-1].seq

    async def find(
        self, key: StreamKey, *, types: Sequence[str], mentioning: str | None = None, after_seq: int = 0,
        until_seq: int | None = None,
    ) -> list[Event]:
        check_range(after_seq, until_seq, None)
        wanted = list(check_types(types))
        events: list[Event] = []
        while True:
            page = await self._call("find", **self._key_args(key), types=wanted, mentioning=mentioning,
                                    after_seq=after_seq, until_seq=until_seq)
            events.extend(decode(data) for data in page["events"])
            if not page["more"] or not page["events"]:
                return events
            after_seq = events[-1].seq

    async def last_seq(self, key: StreamKey) -> int:
        return int(await self._call("last_seq", **self._key_args(key)))

    async def load(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Loaded:
        """One request when the events after the snapshot fit a page (a service of an older
        release answers the snapshot alone: the events are then read as before)."""
        check_range(0, until_seq, None)
        answer = await self._call(
            "load", **self._key_args(key), projection_version=projection_version, until_seq=until_seq, events=True
        )
        snapshot = None
        if answer["snapshot"] is not None:
            seq, version, state = answer["snapshot"]
            snapshot = Snapshot(key, seq, version, state)
        after = snapshot.seq if snapshot else 0
        if "events" not in answer:
            return Loaded(key=key, snapshot=snapshot, events=tuple(await self.read(key, after_seq=after, until_seq=until_seq)))
        events = [decode(data) for data in answer["events"]]
        if answer["more"] and events:
            events.extend(await self.read(key, after_seq=events[-1].seq, until_seq=until_seq))
        return Loaded(key=key, snapshot=snapshot, events=tuple(events))

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        return int(await self._call("seq_at_time", **self._key_args(key), timestamp=float(timestamp)))

    async def conversations(self, tenant: str, conversation: str | None = None) -> list[ConversationSummary]:
        rows = await self._call("conversations", tenant=tenant, conversation=conversation)
        # A service of an older release sends five columns, and all the tenant's conversations
        # (it ignores ``conversation``): the summary's defaults stand for the rest, and the filter
        # is applied here too.
        return [ConversationSummary(row[0], tuple(row[1]), row[2], row[3], row[4], *row[5:7]) for row in rows
                if conversation in (None, row[0])]

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        await self._call(
            "save_snapshot", **self._key_args(snapshot.key), seq=snapshot.seq,
            projection_version=snapshot.projection_version, state=snapshot.state,
        )

    async def discard_snapshot(self, snapshot: Snapshot, reason: str) -> None:
        await self._call(
            "discard_snapshot", **self._key_args(snapshot.key), seq=snapshot.seq,
            projection_version=snapshot.projection_version, reason=reason,
        )

    async def committed_offset(self) -> int:
        """The stream sequence up to which the ingester has committed everything."""
        return int(await self._call("progress"))

    async def wait_committed(self, position: int, timeout: float) -> bool:
        """Wait until everything up to stream sequence ``position`` is in the log (read-your-writes).

        One request per ``MAX_CATCH_UP_S`` of waiting, answered by the ingester when it has
        committed (its linger ends at the request), not a poll of its progress; an ingester of an
        earlier release, which does not know the request, is polled."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = max(0.0, deadline - loop.time())
            try:
                if await self._call("committed", position=position, timeout=min(remaining, MAX_CATCH_UP_S)):
                    return True
            except ValueError:  # "unknown field 'committed'": poll its progress instead
                while await self.committed_offset() < position:
                    if loop.time() > deadline:
                        return False
                    await asyncio.sleep(CATCH_UP_POLL_S)
                return True
            if remaining <= MAX_CATCH_UP_S:
                return False

    async def wait_caught_up(self, timeout: float) -> bool:
        """Wait until the log holds everything the stream held when asked (False: not within
        ``timeout``; what is committed is still readable)."""
        return bool(await self._call("caught_up", timeout=timeout))

    async def stats(self) -> LogStats:
        answer = await self._call("stats")
        return LogStats(answer["events"], answer["conversations"], answer["rejected"], dict(answer["offsets"]),
                        answer.get("skipped", 0), answer.get("snapshots_discarded", 0),
                        answer.get("stream_regressions", 0), answer.get("last_stream_regression"))


__all__ = [
    "CATCH_UP_POLL_S", "LogClient", "LogService", "MAX_CATCH_UP_S", "MAX_IN_FLIGHT", "PAGE_BYTES",
    "SERVICE_ROOT", "service_subject",
]
