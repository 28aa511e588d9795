"""In-memory adapter of the log port: the reference model the contract suite holds the others to.

It keeps each event as the codec's bytes, so a read decodes exactly what DuckDB or NATS would
hand back. Writes come through :meth:`InMemoryEventLog.add` (the DuckDB log's counterpart is the
ingester's batch commit): an event already present with the same bytes is a copy and ignored,
one with other bytes is a divergent duplicate and counted as rejected, never stored.
:meth:`InMemoryEventLog.ingest` adds an event the bus stored at a position and moves the
committed offset with it (the in-memory infrastructure feeds it from an ``InMemoryBus``), so
it serves every log port: reads, snapshots and ingest progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from .codec import decode, encode
from .envelope import Event
from .errors import LogError
from .ids import MAIN_BRANCH, StreamKey, validate_identifier
from .log import ConversationSummary, IndexEntry, Loaded, LogStats, Snapshot, check_range, check_timestamp, check_types


class InMemoryEventLog:
    """The log port in one process's memory (for unit tests and as the contract's model)."""

    def __init__(self, *, stream_end: Callable[[], int] | None = None) -> None:
        """``stream_end()``: the bus's newest position (for :meth:`wait_caught_up`); without it
        the log counts as caught up with whatever it was given."""
        self._events: dict[StreamKey, dict[int, tuple[float, bytes]]] = {}
        self._snapshots: dict[tuple[StreamKey, int, int], Snapshot] = {}
        self.rejected = 0
        self.snapshots_discarded = 0
        self.offset = 0
        """The bus position of the newest event :meth:`ingest` added."""
        self._stream_end = stream_end

    def ingest(self, position: int, event: Event) -> None:
        """Add ``event``, which the bus stored at ``position``, and commit the offset with it."""
        self.add([event])
        self.offset = max(self.offset, position)

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            stored = self._events.setdefault(event.key, {})
            data = encode(event)
            present = stored.get(event.seq)
            if present is None:
                stored[event.seq] = (float(event.timestamp), data)
            elif present[1] != data:
                self.rejected += 1

    def _seqs(self, key: StreamKey) -> list[int]:
        return sorted(self._events.get(key, {}))

    async def read(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[Event]:
        check_range(after_seq, until_seq, limit)
        return [decode(data) for data in self._read_raw(key, after_seq, until_seq, limit)]

    def _read_raw(self, key: StreamKey, after_seq: int, until_seq: int | None, limit: int | None) -> list[bytes]:
        stored = self._events.get(key, {})
        seqs = [seq for seq in self._seqs(key) if after_seq < seq and (until_seq is None or seq <= until_seq)]
        return [stored[seq][1] for seq in seqs[:limit]]

    async def index(
        self, key: StreamKey, *, after_seq: int = 0, until_seq: int | None = None, limit: int | None = None
    ) -> list[IndexEntry]:
        return [IndexEntry(event.seq, event.type, event.turn, float(event.timestamp))
                for event in await self.read(key, after_seq=after_seq, until_seq=until_seq, limit=limit)]

    async def find(
        self, key: StreamKey, *, types: Sequence[str], mentioning: str | None = None, after_seq: int = 0,
        until_seq: int | None = None,
    ) -> list[Event]:
        check_range(after_seq, until_seq, None)
        wanted = check_types(types)
        needle = None if mentioning is None else mentioning.encode()
        found = (decode(data) for data in self._read_raw(key, after_seq, until_seq, None)
                 if needle is None or needle in data)
        return [event for event in found if event.type in wanted]

    async def last_seq(self, key: StreamKey) -> int:
        return max(self._events.get(key, {}), default=0)

    async def latest_snapshot(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Snapshot | None:
        check_range(0, until_seq, None)
        candidates = [
            snapshot for (snapshot_key, seq, version), snapshot in self._snapshots.items()
            if snapshot_key == key
            and (projection_version is None or version == projection_version)
            and (until_seq is None or seq <= until_seq)
        ]
        return max(candidates, key=lambda snapshot: snapshot.seq, default=None)

    async def load(
        self, key: StreamKey, *, projection_version: int | None = None, until_seq: int | None = None
    ) -> Loaded:
        snapshot = await self.latest_snapshot(key, projection_version=projection_version, until_seq=until_seq)
        after = snapshot.seq if snapshot else 0
        return Loaded(key=key, snapshot=snapshot, events=tuple(await self.read(key, after_seq=after, until_seq=until_seq)))

    async def seq_at_time(self, key: StreamKey, timestamp: float) -> int:
        moment = check_timestamp(timestamp)
        stored = self._events.get(key, {})
        return max((seq for seq, (ts, _) in stored.items() if ts <= moment), default=0)

    async def conversations(self, tenant: str, conversation: str | None = None) -> list[ConversationSummary]:
        validate_identifier("tenant", tenant)
        by_conversation: dict[str, list[StreamKey]] = {}
        for key, stored in self._events.items():
            if key.tenant == tenant and stored and conversation in (None, key.conversation):
                by_conversation.setdefault(key.conversation, []).append(key)
        summaries = []
        for conversation in sorted(by_conversation):
            keys = by_conversation[conversation]
            main = self._events.get(StreamKey(tenant, conversation, MAIN_BRANCH), {})
            types = [decode(data).type for _, data in main.values()]
            summaries.append(ConversationSummary(
                conversation=conversation,
                branches=tuple(sorted(key.branch for key in keys)),
                events=sum(len(self._events[key]) for key in keys),
                last_seq=max(main, default=0),
                updated_at=max(ts for key in keys for ts, _ in self._events[key].values()),
                turns=types.count("turn"), mind="persona" if "persona" in types else "mirror",
            ))
        return summaries

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        last = await self.last_seq(snapshot.key)
        if snapshot.seq > last:
            raise LogError(
                f"snapshot of {snapshot.key} at seq {snapshot.seq} is ahead of the committed log "
                f"(last seq {last}); snapshot only committed events"
            )
        self._snapshots.setdefault((snapshot.key, snapshot.seq, snapshot.projection_version), snapshot)

    async def discard_snapshot(self, snapshot: Snapshot, reason: str) -> None:
        if self._snapshots.pop((snapshot.key, snapshot.seq, snapshot.projection_version), None) is not None:
            self.snapshots_discarded += 1

    def put_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as given, replacing one at its place (tests: a corrupt cache row)."""
        self._snapshots[(snapshot.key, snapshot.seq, snapshot.projection_version)] = snapshot

    async def committed_offset(self) -> int:
        return self.offset

    async def wait_committed(self, position: int, timeout: float) -> bool:
        return await self._wait(lambda: self.offset >= position, timeout)

    async def wait_caught_up(self, timeout: float) -> bool:
        if self._stream_end is None:
            return True
        end = self._stream_end()
        return await self._wait(lambda: self.offset >= end, timeout)

    @staticmethod
    async def _wait(done: Callable[[], bool], timeout: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while not done():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.001)  # something else feeds the log: let it run
        return True

    async def stats(self) -> LogStats:
        conversations = {(key.tenant, key.conversation) for key, stored in self._events.items() if stored}
        events = sum(len(stored) for stored in self._events.values())
        return LogStats(events=events, conversations=len(conversations), rejected=self.rejected,
                        snapshots_discarded=self.snapshots_discarded)

    async def close(self) -> None:
        """Nothing to release; here so tests close every adapter the same way."""


__all__ = ["InMemoryEventLog"]
