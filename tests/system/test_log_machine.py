"""Model-based test of the whole write path: writers, JetStream, ingester, DuckDB.

A plain dict of lists (conversation -> encoded events) sits beside the real system; every rule
is applied to both, and after every step the log is flushed (awaited, no sleeps) and compared:
committed log == acknowledged appends, no gaps, no doubles.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.payloads import Monologue, Narrative, Turn
from tests.support.stack import reset_stream

KEYS = [StreamKey("machine", f"c{index}") for index in range(3)]
_tags = itertools.count()


def batch(key: StreamKey, first: int, count: int) -> list[Event]:
    tag = next(_tags)
    kinds = [
        lambda seq: Turn(f"user {seq}/{tag}", f"reply {seq}/{tag}", narrative_seq=None),
        lambda seq: Monologue(f"reasoning {tag}", f"memory {tag}", f"goal {tag}"),
        lambda seq: Narrative(f"narrative {seq}/{tag}", monologue_seq=None),
    ]
    return [make_event(key, seq, kinds[seq % 3](seq), timestamp=3000.0 + seq) for seq in range(first, first + count)]


class LogMachine(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.db_path = Path(tempfile.mkdtemp(prefix="mirror-machine-")) / "log.duckdb"
        self.model: dict[StreamKey, list[bytes]] = {key: [] for key in KEYS}
        self.run(reset_stream(self.url))
        self.writer = self.run(JetStreamBus.connect(self.url))
        self.rival = self.run(JetStreamBus.connect(self.url))
        self.heads: dict[StreamKey, Head] = {key: Head(0, 0) for key in KEYS}
        self.stale: list[tuple[StreamKey, Head]] = []
        self.last_append: tuple[StreamKey, list[Event], Head, Head] | None = None
        self.ingester: Ingester | None = None
        self.run(self._start_ingester())

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    async def _start_ingester(self) -> None:
        nc = await connect_nats(self.url, name="machine-ingester")
        self.ingester = Ingester(nc, DuckDBEventLog(self.db_path), IngesterSettings(compact_interval_s=3600))
        await self.ingester.start()

    def teardown(self) -> None:
        async def close() -> None:
            if self.ingester is not None:
                await self.ingester.stop()
                await self.ingester.log.close()
                await self.ingester.nc.close()
            await self.writer.close()
            await self.rival.close()

        try:
            self.run(close())
        finally:
            self.loop.close()

    async def _current_head(self, bus: JetStreamBus, key: StreamKey) -> Head:
        head = await bus.head(key)
        return head if head.last_seq is not None else head.with_last_seq(0)

    # --------------------------------------------------------------------------- rules

    @rule(index=st.integers(0, len(KEYS) - 1), count=st.integers(1, 3))
    def writer_appends(self, index: int, count: int) -> None:
        key = KEYS[index]
        head = self.heads[key]
        events = batch(key, head.next_seq(key), count)
        try:
            new_head = self.run(self.writer.append(key, events, head))
        except AppendConflict:
            # Someone else wrote since: the writer reloads and the model is unchanged.
            self.heads[key] = self.run(self._current_head(self.writer, key))
            assert self.heads[key].last_seq == len(self.model[key])
            return
        self.model[key].extend(map(encode, events))
        self.stale.append((key, head))
        self.heads[key] = new_head
        self.last_append = (key, events, head, new_head)

    @rule(index=st.integers(0, len(KEYS) - 1), count=st.integers(1, 3))
    def rival_takes_over(self, index: int, count: int) -> None:
        """A second writer (say, a restarted actor) reads the head and appends."""
        key = KEYS[index]
        head = self.run(self._current_head(self.rival, key))
        assert head.last_seq == len(self.model[key])
        events = batch(key, head.last_seq + 1, count)
        self.run(self.rival.append(key, events, head))
        self.model[key].extend(map(encode, events))

    @rule(index=st.integers(0, len(KEYS) - 1))
    def two_writers_race(self, index: int) -> None:
        key = KEYS[index]
        head = self.run(self._current_head(self.writer, key))
        first = batch(key, head.last_seq + 1, 2)
        second = batch(key, head.last_seq + 1, 2)
        async def race() -> list[object]:
            return await asyncio.gather(
                self.writer.append(key, first, head), self.rival.append(key, second, head), return_exceptions=True
            )

        results = self.run(race())
        won = [events for events, result in zip((first, second), results, strict=True) if isinstance(result, Head)]
        assert len(won) == 1, results
        assert sum(isinstance(result, AppendConflict) for result in results) == 1, results
        self.model[key].extend(map(encode, won[0]))
        self.heads[key] = self.run(self._current_head(self.writer, key))

    @precondition(lambda self: bool(self.stale))
    @rule(pick=st.integers(0, 1000))
    def stale_writer_is_fenced(self, pick: int) -> None:
        key, head = self.stale[pick % len(self.stale)]
        with pytest.raises(AppendConflict):
            self.run(self.writer.append(key, batch(key, head.next_seq(key), 1), head))

    @precondition(lambda self: self.last_append is not None)
    @rule()
    def writer_retries_its_last_append(self) -> None:
        assert self.last_append is not None  # the precondition
        key, events, head, new_head = self.last_append
        try:
            again = self.run(self.writer.append(key, events, head))
        except AppendConflict:
            # Only possible if another writer continued after it; the model is unchanged.
            assert new_head.last_seq is not None and len(self.model[key]) > new_head.last_seq
            return
        assert again == new_head

    @rule()
    def ingester_restarts(self) -> None:
        async def restart() -> None:
            assert self.ingester is not None
            await self.ingester.stop()
            await self.ingester.log.close()
            await self.ingester.nc.close()
            await self._start_ingester()

        self.run(restart())

    @rule()
    def ingester_crashes(self) -> None:
        """Tasks die mid-flight: nothing fetched-but-uncommitted is flushed, nothing acked."""

        async def crash() -> None:
            assert self.ingester is not None
            for task in self.ingester._tasks:
                task.cancel()
            for task in self.ingester._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.ingester._feed.stop()
            await self.ingester.nc.close()
            await self.ingester.log.close()
            await self._start_ingester()

        self.run(crash())

    @rule()
    def stream_is_compacted(self) -> None:
        assert self.ingester is not None
        self.run(self._flush())
        self.run(self.ingester.compact())

    # ----------------------------------------------------------------------- invariant

    async def _flush(self) -> None:
        assert self.ingester is not None
        last = (await self.writer.js.stream_info(self.writer.settings.name)).state.last_seq
        assert await self.ingester.wait_for_offset(last, timeout=30)

    @invariant()
    def committed_log_equals_acknowledged_appends(self) -> None:
        self.run(self._flush())
        assert self.ingester is not None
        for key in KEYS:
            stored = self.run(self.ingester.log.read_raw(key))
            assert stored == self.model[key]  # same events, same order: no gaps, no doubles


@pytest.fixture(autouse=True)
def _machine_broker(nats_server) -> None:
    LogMachine.url = nats_server.url


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=15,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
