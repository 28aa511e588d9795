"""Kill -9 the nats-server and the ingester process mid-stream: nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import duckdb

from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.envelope import Event, make_event
from mirror.events.errors import BusError
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Monologue, Narrative, Turn
from mirror.stack.processes import IngesterProcess

KEYS = [StreamKey("crash", f"c{index}") for index in range(40)]


def next_events(key: StreamKey, head: Head, count: int) -> list[Event]:
    payloads = [
        lambda seq: Turn(f"user {seq}", f"reply {seq}"),
        lambda seq: Monologue("I reason", "I remember", "I aim"),
        lambda seq: Narrative(f"narrative after {seq}"),
    ]
    first = head.next_seq(key)
    return [make_event(key, seq, payloads[seq % 3](seq)) for seq in range(first, first + count)]


class Writer:
    """Appends rounds of events; keeps exactly what was acknowledged."""

    def __init__(self, bus: JetStreamBus) -> None:
        self.bus = bus
        self.heads = {key: Head(0, 0) for key in KEYS}
        self.acknowledged: dict[StreamKey, list[bytes]] = {key: [] for key in KEYS}
        self.random = random.Random(7)

    async def round(self) -> None:
        batches = [(key, next_events(key, self.heads[key], self.random.randint(1, 3)), self.heads[key]) for key in KEYS]
        while True:
            try:
                results = await self.bus.append_many(batches)
                break
            except BusError:
                continue  # the broker is down: the same appends again, recognised if they landed
        for (key, events, _), result in zip(batches, results, strict=True):
            assert isinstance(result, Head), result  # a single writer is never fenced
            self.heads[key] = result
            self.acknowledged[key].extend(map(encode, events))


def committed(db_path: Path) -> dict[StreamKey, list[bytes]]:
    rows: dict[StreamKey, list[bytes]] = {key: [] for key in KEYS}
    with duckdb.connect(str(db_path), read_only=True) as con:
        for conversation, seq, data in con.execute(
            "SELECT conversation, seq, data FROM events WHERE tenant = 'crash' ORDER BY conversation, seq"
        ).fetchall():
            key = StreamKey("crash", conversation)
            assert seq == len(rows[key]) + 1, f"gap or double in {key} at seq {seq}"
            rows[key].append(data)
    return rows


async def wait_until_ingested(bus: JetStreamBus, client: LogClient, timeout: float = 90) -> None:
    last = (await bus.js.stream_info(bus.settings.name)).state.last_seq
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if await client.committed_offset() >= last:
                return
        except Exception:  # the ingester may be restarting
            pass
        assert asyncio.get_running_loop().time() < deadline, "ingester did not catch up"
        await asyncio.sleep(0.05)


def test_kill_9_of_broker_and_ingester_loses_nothing(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats").start()
    db_path = tmp_path / "log.duckdb"
    ingester = IngesterProcess(server.url, db_path).start()
    try:
        asyncio.run(_scenario(server, ingester))
        ingester.stop()
        rows = committed(db_path)
    finally:
        ingester.kill()
        server.kill()
    assert rows == _ACKNOWLEDGED[0]
    assert sum(map(len, rows.values())) > 40 * 8


_ACKNOWLEDGED: list[dict[StreamKey, list[bytes]]] = []


async def _scenario(server: EmbeddedNats, ingester: IngesterProcess) -> None:
    bus = await JetStreamBus.connect(server.url, StreamSettings(publish_timeout_s=2, retry_deadline_s=60))
    writer = Writer(bus)
    for _ in range(3):
        await writer.round()

    # Each kill lands while a round is in flight: the rounds go on until they are told of the kill.
    flowing, killed = asyncio.Event(), asyncio.Event()
    pending = asyncio.create_task(_rounds_until(writer, flowing, killed))
    await flowing.wait()  # a round acknowledged, the next one's appends sent and awaited
    ingester.kill()  # kill -9 while events are flowing in
    killed.set()
    await pending
    await asyncio.to_thread(ingester.start)

    flowing, killed = asyncio.Event(), asyncio.Event()
    pending = asyncio.create_task(_rounds_until(writer, flowing, killed))
    await flowing.wait()
    server.kill()  # kill -9 the broker with publishes in flight
    killed.set()
    await asyncio.sleep(0.5)  # the broker stays down a while: the rounds retry against nobody
    server.start()  # same port, same store directory
    await pending

    ingester.kill()
    await asyncio.to_thread(ingester.start)
    await writer.round()

    client = LogClient(bus.nc, timeout=5)
    await wait_until_ingested(bus, client)
    await bus.close()
    _ACKNOWLEDGED.append(writer.acknowledged)


async def _rounds_until(writer: Writer, flowing: asyncio.Event, killed: asyncio.Event, after: int = 20) -> None:
    """Rounds until ``killed`` is set, then ``after`` more. ``flowing`` is set once one round is
    acknowledged: the caller, woken by it, runs while the next round's appends are in flight."""
    await writer.round()
    flowing.set()
    while not killed.is_set():
        await writer.round()
    for _ in range(after):
        await writer.round()
