"""The log port: the durable, queryable record of every committed event.

The log is the truth. Reads return events in seq order per (tenant, conversation, branch);
snapshots are cached folds that a reader may use to skip a prefix, never a second truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
class ConversationSummary:
    conversation: str
    branches: tuple[str, ...]
    events: int
    last_seq: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class LogStats:
    events: int
    conversations: int
    rejected: int
    offsets: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    """Messages of tenants stored on another shard, passed over since the ingester started."""


@runtime_checkable
class EventLogReader(Protocol):
    async def read(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        """Events of ``key`` with ``after_seq < seq <= until_seq``, in seq order, at most ``limit``."""
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

    async def conversations(self, tenant: str) -> list[ConversationSummary]:
        ...

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        ...

    async def stats(self) -> LogStats:
        ...


def check_range(after_seq: int, until_seq: int | None, limit: int | None) -> None:
    if type(after_seq) is not int or after_seq < 0:
        raise ValueError(f"after_seq must be a whole number >= 0, got {after_seq!r}")
    if until_seq is not None and (type(until_seq) is not int or until_seq < 0):
        raise ValueError(f"until_seq must be a whole number >= 0, got {until_seq!r}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"limit must be a whole number >= 1, got {limit!r}")


def check_timestamp(timestamp: object) -> float:
    """``timestamp`` as float seconds; a ValueError for anything else (NaN matches no event)."""
    if type(timestamp) not in (int, float) or timestamp != timestamp:
        raise ValueError(f"timestamp must be a number of seconds, got {timestamp!r}")
    return float(timestamp)  # type: ignore[arg-type]  # checked above to be an int or a float


__all__: Sequence[str] = [
    "ConversationSummary",
    "EventLogReader",
    "LogStats",
    "Loaded",
    "Snapshot",
    "check_range",
    "check_timestamp",
]
