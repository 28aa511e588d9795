"""A snapshot is a cache: a bad row in the DuckDB file never keeps a conversation from activating.

A conversation is passivated (its snapshot written at its last seq), the ingester is stopped, the
snapshot row is spoiled in the file itself, and the ingester comes back. The conversation then
activates, answers, and its state equals the full fold of its log; the rebuild reports the
snapshot it skipped, the log no longer holds it, and ``mirror log stats`` counts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import msgpack
import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.server import EmbeddedNats
from mirror.projections.conversation import fold
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes
from mirror.projections.state import initial_state
from mirror.sim.server import SimLLMServer, SimSettings
from mirror.stack.processes import IngesterProcess
from tests.support.stack import REFLECTION, reset_stream

SHARD = "snapfix"
KEY = StreamKey("acme", "spoiled")


def _garbage(data: bytes) -> bytes:
    return b"\x00 not msgpack at all"


def _other_version(data: bytes) -> bytes:
    """The same record, labelled with another projection version inside its bytes (a stale build's)."""
    envelope = msgpack.unpackb(data, raw=False)
    envelope["version"] = PROJECTION_VERSION - 1
    return msgpack.packb(envelope, use_bin_type=True)


def _another_state(data: bytes) -> bytes:
    """Well-formed bytes of a state that is not the one the row claims (another conversation's)."""
    return snapshot_bytes(initial_state(StreamKey("acme", "someone-else")))


SPOILERS: dict[str, Callable[[bytes], bytes]] = {"undecodable": _garbage, "stale": _other_version,
                                                 "another-state": _another_state}


@pytest.fixture
def stack(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[tuple[RuntimeSettings, IngesterProcess]]:
    asyncio.run(reset_stream(nats_server.url))
    with SimLLMServer(SimSettings(latency="fixed:0")) as sim:
        ingester = IngesterProcess(nats_server.url, tmp_path / "log.duckdb", shard=SHARD).start()
        try:
            llm = LLMSettings(base_url=sim.base_url, model="mirror-sim", max_retries=1, backoff_initial_s=0.01)
            yield RuntimeSettings(NatsInfrastructure(nats_server.url, shard=SHARD), llm, reflection=REFLECTION), ingester
        finally:
            ingester.stop()


def _spoil_snapshot_rows(db_path: Path, spoil: Callable[[bytes], bytes]) -> int:
    """Rewrite every snapshot row of :data:`KEY` in the file (the ingester is stopped); returns how many."""
    with duckdb.connect(str(db_path)) as db:
        rows = db.execute("SELECT seq, projection_version, state FROM snapshots WHERE tenant = ? AND conversation = ?",
                          [KEY.tenant, KEY.conversation]).fetchall()
        for seq, version, state in rows:
            db.execute("UPDATE snapshots SET state = ? WHERE tenant = ? AND conversation = ? AND seq = ? "
                       "AND projection_version = ?", [spoil(bytes(state)), KEY.tenant, KEY.conversation, seq, version])
        return len(rows)


@pytest.mark.parametrize("spoiler", sorted(SPOILERS))
async def test_a_spoiled_snapshot_is_skipped_counted_and_the_conversation_answers(
    stack: tuple[RuntimeSettings, IngesterProcess], spoiler: str,
) -> None:
    settings, ingester = stack
    first = await Conversation(KEY, settings).start()
    for message in ("My name is Ada.", "I live in Turin.", "I am allergic to peanuts."):
        await first.turn(TurnRequest(message, sync=True))
    assert await first.wait_idle(60)
    await first.passivate()  # the snapshot at the last seq, once the log committed it
    before = first.state

    await asyncio.to_thread(ingester.stop)
    assert await asyncio.to_thread(_spoil_snapshot_rows, ingester.db_path, SPOILERS[spoiler]) == 1
    await asyncio.to_thread(ingester.start)

    second = await Conversation(KEY, settings).start()
    try:
        report = second.rebuilt
        assert report is not None
        assert report.snapshots_discarded == 1 and report.snapshot_seq is None  # refolded from the events
        assert second.state == before
        reply = await second.turn(TurnRequest("What am I allergic to?", sync=True))
        assert reply.seq > before.last_seq
        assert await second.wait_idle(60)
        assert await second.log.wait_committed((await second.bus.head(KEY)).fence, 30)
        events = await second.log.read(KEY)
        assert (await second.log.load(KEY, projection_version=PROJECTION_VERSION)).snapshot is None  # the row is gone
        assert events and fold(events) == second.state  # the live state is the full fold
        stats = await second.log.stats()
        assert stats.snapshots_discarded == 1
    finally:
        await second.stop()

