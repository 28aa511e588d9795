"""What activating a conversation asks the broker: real NATS, a real ingester process, the simulator.

A new conversation (no events) and one passivated cleanly (a snapshot, nothing after it) come
back from two requests sent side by side: the log's ``load`` (snapshot and events in one
answer) and the stream's head. Counted on the host's own NATS connection (every request is one
message out of it), so a read added to activation is seen here, not only in a benchmark.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.actors.placement.table import HostedConversations
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.duckdb.log import READ_THREADS, DuckDBEventLog
from mirror.events.envelope import make_event
from mirror.events.errors import ConversationForgotten
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsConnections
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from tests.support.logs import duckdb_writer
from tests.support.stack import conversation_runtime

pytestmark = pytest.mark.timeout(300)

ACTIVATION_REQUESTS = 2
"""The log's load and the stream's head (it was five, one after another: the committed offset,
the snapshot, the events, the stream after the offset, the head)."""


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="reads", latency="fixed:2",
                              mode="controller_only") as settings:
        yield settings


async def _requests_to_activate(table: HostedConversations, key: StreamKey) -> int:
    """Messages the host's connection sent while ``key`` activated (a summary: no turn, no append)."""
    connections = (await table.clients()).connections
    assert isinstance(connections, NatsConnections)
    stats = connections.bus.nc.stats
    before = stats["out_msgs"]
    await table.summary(key)
    return int(stats["out_msgs"] - before)


async def test_a_new_conversation_activates_with_one_log_request_and_one_head(runtime: RuntimeSettings) -> None:
    table = HostedConversations(runtime)
    try:
        await table.clients()  # the host's connections and stream check, paid once per host
        assert await _requests_to_activate(table, StreamKey("acme", "brand-new")) == ACTIVATION_REQUESTS
        assert table.stats.activations == 1
        phases = table.figures()["activation_phases_ms_mean"]
        assert set(phases) == {"queued", "clients", "log", "head", "log_and_head", "start"}  # no stream scan, no second head
    finally:
        await table.close()


async def test_a_cleanly_passivated_conversation_comes_back_with_the_same_two(runtime: RuntimeSettings) -> None:
    table = HostedConversations(runtime)
    key = StreamKey("acme", "returning")
    try:
        reply = await table.turn(key, TurnRequest("remember me"))
        assert await table.wait_idle(key, 30)
        before = await table.state_bytes(key)
        await table.passivate(key)  # waits for the log to commit, then snapshots the last seq
        assert await _requests_to_activate(table, key) == ACTIVATION_REQUESTS
        report = await table.rebuild_report(key)
        assert report is not None and report.snapshot_seq == report.last_seq >= reply.seq
        assert report.log_tail_events == 0 and report.stream_messages_read == 0
        assert await table.state_bytes(key) == before
    finally:
        await table.close()


@pytest.fixture
def slow_model(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    """The Talker alone (no thinking), against a model that takes seconds to answer."""
    with conversation_runtime(nats_server.url, tmp_path, shard="slowmodel", latency="fixed:3000", mode="baseline",
                              memory=False) as settings:
        yield settings


async def test_a_new_conversations_data_key_is_made_while_the_talker_answers(slow_model: RuntimeSettings) -> None:
    """The first turn's one fsynced publish that is not its events (the conversation's data key) is
    sent while the Talker's model call still holds its slot, and the append reads no key again."""
    table = HostedConversations(slow_model)
    key = StreamKey("acme", "new-and-keyed")
    try:
        clients = await table.clients()
        connections = clients.connections
        assert isinstance(connections, NatsConnections)
        stats = connections.bus.nc.stats
        await table.turn(StreamKey("acme", "first"), TurnRequest("hello"))  # the key stream checked, once a process
        await table.summary(key)  # activated: the two reads are done
        before = stats["out_msgs"]
        turn = asyncio.create_task(table.turn(key, TurnRequest("hello, I am new here")))
        while stats["out_msgs"] == before:  # the key's publish, the first message after activation
            assert not turn.done()
            await asyncio.sleep(0.005)
        tenants: Any = clients.share.figures()["tenants"]
        assert tenants["acme"]["running"] == 1  # the Talker still waits on the model
        assert stats["out_msgs"] == before + 1
        await turn
        assert stats["out_msgs"] == before + 2  # the events' publish: the key was not read again
    finally:
        await table.close()


async def test_the_log_loads_a_branch_without_events_without_a_query(tmp_path: Path) -> None:
    """The DuckDB log knows its branches (read when it opens, added by each batch before it commits):
    a new conversation's load is answered even while both read threads are busy, a forgotten one
    is still refused, and a branch with events is loaded whole, before and after reopening."""
    path = tmp_path / "log.duckdb"
    event_log = DuckDBEventLog(path)
    held, forgotten = StreamKey("acme", "held"), StreamKey("acme", "forgotten")
    written = [make_event(held, seq, Turn(f"message {seq}", f"reply {seq}", narrative_seq=None), turn=seq, timestamp=1.0)
               for seq in (1, 2)]
    await duckdb_writer(event_log)(written)
    await event_log.forget("acme", "forgotten")
    busy, release = threading.Event(), threading.Event()

    def occupy() -> None:
        busy.set()
        release.wait(30)

    occupied = [asyncio.ensure_future(event_log._read(occupy)) for _ in range(READ_THREADS)]
    try:
        await asyncio.to_thread(busy.wait, 30)
        new = await asyncio.wait_for(event_log.load(StreamKey("acme", "brand-new")), 10)
        assert (new.snapshot, new.events) == (None, ())
        with pytest.raises(ConversationForgotten):
            await event_log.load(forgotten)
    finally:
        release.set()
        await asyncio.gather(*occupied)
    assert (await event_log.load(held)).events == tuple(written)
    await event_log.close()
    reopened = DuckDBEventLog(path)
    try:
        assert (await reopened.load(held)).events == tuple(written)
        assert (await reopened.load(StreamKey("acme", "brand-new"))).events == ()
    finally:
        await reopened.close()
