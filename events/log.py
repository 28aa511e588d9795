"""The log ports: the durable, queryable record of every committed event, and its snapshots.

The log is the truth. Reads return events in seq order per (tenant, conversation, branch);
snapshots are cached folds that a reader may use to skip a prefix, never a second truth.

Three small ports, because their callers differ:

- :class:`EventLogReader` — reads (every reader: time travel, the gateway, a rebuild);
- :class:`SnapshotStore` — the one write a process that does not own the log may make: save a
  snapshot, or discard one it found unusable (stale or corrupt), which the log counts
  (``LogStats.snapshots_discarded``, shown by ``mirror log stats``);
- :class:`IngestProgress` — how far the log has caught up with the bus (bus positions), for
  read-your-writes and for a rebuild that folds what the log does not hold yet.

:class:`LogAccess` is all three: what a process gets for the shard that holds a tenant
(:meth:`mirror.events.infrastructure.Connections.log`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .envelope import Event
from .ids import StreamKey


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A projection's state after ``seq``, encoded by the projection layer."""

    key: StreamKey
    seq: int
    projection_version: int
    state: bytes


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a conversation needs to come back to life: the newest snapshot and every event after it."""

    key: StreamKey
    snapshot: Snapshot | None
    events: tuple[Event, ...]

    @property
    def last_seq(self) -> int:
        if self.events:
            return self.events[-1].seq
        return self.snapshot.seq if self.snapshot else 0


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One event as a timeline lists it: where it is, what kind, which turn, when. The log keeps
    these in columns beside each record, so an index is read without decoding a payload."""

    seq: int
    type: str
    turn: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    conversation: str
    branches: tuple[str, ...]
    events: int
    last_seq: int
    updated_at: float
    turns: int = 0
    """``turn`` events on the main branch."""
    mind: str = "mirror"
    """``persona`` when the main branch holds a ``persona`` event (a character), else ``mirror``."""


@dataclass(frozen=True, slots=True)
class LogStats:
    events: int
    conversations: int
    rejected: int
    offsets: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    """Messages of tenants stored on another shard, passed over since the ingester started."""
    snapshots_discarded: int = 0
    """Snapshots found stale or corrupt by a rebuild and discarded (:meth:`SnapshotStore.discard_snapshot`)."""
    stream_regressions: int = 0
    """Times the ingester found the stream older than its log, or recreated, and re-read it
    (:class:`StreamRegression`); 0 on a healthy deployment."""
    last_stream_regression: str | None = None
    """What the newest of them was, in words (when, which kind, from which offset to which)."""


@dataclass(frozen=True, slots=True)
class StreamMark:
    """What an ingester keeps with its data to recognise its stream: the stream's creation time,
    and the newest message it stored (stream seq and event id), which compaction keeps."""

    created: str | None = None
    anchor_seq: int = 0
    anchor_id: str | None = None


@dataclass(frozen=True, slots=True)
class StreamRegression:
    """The stream came back older than the log (a broker's disk restored or lost), or was
    deleted and made again: its sequence numbers no longer mean what the log's offset says."""

    kind: str
    """``went backwards`` (its last seq is below the committed offset, or another message stands
    where the log's newest was) or ``recreated`` (a new creation time)."""
    detail: str
    committed_offset: int
    stream_last_seq: int
    reread_from: int
    """The stream seq re-reading starts at: the first the stream still holds."""

    def describe(self) -> str:
        return (f"stream {self.kind}: {self.detail}; the log had committed to stream seq {self.committed_offset}, "
                f"the stream ends at {self.stream_last_seq}; re-read from {self.reread_from}")


