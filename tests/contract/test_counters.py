"""The shared-counters port's contract, run against every adapter (in-memory and a real JetStream bucket).

Two "processes" are two adapter instances on one store: two NATS connections to one broker, or
one in-memory dict seen twice (its adapter has no per-instance state)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import nats.js.errors
import pytest

from mirror.events.counters import InMemoryCounters, SharedCounters
from mirror.events.nats.counters import BUCKET, JetStreamCounters
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.server import EmbeddedNats


async def _drop_bucket(url: str) -> None:
    nc = await connect_nats(url, name="mirror-test-counters")
    try:
        with contextlib.suppress(nats.js.errors.BucketNotFoundError, nats.js.errors.NotFoundError):
            await nc.jetstream().delete_key_value(BUCKET)
    finally:
        await nc.close()


@pytest.fixture(params=["memory", "jetstream"])
async def pair(request: pytest.FixtureRequest, nats_server: EmbeddedNats) -> AsyncIterator[tuple[SharedCounters, SharedCounters]]:
    """Two adapters on one store, for every adapter of the port."""
    if request.param == "memory":
        shared = InMemoryCounters()
        yield shared, shared
        return
    await _drop_bucket(nats_server.url)
    connections = [await connect_nats(nats_server.url, name=f"mirror-test-counters-{n}") for n in range(2)]
    try:
        first, second = (JetStreamCounters(nc.jetstream()) for nc in connections)
        yield first, second
    finally:
        for nc in connections:
            await nc.close()


def add(amount: int, *, ceiling: int | None = None):
    """A step: add ``amount`` to a JSON count unless it would pass ``ceiling``; the outcome is (added, count)."""
    def step(current: bytes | None) -> tuple[bytes | None, tuple[bool, int]]:
        count = json.loads(current)["count"] if current else 0
        if ceiling is not None and count + amount > ceiling:
            return None, (False, count)
        return json.dumps({"count": count + amount}).encode(), (True, count + amount)
    return step


async def test_a_key_never_written_reads_none_and_has_no_key(pair) -> None:
    first, _ = pair
    assert isinstance(first, SharedCounters)
    assert await first.read("acme.never") is None
    assert "acme.never" not in await first.keys()


async def test_a_change_is_seen_by_the_other_process(pair) -> None:
    first, second = pair
    assert await first.change("acme.requests", add(3)) == (True, 3)
    assert json.loads(await second.read("acme.requests") or b"") == {"count": 3}
    assert await second.change("acme.requests", add(2)) == (True, 5)
    assert await first.change("acme.requests", add(1)) == (True, 6)  # its own guess is stale: it must see 5 first
    assert await first.keys() == ["acme.requests"]


async def test_a_step_that_writes_nothing_changes_nothing(pair) -> None:
    first, second = pair
    await first.change("acme.turns", add(2))
    await second.change("acme.turns", add(1))
    assert await first.change("acme.turns", add(1, ceiling=3)) == (False, 3)  # decided on the current 3, not its guess of 2
    assert json.loads(await second.read("acme.turns") or b"") == {"count": 3}


async def test_concurrent_changes_from_two_processes_are_never_lost(pair) -> None:
    first, second = pair
    await asyncio.gather(*(adapter.change("acme.requests", add(1)) for _ in range(40) for adapter in (first, second)))
    assert json.loads(await first.read("acme.requests") or b"") == {"count": 80}


async def test_a_ceiling_holds_under_concurrent_changes(pair) -> None:
    first, second = pair
    outcomes = await asyncio.gather(*(adapter.change("acme.slots", add(1, ceiling=7))
                                      for _ in range(10) for adapter in (first, second)))
    assert sum(added for added, _ in outcomes) == 7
    assert json.loads(await second.read("acme.slots") or b"") == {"count": 7}


async def test_jetstream_counts_outlive_the_connection(nats_server: EmbeddedNats) -> None:
    await _drop_bucket(nats_server.url)
    nc = await connect_nats(nats_server.url, name="mirror-test-counters-a")
    await JetStreamCounters(nc.jetstream()).change("acme.tokens", add(120))
    await nc.close()
    nc = await connect_nats(nats_server.url, name="mirror-test-counters-b")
    try:
        counters = JetStreamCounters(nc.jetstream())
        assert json.loads(await counters.read("acme.tokens") or b"") == {"count": 120}
        info = await nc.jetstream().stream_info(f"KV_{BUCKET}")
        assert str(getattr(info.config.storage, "value", info.config.storage)) == "file"
    finally:
        await nc.close()
