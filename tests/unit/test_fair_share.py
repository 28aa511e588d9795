"""The fair share's admission (:mod:`mirror.cognition.fair_share`): who gets a freed model slot,
and who is refused at once.

Each test holds the slots with calls that wait on an event, queues more behind them, then frees
the slots one at a time and reads the order the queued calls were admitted in.
"""

from __future__ import annotations

import asyncio
import pickle

import pytest

from mirror.cognition.errors import AdmissionRefused, ThinkingShed
from mirror.cognition.fair_share import TALKER, THINKER, FairShare, FairShareSettings, Priority, parse_tenant_weights


class Calls:
    """Calls through a share that each hold their slot until released, in the order they got one."""

    def __init__(self, share: FairShare) -> None:
        self.share = share
        self.admitted: list[str] = []
        self._release: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, tenant: str, priority: Priority = TALKER) -> asyncio.Task[None]:
        self._release[name] = asyncio.Event()

        async def call() -> None:
            async with self.share.slot(tenant, priority):
                self.admitted.append(name)
                await self._release[name].wait()

        task = self.tasks[name] = asyncio.create_task(call())
        return task

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def finish(self, name: str) -> None:
        self._release[name].set()
        await self.tasks[name]
        await self.settle()

    async def drain(self) -> None:
        """Release each call in turn as it is admitted, until none is left."""
        done = 0
        while done < len(self.admitted):
            await self.finish(self.admitted[done])
            done += 1


async def _queued(calls: Calls, names: list[tuple[str, str, Priority]]) -> None:
    for name, tenant, priority in names:
        calls.start(name, tenant, priority)
        await calls.settle()


def test_two_backlogged_tenants_are_admitted_interleaved_by_weight() -> None:
    async def main() -> list[str]:
        share = FairShare(1, FairShareSettings(tenant_weights=(("a", 2.0), ("b", 1.0)), talker_queue=10, stack_queue=20))
        calls = Calls(share)
        await _queued(calls, [("hold", "z", TALKER)])
        # a's six calls all arrive before b's three: first come first served would run every a first.
        await _queued(calls, [(f"a{i}", "a", TALKER) for i in range(6)] + [(f"b{i}", "b", TALKER) for i in range(3)])
        await calls.drain()
        return calls.admitted[1:]

    order = asyncio.run(main())
    assert order == ["a0", "a1", "b0", "a2", "a3", "b1", "a4", "a5", "b2"]


def test_a_tenant_alone_gets_every_slot_and_an_idle_one_banks_no_credit() -> None:
    async def main() -> list[str]:
        share = FairShare(1, FairShareSettings(talker_queue=10, stack_queue=20))
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER)] + [(f"a{i}", "a", TALKER) for i in range(4)])
        await calls.finish("hold")
        await calls.finish("a0")
        await calls.finish("a1")
        # b was idle while a used the whole process: it arrives now with no claim to the past.
        await _queued(calls, [("b0", "b", TALKER), ("b1", "b", TALKER)])
        await calls.drain()
        return calls.admitted

    assert asyncio.run(main()) == ["hold", "a0", "a1", "a2", "b0", "a3", "b1"]


def test_within_a_tenant_the_talker_goes_before_its_thinking() -> None:
    async def main() -> list[str]:
        share = FairShare(1)
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER), ("think0", "a", THINKER), ("think1", "a", THINKER),
                              ("talk0", "a", TALKER)])
        await calls.drain()
        return calls.admitted

    assert asyncio.run(main()) == ["hold", "talk0", "think0", "think1"]


def test_a_flood_of_talker_calls_does_not_starve_another_tenant_s_thinking() -> None:
    async def main() -> list[str]:
        share = FairShare(1, FairShareSettings(talker_queue=10, stack_queue=20))
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER)] + [(f"a{i}", "a", TALKER) for i in range(5)]
                      + [("b-think", "b", THINKER)])
        await calls.drain()
        return calls.admitted

    order = asyncio.run(main())
    assert order.index("b-think") <= 2  # after at most one more of a's calls, not after all five


def test_a_full_talker_queue_refuses_at_once_naming_whose_share_ran_out() -> None:
    async def main() -> tuple[AdmissionRefused, AdmissionRefused, dict[str, object]]:
        share = FairShare(2, FairShareSettings(talker_queue=2))
        calls = Calls(share)
        await _queued(calls, [("a0", "a", TALKER), ("a1", "a", TALKER), ("a2", "a", TALKER), ("a3", "a", TALKER)])
        with pytest.raises(AdmissionRefused) as alone:
            async with share.slot("a", TALKER):
                pass
        await _queued(calls, [("b0", "b", TALKER)])  # b waits: a is now over its share, not the stack over all
        with pytest.raises(AdmissionRefused) as beside_b:
            async with share.slot("a", TALKER):
                pass
        figures = share.figures()
        for name in list(calls.tasks):
            calls._release[name].set()
        await asyncio.gather(*calls.tasks.values())
        return alone.value, beside_b.value, figures

    alone, beside_b, figures = asyncio.run(main())
    assert (alone.scope, beside_b.scope) == ("stack", "tenant")
    assert alone.retry_after_s >= 1 and alone.waiting == 2 and alone.slots == 2
    assert not isinstance(alone, ThinkingShed)
    restored = pickle.loads(pickle.dumps(beside_b))  # it crosses Ray to the gateway whole
    assert (type(restored), restored.scope, restored.retry_after_s, str(restored)) == (
        AdmissionRefused, "tenant", beside_b.retry_after_s, str(beside_b))
    tenants = figures["tenants"]
    assert isinstance(tenants, dict) and tenants["a"]["refused"] == 2 and tenants["a"]["waiting_talker"] == 2


