"""Re-activation does not grow with history: a passivated conversation comes back from its snapshot.

Real NATS, a real ingester process and the simulator over HTTP; the history is seeded through
the fenced bus as `mirror bench actors` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.server import EmbeddedNats
from mirror.harness.bench.live_actors import seed
from mirror.projections.snapshot import snapshot_bytes
from tests.support.stack import conversation_runtime, nats_of

HISTORY = 3_000


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="react", latency="fixed:5") as settings:
        yield settings


async def test_a_passivated_long_conversation_reactivates_from_its_snapshot(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "long")
    assert await seed(nats_of(runtime).url, {key: HISTORY}, shard=nats_of(runtime).shard) == HISTORY

    cold = await Conversation(key, runtime).start()
    assert cold.rebuilt is not None and cold.rebuilt.snapshot_seq is None
    assert cold.rebuilt.log_tail_events == HISTORY  # the first activation folds the whole log once
    # Everything seeded is committed, so nothing is read back from the stream.
    assert cold.rebuilt.stream_messages_read == 0
    await cold.turn(TurnRequest("What did we talk about?"))
    assert await cold.wait_idle(30)
    before = cold.state
    await cold.passivate()

    warm = await Conversation(key, runtime).start()
    try:
        report = warm.rebuilt
        assert report is not None
        assert report.snapshot_seq == report.last_seq == before.last_seq > HISTORY
        assert report.log_tail_events == 0 and report.stream_messages_read == 0 and report.stream_events_folded == 0
        assert warm.state == before
        # State is bounded: the snapshot of 3,000 events is no bigger than the live state's bytes.
        assert report.snapshot_bytes == len(snapshot_bytes(before)) < 64 * 1024
        reply = await warm.turn(TurnRequest("And now?"))
        assert reply.seq == (reply.recall_seq or before.last_seq) + 1  # after its recall, if any
        assert reply.recall_seq in (None, before.last_seq + 1)
    finally:
        await warm.stop()


async def test_an_uncommitted_tail_is_read_from_the_stream_after_the_committed_offset(
    nats_server: EmbeddedNats, tmp_path: Path,
) -> None:
    """The stream scan starts after what the log committed, and folds what the log does not have.

    The second ingester serves the same file but ingests another tenant only, so the events the
    first incarnation appended after it stopped stay in the stream, uncommitted.
    """
    from mirror.cognition.openai_client import LLMSettings
    from mirror.sim.server import SimLLMServer, SimSettings
    from mirror.stack.processes import IngesterProcess
    from tests.support.stack import REFLECTION, reset_stream

    await reset_stream(nats_server.url)
    key = StreamKey("acme", "tail")
    db = tmp_path / "log.duckdb"
    with SimLLMServer(SimSettings(latency="fixed:5")) as sim:
        settings = RuntimeSettings(infrastructure=NatsInfrastructure(nats_server.url, shard="tail"), llm=LLMSettings(base_url=sim.base_url, model="mirror-sim", max_retries=1),
                                   reflection=REFLECTION)
        # start() waits with asyncio.run, so it runs on a thread of its own here.
        ingester = await asyncio.to_thread(IngesterProcess(nats_server.url, db, shard="tail").start)
        try:
            await seed(nats_server.url, {key: 30}, shard="tail")
            first = await Conversation(key, settings).start()
            await first.turn(TurnRequest("one more"))
            assert await first.wait_idle(30)
        finally:
            ingester.stop()
        committed_seq = first.state.last_seq
        await first.turn(TurnRequest("said while the log is not ingesting"))
        assert await first.wait_idle(30)
        await first.stop()  # a crash-like stop: no passivation snapshot
        assert first.state.last_seq > committed_seq

        other = await asyncio.to_thread(
            IngesterProcess(nats_server.url, db, shard="tail", subjects=("mirror.other.*.*",)).start)
        try:
            second = await Conversation(key, settings).start()
            await second.stop()
        finally:
            other.stop()
    report = second.rebuilt
    assert report is not None and report.scanned_after_stream_seq > 0
    assert report.log_tail_events == committed_seq  # no snapshot was taken: the whole committed log
    assert report.stream_events_folded == report.stream_messages_read == first.state.last_seq - committed_seq
    assert second.state == first.state
