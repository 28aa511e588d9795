"""The gateway's leases of a tenant's limits (:class:`~mirror.gateway.limits.Limiter`) on the in-memory
counters: the common turn makes no round trip, and what it holds never lets the shared limits be passed."""

from __future__ import annotations

from typing import TypeVar

import pytest

from mirror.events.counters import InMemoryCounters, Step
from mirror.gateway.errors import LimitReached
from mirror.gateway.limits import Limiter, Usage, usage_key
from mirror.gateway.tenants import TenantLimits

NOW = 1_800_000_000.0 + 10
WINDOW = 300.0
T = TypeVar("T")


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def limiter(store: InMemoryCounters, clock: Clock) -> Limiter:
    async def counters() -> InMemoryCounters:
        return store

    return Limiter(counters, WINDOW, clock)


async def test_a_busy_tenants_turns_lease_requests_and_slots_and_mostly_make_no_round_trip() -> None:
    store, clock = InMemoryCounters(), Clock()
    gateway = limiter(store, clock)
    limits = TenantLimits(requests_per_minute=1000, concurrent_turns=100, tokens_per_day=10**9, live_conversations=50)
    for _ in range(40):
        slot, headers = await gateway.admit("acme", limits, turn=True, conversation="c")
        assert slot is not None and headers["x-ratelimit-limit-concurrent-turns"] == "100"
        await gateway.release("acme", limits, slot)
    # The record read once; 1000 // 50 = 20 requests a lease: two leases; the slot and the live mark with the first.
    assert gateway.round_trips == 3
    shared = Usage.decode(await store.read(usage_key("acme")))
    assert shared.requests == 40 and len(shared.turns) == 1 and set(shared.live) == {"c"}
    assert int(headers["x-ratelimit-remaining-requests"]) == 1000 - 40


async def test_two_gateways_never_pass_the_shared_limits() -> None:
    store, clock = InMemoryCounters(), Clock()
    first, second = limiter(store, clock), limiter(store, clock)
    limits = TenantLimits(requests_per_minute=100)  # leases of 2
    admitted = 0
    for n in range(150):
        try:
            await (first if n % 3 else second).admit("acme", limits, turn=False, conversation=None)
            admitted += 1
        except LimitReached as refused:
            assert refused.limit == "requests_per_minute"
    assert admitted <= 100 and admitted >= 100 - 2  # at most one lease of the other gateway left unused
    slots = TenantLimits(concurrent_turns=2)  # a small limit: every slot given back at once
    held, _ = await first.admit("slots", slots, turn=True, conversation=None)
    other, _ = await second.admit("slots", slots, turn=True, conversation=None)
    with pytest.raises(LimitReached):
        await first.admit("slots", slots, turn=True, conversation=None)
    assert held is not None and other is not None
    await second.release("slots", slots, other)
    again, _ = await first.admit("slots", slots, turn=True, conversation=None)  # the other gateway's freed slot
    assert again is not None


class CountingCounters(InMemoryCounters):
    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    async def change(self, key: str, step: Step[T]) -> T:
        self.changes += 1
        return await super().change(key, step)


async def test_turns_that_end_together_are_charged_in_one_write_and_count_here_at_once() -> None:
    store, clock = CountingCounters(), Clock()
    gateway = limiter(store, clock)
    limits = TenantLimits(tokens_per_day=1000)
    await gateway.admit("acme", limits, turn=True, conversation=None)
    before = store.changes
    for _ in range(5):
        gateway.charge("acme", 100)
    charging = gateway._held["acme"].charging
    assert charging is not None
    await charging
    assert store.changes == before + 1  # five turns, one read-modify-write
    assert Usage.decode(await store.read(usage_key("acme"))).tokens == 500
    # Unwritten tokens count at once; a budget they spend is decided on the record after writing them, not after the linger.
    gateway.charge("acme", 600)
    with pytest.raises(LimitReached) as refused:
        await gateway.admit("acme", limits, turn=True, conversation=None)
    assert refused.value.limit == "tokens_per_day"
    assert Usage.decode(await store.read(usage_key("acme"))).tokens == 1100