def test_the_stack_queue_bounds_all_tenants_talker_calls_together() -> None:
    async def main() -> AdmissionRefused:
        share = FairShare(1, FairShareSettings(talker_queue=5, stack_queue=3))
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER), ("a0", "a", TALKER), ("b0", "b", TALKER), ("c0", "c", TALKER)])
        try:
            with pytest.raises(AdmissionRefused) as refused:
                async with share.slot("d", TALKER):
                    pass
            return refused.value
        finally:
            for name in list(calls.tasks):
                calls._release[name].set()
            await asyncio.gather(*calls.tasks.values())

    refused = asyncio.run(main())
    assert refused.scope == "stack" and refused.tenant == "d"


def test_a_full_thinking_backlog_sheds_the_step_and_a_long_wait_sheds_it_too() -> None:
    async def main() -> tuple[ThinkingShed, ThinkingShed, int]:
        share = FairShare(1, FairShareSettings(thinker_queue=1, thinker_wait_s=0.05))
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER), ("think0", "a", THINKER)])
        with pytest.raises(ThinkingShed) as full:
            async with share.slot("a", THINKER):
                pass
        with pytest.raises(ThinkingShed) as waited:  # think0 was shed after its wait: the queue had room again
            await calls.tasks["think0"]
        await calls.finish("hold")
        return full.value, waited.value, share.figures()["free"]  # type: ignore[return-value]

    full, waited, free = asyncio.run(main())
    assert str(full).startswith("shed: backlog") and str(waited).startswith("shed: backlog")
    assert full.kind == "ThinkingShed"  # the error_type its thinker_failed event records
    assert free == 1  # nothing leaked: the one slot is free again


def test_a_cancelled_waiter_leaves_its_place_and_leaks_no_slot() -> None:
    async def main() -> tuple[list[str], object]:
        share = FairShare(1)
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER), ("gone", "a", TALKER), ("next", "b", TALKER)])
        calls.tasks["gone"].cancel()
        await calls.settle()
        await calls.drain()
        return calls.admitted, share.figures()["free"]

    admitted, free = asyncio.run(main())
    assert admitted == ["hold", "next"] and free == 1


def test_the_slots_time_is_counted_held_by_talker_and_thinker_or_idle() -> None:
    """Slot-seconds by tenant and priority, from admission (a handed-over slot too) to release,
    running calls up to the reading, and idle slot-seconds: together slots × elapsed."""
    now = [0.0]

    async def main() -> list[dict[str, object]]:
        share = FairShare(2, FairShareSettings(talker_queue=4), clock=lambda: now[0])
        calls = Calls(share)
        now[0] = 1.0
        await _queued(calls, [("talk", "a", TALKER)])
        now[0] = 2.0
        await _queued(calls, [("think", "a", THINKER), ("b-talk", "b", TALKER)])  # b waits: both slots held
        now[0] = 3.0
        await calls.finish("think")  # its slot goes to b at once, at 3
        now[0] = 4.0
        await calls.finish("talk")
        now[0] = 5.0
        first = share.figures()  # b's call is still running: counted up to now
        now[0] = 6.0
        await calls.finish("b-talk")
        now[0] = 8.0
        return [first, share.figures()]

    first, last = asyncio.run(main())
    tenants = first["tenants"]
    assert isinstance(tenants, dict)
    assert (tenants["a"]["talker_s"], tenants["a"]["thinker_s"], tenants["b"]["talker_s"]) == (3.0, 1.0, 2.0)
    assert first["idle_s"] == 2 * 5.0 - 6.0  # one slot free 0–2, the other 0–1 and 4–5
    tenants = last["tenants"]
    assert isinstance(tenants, dict) and tenants["b"]["talker_s"] == 3.0 and tenants["b"]["thinker_s"] == 0.0
    assert last["idle_s"] == 2 * 8.0 - 7.0


def test_a_waiter_cancelled_as_a_slot_is_freed_for_it_leaks_nothing() -> None:
    """A host stopping cancels its conversations' waiting calls while others free slots: the
    freed slot, chosen for a waiter already cancelled, goes to the next one (here: the pool)."""
    async def main() -> tuple[bool, bool, object]:
        share = FairShare(1)
        calls = Calls(share)
        await _queued(calls, [("hold", "a", TALKER), ("gone", "a", THINKER)])
        calls._release["hold"].set()  # the holder wakes first and frees its slot …
        calls.tasks["gone"].cancel()  # … for a waiter cancelled in the same turn of the loop
        await calls.settle()
        return calls.tasks["hold"].exception() is None, calls.tasks["gone"].cancelled(), share.figures()["free"]

    assert asyncio.run(main()) == (True, True, 1)


def test_weights_are_read_from_tenant_equals_weight_and_bad_ones_are_refused() -> None:
    assert parse_tenant_weights(["acme=2", "demo=0.5", "acme=3"]) == (("acme", 3.0), ("demo", 0.5))
    for bad in ("acme", "acme=0", "acme=-1", "acme=many", "bad tenant=1", "acme=inf"):
        with pytest.raises(ValueError, match="tenant"):
            parse_tenant_weights([bad])
    with pytest.raises(ValueError, match="weight"):
        FairShareSettings(tenant_weights=(("acme", 0.0),))
    with pytest.raises(ValueError, match="slot"):
        FairShare(0)
