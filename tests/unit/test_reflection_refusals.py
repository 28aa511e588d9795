"""How the gateway answers a forced reflection the policy refuses: 409 naming the turns left in the
cooldown, 429 with ``Retry-After`` naming when at the hourly cap, 409 with reflection off."""

from __future__ import annotations

from mirror.cognition.errors import ReflectionRefused
from mirror.gateway.error_table import Answer
from mirror.gateway.error_table import answer as answer_of

NOW = 1_763_000_000.0


def refusal_response(refused: ReflectionRefused, now: float) -> Answer:
    """The native answer's status, headers and body, as the gateway's handler builds them."""
    return answer_of(refused, now=now)


def body(found: Answer) -> dict:
    return {"detail": found.detail, **found.fields}


def test_the_cooldown_is_a_409_naming_the_turns_left() -> None:
    refused = ReflectionRefused("acme/kitchen/main", "cooldown", "within the cooldown of 10 turns after the last "
                                "reflection: 4 more turn(s) first", turns_left=4)
    response = refusal_response(refused, NOW)
    assert response.status == 409 and not response.headers
    answer = body(response)
    assert answer["reason"] == "cooldown" and answer["turns_left"] == 4 and "4 more turn(s)" in answer["detail"]


def test_the_hourly_cap_is_a_429_with_retry_after_naming_when() -> None:
    refused = ReflectionRefused("acme/kitchen/main", "hourly_cap", "6 reflections within the hour, the cap is 6",
                                next_slot=NOW + 90.2)
    response = refusal_response(refused, NOW)
    assert response.status == 429 and response.headers["Retry-After"] == "91"
    answer = body(response)
    assert answer["next_slot"] == NOW + 90.2 and answer["next_slot_iso"] == "2025-11-13T02:14:50+00:00"
    assert answer["detail"].endswith("try again after 2025-11-13T02:14:50+00:00 (in 91 s)")
    late = refusal_response(ReflectionRefused("k", "hourly_cap", "cap", next_slot=NOW - 5), NOW)
    assert late.headers["Retry-After"] == "1"  # the slot has just opened: ask again at once, not "-5"


def test_reflection_off_is_a_409_that_says_so() -> None:
    response = refusal_response(ReflectionRefused("acme/kitchen/main", "off", "reflection is off"), NOW)
    assert response.status == 409 and body(response) == {
        "detail": "conversation acme/kitchen/main: no reflection now: reflection is off", "reason": "off"}
