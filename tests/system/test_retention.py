"""The retention sweeper in a real ingester (real nats-server, real DuckDB file), its clock moved
forward instead of waiting days: a conversation idle beyond its tenant's policy is forgotten through
the erasure path (tombstone, no byte of it left), one within it and another tenant's are kept, and a
policy set later applies at the next round."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirror.events.bus import Head
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.duckdb.retention import DAY_S, RetentionSettings
from mirror.events.envelope import Event, make_event
from mirror.events.errors import ConversationForgotten
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from mirror.gateway.tenants import TenantRegistry
from mirror.harness.bench.erasure_residue import scan
from tests.support.waits import until_async

START = 1000 * DAY_S
"""The events' clock: day 1,000."""


def turns(key: StreamKey, canary: str, day: float) -> list[Event]:
    return [make_event(key, seq, Turn(f"{canary} {seq}", "noted"), turn=seq, timestamp=START + day * DAY_S + seq)
            for seq in (1, 2, 3)]


class Clock:
    """The sweeper's clock: a day the test sets."""

    def __init__(self, day: float) -> None:
        self.day = day

    def __call__(self) -> float:
        return START + self.day * DAY_S


@pytest.fixture
async def data(tmp_path: Path) -> AsyncIterator[tuple[Path, EmbeddedNats]]:
    with EmbeddedNats(tmp_path / "data" / "nats") as server:
        yield tmp_path / "data", server


async def test_idle_conversations_are_forgotten_when_the_clock_passes_the_policy(
        data: tuple[Path, EmbeddedNats], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mirror.events.duckdb.retention")
    directory, server = data
    tenants = TenantRegistry(directory / "tenants.json")
    for tenant in ("acme", "other"):
        tenants.add(tenant)
    tenants.set_retention("acme", idle_days=30)
    clock = Clock(day=10)
    settings = IngesterSettings(compact_interval_s=3600,
                                retention=RetentionSettings(str(directory / "tenants.json"), interval_s=0.05))
    bus = await JetStreamBus.connect(server.url)
    nc = await connect_nats(server.url, name="test-retention")
    event_log = DuckDBEventLog(directory / "log.duckdb")
    ingester = Ingester(nc, event_log, settings, clock=clock)
    old, fresh, others = StreamKey("acme", "old"), StreamKey("acme", "fresh"), StreamKey("other", "old")
    try:
        await bus.append(old, turns(old, "canary-0ld-acme", day=0), Head(0, 0))
        await bus.append(fresh, turns(fresh, "canary-fr3sh-acme", day=20), Head(0, 0))
        await bus.append(others, turns(others, "canary-0ther", day=0), Head(0, 0))
        await ingester.start()
        retention = ingester.retention

        async def rounds_after(count: int) -> bool:
            return retention.rounds > count

        # Day 10: nothing is idle beyond 30 days.
        await until_async(lambda: rounds_after(0), "a first retention round")
        assert retention.swept == [] and await event_log.tombstone("acme", "old") is None

        # Day 35: acme/old has been idle 35 days; acme/fresh 15; other has no policy.
        clock.day = 35
        seen = retention.rounds

        async def old_forgotten() -> bool:
            tombstone = await event_log.tombstone("acme", "old")
            return tombstone is not None and tombstone.finished
        await until_async(old_forgotten, "acme/old to be forgotten by retention", timeout=60)
        await until_async(lambda: rounds_after(seen + 1), "another round")  # a round that must not sweep again
        assert [(s.tenant, s.conversation, s.policy_days) for s in retention.swept] == [("acme", "old", 30)]
        assert 34.9 < retention.swept[0].idle_days < 35.1
        with pytest.raises(ConversationForgotten):
            await event_log.last_seq(old)
        assert await event_log.last_seq(fresh) == 3 and await event_log.last_seq(others) == 3
        assert any("retention: forgetting acme/old (3 event(s)): idle 35.0 days, tenant's policy 30 days"
                   in record.getMessage() for record in caplog.records)

        # A policy set while it runs applies at the next round.
        tenants.set_retention("other", idle_days=7)

        async def others_forgotten() -> bool:
            return await event_log.tombstone("other", "old") is not None
        await until_async(others_forgotten, "other/old to be forgotten once its tenant has a policy", timeout=60)
        assert await event_log.last_seq(fresh) == 3
    finally:
        await ingester.stop()
        await event_log.close()
        await nc.close()
        await bus.close()
    assert scan(directory, b"canary-0ld-acme") == {}
    assert scan(directory, b"canary-fr3sh-acme")
