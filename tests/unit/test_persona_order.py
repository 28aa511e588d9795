"""The order experiment's pure parts: which scripts run, and the per-order summary."""

from __future__ import annotations

from typing import Any

from mirror.harness.evals.persona_order.run import summarise
from mirror.harness.evals.persona_order.scripts import SCRIPTS, chosen


def test_scripts_are_taken_in_order_cut_to_the_turns_and_repeated_under_new_names() -> None:
    picked = chosen(len(SCRIPTS) + 1, 2)
    assert [name for name, _ in picked] == [*(s.name for s in SCRIPTS), f"{SCRIPTS[0].name}-2"]
    assert all(len(messages) == 2 for _, messages in picked)
    assert chosen(1, None)[0][1] == SCRIPTS[0].messages


def test_the_summary_counts_judged_turns_and_the_bias_is_the_rate_difference() -> None:
    rows: list[dict[str, Any]] = [{"order": "appraisal_first", "expressed": True}, {"order": "appraisal_first", "expressed": True},
            {"order": "plan_first", "expressed": True}, {"order": "plan_first", "expressed": False},
            {"order": "plan_first", "error": "the judge failed"}]
    summary = summarise(rows)
    assert summary["orders"]["appraisal_first"] == {"turns": 2, "judged": 2, "expressed": 2, "rate": 1.0, "failed": 0}
    assert summary["orders"]["plan_first"] == {"turns": 3, "judged": 2, "expressed": 1, "rate": 0.5, "failed": 1}
    assert summary["rational_bias"] == 0.5
    assert summarise([])["rational_bias"] is None
