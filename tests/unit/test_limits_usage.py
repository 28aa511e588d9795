"""A tenant's use record and its pure steps: windows, leases (a crashed gateway's slots), headers."""

from __future__ import annotations

import pytest

from mirror.gateway.errors import InvalidLimit, LimitReached, TokenBudgetSpent
from mirror.gateway.limits import LEASE_S, Usage, reset_duration
from mirror.gateway.limits.usage import Lease, charge, lease, ratelimit_headers, release, renew
from mirror.gateway.tenants import TenantLimits, TenantRegistry

NOW = 1_800_000_000.0 + 10  # 10 s into a UTC minute
WINDOW = 300.0


def step(data: bytes | None, limits: TenantLimits, *, now: float = NOW, conversation: str = "c", holder: str = "h",
         turn: bool = True, requests: int = 1) -> tuple[bytes | None, Lease | LimitReached]:
    return lease(data, tenant="acme", limits=limits, now=now, live_window_s=WINDOW, turn=turn, requests=requests,
                 holder=holder if turn else None, conversation=conversation if turn else None)


def test_a_crashed_gateways_slot_is_free_once_its_lease_runs_out_unless_renewed() -> None:
    limits = TenantLimits(concurrent_turns=1)
    data, admitted = step(None, limits, holder="crashed")
    assert isinstance(admitted, Lease) and admitted.holder == "crashed"
    _, refused = step(data, limits, now=NOW + LEASE_S - 1, holder="next")
    assert isinstance(refused, LimitReached) and refused.limit == "concurrent_turns" and refused.retry_after_s == 1
    _, admitted = step(data, limits, now=NOW + LEASE_S + 1, holder="next")  # nobody renewed it: gone
    assert isinstance(admitted, Lease)
    renewed, _ = renew(data, holders=frozenset({"crashed"}), now=NOW + LEASE_S - 1)
    _, refused = step(renewed, limits, now=NOW + LEASE_S + 1, holder="next")  # renewed: still held
    assert isinstance(refused, LimitReached)
    freed, _ = release(renewed, holder="crashed")
    assert Usage.decode(freed).turns == {}
    assert release(freed, holder="crashed")[0] is None  # twice: nothing to write


def test_requests_count_per_minute_and_a_refusal_writes_nothing() -> None:
    limits = TenantLimits(requests_per_minute=2)
    data = None
    for remaining in ("1", "0"):
        data, admitted = step(data, limits, turn=False)
        assert isinstance(admitted, Lease) and admitted.requests == 1
        assert ratelimit_headers(limits, admitted.usage, NOW, False)["x-ratelimit-remaining-requests"] == remaining
    written, refused = step(data, limits, turn=False)
    assert written is None and isinstance(refused, LimitReached) and refused.retry_after_s == 50
    assert refused.headers["x-ratelimit-reset-requests"] == "50s"
    _, admitted = step(data, limits, now=NOW + 50, turn=False)  # the next minute
    assert isinstance(admitted, Lease)
    assert ratelimit_headers(limits, admitted.usage, NOW + 50, False)["x-ratelimit-remaining-requests"] == "1"
    _, leased = step(None, TenantLimits(requests_per_minute=3), turn=False, requests=5)  # a lease: what is left
    assert isinstance(leased, Lease) and leased.requests == 3 and leased.usage.requests == 3
    ahead = Usage.decode(data)
    assert Usage(ahead.minute + 1, 5).current(NOW, WINDOW).requests == 5  # a gateway whose clock is ahead: kept


def test_the_day_budget_refuses_once_used_up_and_resets_the_next_day() -> None:
    limits = TenantLimits(tokens_per_day=100)
    data, _ = step(None, limits)
    data, _ = charge(data, tokens=99, now=NOW)
    data, admitted = step(data, limits)
    assert isinstance(admitted, Lease)
    assert ratelimit_headers(limits, admitted.usage, NOW, True)["x-ratelimit-remaining-tokens"] == "1"
    data, _ = charge(data, tokens=30, now=NOW)  # a turn may pass the budget: the next one is refused
    _, refused = step(data, limits)
    assert isinstance(refused, TokenBudgetSpent) and refused.headers["x-ratelimit-remaining-tokens"] == "0"
    _, admitted = step(data, limits, now=NOW + 86_400)
    assert isinstance(admitted, Lease)


def test_live_conversations_are_those_with_a_turn_in_the_window() -> None:
    limits = TenantLimits(live_conversations=1)
    data, _ = step(None, limits, conversation="one")
    assert isinstance(step(data, limits, conversation="one")[1], Lease)
    refused = step(data, limits, now=NOW + 100, conversation="two")[1]
    assert isinstance(refused, LimitReached) and refused.retry_after_s == 200
    assert isinstance(step(data, limits, now=NOW + WINDOW + 1, conversation="two")[1], Lease)


@pytest.mark.parametrize(("seconds", "shown"), [(0.2, "1s"), (42, "42s"), (60, "1m0s"), (3723, "1h2m3s")])
def test_reset_durations_are_written_as_openai_does(seconds: float, shown: str) -> None:
    assert reset_duration(seconds) == shown


def test_bad_limits_are_refused_and_change_nothing(tmp_path) -> None:
    registry = TenantRegistry(tmp_path / "tenants.json")
    registry.add("acme")
    registry.set_limits("acme", requests_per_minute=3)
    before = (tmp_path / "tenants.json").read_bytes()
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidLimit, match="requests_per_minute"):
            registry.set_limits("acme", requests_per_minute=bad)  # type: ignore[arg-type]
    assert (tmp_path / "tenants.json").read_bytes() == before
    assert registry.limits_of("acme") == TenantLimits(requests_per_minute=3)
    assert not registry.limits_of("globex").any


def test_the_turn_headers_name_running_turns_and_live_conversations() -> None:
    limits = TenantLimits(concurrent_turns=3, live_conversations=5)
    _, leased = step(None, limits, holder="a", conversation="one")
    assert isinstance(leased, Lease)
    headers = ratelimit_headers(limits, leased.usage, NOW, True)
    assert (headers["x-ratelimit-limit-concurrent-turns"], headers["x-ratelimit-remaining-concurrent-turns"]) == ("3", "2")
    assert (headers["x-ratelimit-limit-live-conversations"], headers["x-ratelimit-remaining-live-conversations"]) == ("5", "4")
    assert ratelimit_headers(limits, leased.usage, NOW, True, idle_slots=1)["x-ratelimit-remaining-concurrent-turns"] == "3"
    assert "x-ratelimit-limit-concurrent-turns" not in ratelimit_headers(limits, leased.usage, NOW, False)


def test_a_renewal_writes_later_turns_of_live_conversations_but_never_adds_one() -> None:
    limits = TenantLimits(live_conversations=2)
    data, _ = step(None, limits, holder="a", conversation="one")
    renewed, usage = renew(data, holders=frozenset({"a"}), now=NOW + 5, live={"one": NOW + 5, "gone": NOW + 5})
    assert usage.live == {"one": NOW + 5} and usage.turns == {"a": NOW + 5 + LEASE_S}
