"""Forgetting a whole tenant against a real nats-server and a real DuckDB file: a canary put in
every conversation of the tenant, its persona and its use record is found 0 times in every file
under the data directory afterwards while another tenant's canary is still there; the tenant and
all its conversations cost one fresh copy of the database, as do several conversations forgotten
together; a sweep cut short by a crash resumes at the next start."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirror.cognition.persona import from_document
from mirror.events.bus import Head
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.envelope import Event, make_event
from mirror.events.errors import ConversationForgotten
from mirror.events.ids import StreamKey
from mirror.events.nats.counters import JetStreamCounters
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from mirror.gateway.personas import PersonaStore
from mirror.harness.bench.erasure_residue import scan
from tests.support.stack import ingesting as ingesting_into
from tests.support.waits import until_async

GONE_CANARY, KEPT_CANARY = "canary-31c7-tenant-gone", "canary-8be2-tenant-kept"
SETTINGS = IngesterSettings(compact_interval_s=3600)  # no compaction: its purge is a known gap (test_forget.py)


def turns(key: StreamKey, canary: str, count: int) -> list[Event]:
    return [make_event(key, seq, Turn(f"{canary} says {seq}", f"{canary} heard {seq}"), turn=seq, timestamp=2000.0 + seq)
            for seq in range(1, count + 1)]


def ingesting(url: str, db_path: Path) -> contextlib.AbstractAsyncContextManager[Ingester]:
    return ingesting_into(url, db_path, SETTINGS, name="test-forget-tenant")


async def flushed(ingester: Ingester, bus: JetStreamBus) -> None:
    last = (await bus.js.stream_info(bus.settings.name)).state.last_seq
    assert await ingester.wait_for_offset(last, timeout=30)


async def write(bus: JetStreamBus, tenant: str, conversations: list[str], canary: str, count: int = 5) -> None:
    for conversation in conversations:
        key = StreamKey(tenant, conversation)
        await bus.append(key, turns(key, canary, count), Head(0, 0))


@pytest.fixture
async def data(tmp_path: Path) -> AsyncIterator[tuple[Path, EmbeddedNats]]:
    with EmbeddedNats(tmp_path / "data" / "nats") as server:
        yield tmp_path / "data", server


async def test_forgetting_a_tenant_leaves_no_byte_of_it_and_keeps_the_other(data: tuple[Path, EmbeddedNats]) -> None:
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-tenant-client")
    client = LogClient(nc)
    personas, counters = PersonaStore(), JetStreamCounters(bus.js)
    try:
        async with ingesting(server.url, db_path) as ingester:
            await write(bus, "acme", ["one", "two", "three"], GONE_CANARY)
            await write(bus, "globex", ["kept"], KEPT_CANARY)
            card = {"spec": "chara_card_v2", "data": {"name": "Wren", "description": f"knows {GONE_CANARY}"}}
            await personas.put(bus, "acme", "wren", from_document(card, "test", "json"))
            await personas.put(bus, "globex", "wren", from_document(
                {"spec": "chara_card_v2", "data": {"name": "Wren", "description": f"knows {KEPT_CANARY}"}}, "test", "json"))
            await counters.change("use.acme", lambda _: (GONE_CANARY.encode(), None))
            await flushed(ingester, bus)
            assert scan(directory, GONE_CANARY.encode()) and scan(directory, KEPT_CANARY.encode())
            copies = ingester.log.fresh_copies

            job = await client.forget_tenant("acme")
            assert (job["tenant"], job["conversations"], job["events"]) == ("acme", 3, 15)
            await personas.erase(bus, "acme")
            await counters.erase("use.acme")

            async def swept() -> bool:
                tombstone = await client.tenant_tombstone("acme")
                return tombstone is not None and tombstone["status"] == "forgotten"
            await until_async(swept, "the tenant's sweep to finish", timeout=60)
            assert ingester.log.fresh_copies == copies + 1  # three conversations, one copy
            for conversation in ("one", "two", "three"):
                assert (await client.tombstone("acme", conversation) or {}).get("status") == "forgotten"
                with pytest.raises(ConversationForgotten):
                    await client.last_seq(StreamKey("acme", conversation))
            assert await client.tenant_tombstone("globex") is None
            assert await client.forget_tenant("acme") == await client.tenant_tombstone("acme")  # once is once

            # A late write of a forgotten conversation reaches the stream but never the log.
            await bus.append(StreamKey("acme", "one"), turns(StreamKey("acme", "one"), GONE_CANARY, 6)[5:], Head(5, 0))
            await write(bus, "globex", ["later"], KEPT_CANARY, count=1)
            await flushed(ingester, bus)
            assert await client.last_seq(StreamKey("globex", "later")) == 1
            await bus.erase("acme", "*")  # what the next sweep does to the late write's stream copy
            assert await personas.names(bus, "acme") == [] and await personas.names(bus, "globex") == ["wren"]
            assert await counters.read("use.acme") is None
        assert scan(directory, GONE_CANARY.encode()) == {}
        kept = scan(directory, KEPT_CANARY.encode())
        assert "log.duckdb" in kept and any("KV_mirror_personas" in name for name in kept)
        async with ingesting(server.url, db_path):  # a restarted ingester still refuses them
            with pytest.raises(ConversationForgotten):
                await client.last_seq(StreamKey("acme", "two"))
    finally:
        await nc.close()
        await bus.close()


async def test_conversations_forgotten_together_share_one_copy(data: tuple[Path, EmbeddedNats]) -> None:
    directory, server = data
    bus = await JetStreamBus.connect(server.url)
    try:
        async with ingesting(server.url, directory / "log.duckdb") as ingester:
            await write(bus, "acme", ["a", "b", "c", "kept"], GONE_CANARY)
            await flushed(ingester, bus)
            copies = ingester.log.fresh_copies
            tombstones = await ingester.forget_conversations("acme", ["a", "b", "c"])
            assert [t["events"] for t in tombstones] == [5, 5, 5]

            async def swept() -> bool:
                found = [await ingester.log.tombstone("acme", conversation) for conversation in "abc"]
                return all(tombstone is not None and tombstone.finished for tombstone in found)
            await until_async(swept, "the sweep to finish", timeout=60)
            assert ingester.log.fresh_copies == copies + 1
            assert await ingester.log.last_seq(StreamKey("acme", "kept")) == 5
            with pytest.raises(ConversationForgotten):
                await ingester.log.last_seq(StreamKey("acme", "b"))
    finally:
        await bus.close()


async def test_a_tenant_sweep_cut_short_resumes_at_the_next_start(data: tuple[Path, EmbeddedNats]) -> None:
    directory, server = data
    db_path = directory / "log.duckdb"
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-forget-tenant-client")
    try:
        async with ingesting(server.url, db_path) as ingester:
            await write(bus, "acme", ["one", "two"], GONE_CANARY)
            await write(bus, "globex", ["kept"], KEPT_CANARY)
            await flushed(ingester, bus)
            # The tombstones written and nothing swept: what a crash right after them leaves.
            tombstone, conversations = await ingester.log.forget_tenant("acme")
            assert [t.conversation for t in conversations] == ["one", "two"] and not tombstone.finished
        assert scan(directory, GONE_CANARY.encode())
        client = LogClient(nc)
        async with ingesting(server.url, db_path):
            async def swept() -> bool:
                return (await client.tenant_tombstone("acme") or {}).get("status") == "forgotten"
            await until_async(swept, "the resumed sweep to finish", timeout=60)
        assert scan(directory, GONE_CANARY.encode()) == {}
        assert scan(directory, KEPT_CANARY.encode())
    finally:
        await nc.close()
        await bus.close()
