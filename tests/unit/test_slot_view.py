"""The gateway's view of the hosts' model slots (:mod:`mirror.gateway.slots`) and the refusals' summary line.

The view refuses at the gateway only what the host would refuse: the bounds of its own turns in
flight, and, for one turn's time, the count at which the host last refused a tenant.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from mirror.cognition.errors import AdmissionRefused
from mirror.cognition.fair_share import FairShareSettings
from mirror.gateway.failures import RefusalSummary
from mirror.gateway.slots import SlotView


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_tenant_with_slots_and_its_queue_in_flight_is_refused_here() -> None:
    view = SlotView(2, FairShareSettings())  # talker_queue 2: the host holds 2 running + 2 waiting of a tenant
    for _ in range(4):
        view.check(0, "acme")
        view.began(0, "acme")
    with pytest.raises(AdmissionRefused) as refused:
        view.check(0, "acme")
    assert refused.value.scope == "stack" and refused.value.retry_after_s >= 1 and refused.value.stage == "talker"
    view.check(1, "acme")  # another host: nothing in flight there
    view.began(0, "demo")
    with pytest.raises(AdmissionRefused) as refused:
        view.check(0, "acme")
    assert refused.value.scope == "tenant"  # others are served: the tenant's share is what is used up
    view.check(0, "demo")
    assert view.refused_here == 2


def test_the_stack_bound_counts_every_tenant() -> None:
    view = SlotView(1, FairShareSettings(talker_queue=5, stack_queue=2))
    for tenant in ("a", "b", "c"):
        view.began(0, tenant)
    with pytest.raises(AdmissionRefused) as refused:
        view.check(0, "d")
    assert refused.value.scope == "stack"


def test_a_host_refusal_holds_the_tenant_at_that_count_for_one_turn_time() -> None:
    clock = Clock()
    view = SlotView(4, FairShareSettings(), clock=clock)
    started = [view.began(0, "acme") for _ in range(3)]
    clock.now += 0.5
    view.ended(0, "acme", started.pop())  # one turn answered in 0.5 s: the host's turn time moves towards it
    refused_by_host = AdmissionRefused("acme", "tenant", 2, 4, 4)
    view.ended(0, "acme", view.began(0, "acme"), refused_by_host)  # refused while 2 others were in flight
    with pytest.raises(AdmissionRefused) as refused:
        view.check(0, "acme")
    assert (refused.value.scope, refused.value.retry_after_s) == ("tenant", 2)  # as the host said
    view.check(0, "other")  # only that tenant
    view.ended(0, "acme", started.pop())  # one of its turns ended: room for one more
    view.check(0, "acme")
    view.began(0, "acme")
    with pytest.raises(AdmissionRefused):
        view.check(0, "acme")
    clock.now += 1.0  # past one turn's time (the mean is < 1 s): the host is asked again
    view.check(0, "acme")
    assert view.refused_by_host == 1


def test_a_refusal_carried_across_ray_as_a_cause_is_read() -> None:
    class RayError(Exception):
        def __init__(self, cause: BaseException) -> None:
            super().__init__("wrapped")
            self.cause = cause

    view = SlotView(4, FairShareSettings())
    view.began(0, "acme")
    view.ended(0, "acme", view.began(0, "acme"), RayError(AdmissionRefused("acme", "stack", 1, 4, 4)))
    with pytest.raises(AdmissionRefused):
        view.check(0, "acme")


def test_other_failures_teach_nothing() -> None:
    view = SlotView(4, FairShareSettings())
    view.ended(0, "acme", view.began(0, "acme"), RuntimeError("the model failed"))
    view.check(0, "acme")
    assert view.figures()["hosts"][0]["in_flight"] == {}


async def test_refusals_are_one_summary_line_a_window(caplog: pytest.LogCaptureFixture) -> None:
    summary = RefusalSummary(window_s=0.05)
    with caplog.at_level(logging.WARNING, logger="mirror.gateway.failures"):
        for tenant, status in (("acme", 503), ("acme", 503), ("demo", 429)):
            summary.count(AdmissionRefused(tenant, "stack" if status == 503 else "tenant", 1, 4, 4), status)
        assert not caplog.records  # nothing per refusal
        while not caplog.records:
            await asyncio.sleep(0.01)
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith("3 turns refused for overload in the last 0.05 s (429 ×1, 503 ×2): acme 2, demo 1; the last: ")
