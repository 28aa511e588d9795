"""The simulator's CuRaTe judge, in process: a pure rule on the judge's message (answered by the real
server: ``tests/system/test_sim_curate.py``)."""

from __future__ import annotations

from mirror.harness.evals.curate.judge import judge_message
from mirror.sim import curate as sim_curate
from tests.support.judge_cases import ANSWERS, CONSTRAINT, QUESTION


def test_the_rule_rates_0_1_and_2() -> None:
    for expected, answer in ANSWERS.items():
        verdict = sim_curate.rating_for(CONSTRAINT, answer)
        assert verdict["rating"] == expected, (answer, verdict)
        assert verdict["rationale"].endswith(".")


def test_sections_are_read_from_the_judge_message() -> None:
    found = sim_curate.sections(judge_message(CONSTRAINT, QUESTION, "line one\nANSWER: is not a header here"))
    assert found == {"CONSTRAINT": CONSTRAINT, "QUESTION": QUESTION, "ANSWER": "line one\nANSWER: is not a header here"}
    assert sim_curate.answer({"type": "json_schema", "json_schema": {"name": "other"}}, "CONSTRAINT:\nx\nANSWER:\ny") is None
