"""One copy of each model output, in process: when a provenance keeps the raw answer and when a
digest stands in for it, and the responses rebuilt from payloads. Whole conversations through the
real pipeline and the simulator, verified in both storage forms, are in
``tests/system/test_one_copy.py``.
"""

from __future__ import annotations

from dataclasses import replace

from mirror.cognition.responses import one_copy, response_digest, response_from_payload
from mirror.events.payloads import Monologue, Provenance, ThinkerFailed, Turn

RAW = Provenance("m", "p", "f00d", {}, 1.0, 1, 1, "  the answer \n")


# ------------------------------------------------------------------------------- one_copy


def test_an_answer_that_parses_back_to_the_payload_is_not_kept() -> None:
    turn = Turn("hi", "the answer")
    compact = one_copy(turn, RAW, lambda text: replace(turn, reply=text.strip()))
    assert compact == replace(RAW, response=None, response_digest=response_digest("the answer"))
    assert one_copy(turn, compact, lambda text: turn) == compact  # idempotent


def test_an_answer_the_payload_cannot_give_back_is_kept() -> None:
    turn = Turn("hi", "the answer")
    assert one_copy(turn, RAW, lambda text: replace(turn, reply=text.upper())) == RAW  # parses elsewhere

    def refuse(text: str) -> Turn:
        raise ValueError("unusable")

    assert one_copy(turn, RAW, refuse) == RAW
    failure = ThinkerFailed("monologue", "bad_response", "not JSON")
    assert one_copy(failure, RAW, lambda text: failure) == RAW  # the raw answer is the evidence
    no_answer = replace(RAW, response=None)
    assert one_copy(turn, no_answer, lambda text: turn) == no_answer


def test_the_monologue_rebuilds_as_the_json_its_schema_asks_for() -> None:
    assert response_from_payload(Monologue("r", "m", "g")) == '{"reasoning": "r", "memory": "m", "goal": "g"}'
    assert response_from_payload(ThinkerFailed("talker", "x", "y")) is None