@runtime_checkable
class EventLogReader(Protocol):
    async def read(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        """Events of ``key`` with ``after_seq < seq <= until_seq``, in seq order, at most ``limit``."""
        ...

    async def index(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[IndexEntry]:
        """:class:`IndexEntry` of each event :meth:`read` would return, without their payloads."""
        ...

    async def find(
        self, key: StreamKey, *, types: Sequence[str], mentioning: str | None = None, after_seq: int = 0,
        until_seq: int | None = None,
    ) -> list[Event]:
        """Events of ``key`` of one of ``types`` in ``(after_seq, until_seq]``, in seq order; with
        ``mentioning``, only those whose encoded record holds that text (a prefilter: an event
        that holds it elsewhere comes too, so the caller still checks what it found). A few
        events out of a long branch without decoding the rest (why a belief)."""
        ...

    async def last_seq(self, key: StreamKey) -> int:
        """The highest committed seq of ``key``; 0 when it has none."""
        ...

    async def load(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Loaded:
        """The newest snapshot (of ``projection_version``, if given) and the events after it.

        With ``until_seq``: the newest snapshot at or before it and the events up to it, which
        is what time travel folds.
        """
        ...

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        """The highest seq of ``key`` whose event happened at or before ``timestamp``; 0 if none."""
        ...

    async def conversations(self, tenant: str, conversation: str | None = None) -> list[ConversationSummary]:
        """The tenant's conversations by id; with ``conversation``, that one alone (an empty list
        when it has no events), so finding one costs one conversation's rows, not the tenant's."""
        ...

    async def stats(self) -> LogStats:
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (a cache): refused when it is ahead of what the log has committed."""
        ...

    async def discard_snapshot(self, snapshot: Snapshot, reason: str) -> None:
        """Drop ``snapshot``, found unusable (stale or corrupt), and count it; a no-op if it is gone."""
        ...


@runtime_checkable
class IngestProgress(Protocol):
    async def committed_offset(self) -> int:
        """The bus position up to which the log has committed everything."""
        ...

    async def wait_committed(self, position: int, timeout: float) -> bool:
        """Wait until everything up to bus ``position`` is in the log (False: not within ``timeout``)."""
        ...

    async def wait_caught_up(self, timeout: float) -> bool:
        """Wait until the log holds everything the bus held when asked (False: not within ``timeout``)."""
        ...


@runtime_checkable
class LogAccess(EventLogReader, SnapshotStore, IngestProgress, Protocol):
    """Reads, snapshots and progress: what a process that does not own the log uses of it."""


@runtime_checkable
class Forgetting(Protocol):
    """Erasure, where the log's owner can do it (the NATS client of an ingester's log): a
    tombstone written at once and a sweep that follows (:mod:`mirror.events.duckdb._erasure`).
    Both answer the tombstone as a dict: tenant, conversation, requested_at, finished_at,
    events, status (``forgetting`` or ``forgotten``)."""

    async def forget(self, tenant: str, conversation: str) -> dict[str, Any]: ...

    async def tombstone(self, tenant: str, conversation: str) -> dict[str, Any] | None: ...

    async def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Every conversation of ``tenant`` in this log, and the tenant: a tombstone each at once,
        one sweep after; the tenant's tombstone (tenant, requested_at, finished_at, conversations,
        events, status)."""
        ...

    async def tenant_tombstone(self, tenant: str) -> dict[str, Any] | None: ...

    async def release(self, tenant: str, conversation: str) -> bool:
        """Lift a finished tombstone so the id can be imported again; False if none (or unfinished)."""
        ...


def check_range(after_seq: int, until_seq: int | None, limit: int | None) -> None:
    if type(after_seq) is not int or after_seq < 0:
        raise ValueError(f"after_seq must be a whole number >= 0, got {after_seq!r}")
    if until_seq is not None and (type(until_seq) is not int or until_seq < 0):
        raise ValueError(f"until_seq must be a whole number >= 0, got {until_seq!r}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"limit must be a whole number >= 1, got {limit!r}")


def check_types(types: object) -> tuple[str, ...]:
    """``types`` as a tuple of event type names; a ValueError for anything else or none."""
    if isinstance(types, str) or not isinstance(types, Sequence) or not types or not all(
            isinstance(name, str) and name for name in types):
        raise ValueError(f"types must be a non-empty list of event type names, got {types!r}")
    return tuple(types)


def check_timestamp(timestamp: object) -> float:
    """``timestamp`` as float seconds; a ValueError for anything else (NaN matches no event)."""
    if type(timestamp) not in (int, float) or timestamp != timestamp:
        raise ValueError(f"timestamp must be a number of seconds, got {timestamp!r}")
    return float(timestamp)  # type: ignore[arg-type]  # checked above to be an int or a float


__all__: Sequence[str] = [
    "ConversationSummary",
    "Forgetting",
    "EventLogReader",
    "IndexEntry",
    "IngestProgress",
    "LogAccess",
    "LogStats",
    "Loaded",
    "StreamMark",
    "StreamRegression",
    "Snapshot",
    "SnapshotStore",
    "check_range",
    "check_types",
    "check_timestamp",
]
