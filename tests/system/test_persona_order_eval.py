"""`mirror eval persona-order` end to end with the simulator: an embedded stack, both orders of two
scripted conversations of three turns, every turn judged through Mirror's own client."""

from __future__ import annotations

import json

import pytest

from tests.system.test_client_commands import mirror


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_persona_order_runs_both_orders_and_judges_every_turn(tmp_path) -> None:
    result = mirror("eval", "persona-order", "--llm", "sim", "--conversations", "2", "--turns", "3",
                    "--stack-data", str(tmp_path / "stack"), "--json", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["persona"] == "Wren Halloway" and summary["failed"] == []
    for order in ("appraisal_first", "plan_first"):
        counts = summary["orders"][order]
        assert counts["turns"] == counts["judged"] == 6 and counts["rate"] == round(counts["expressed"] / 6, 4)
    verdicts = summary["verdicts"]
    assert len(verdicts) == 12 and {v["script"] for v in verdicts} == {"loss", "threat"}
    assert all(v["appraisal"].startswith("I feel ") and v["appraised_emotion"] and set(v["steps_ms"]) ==
               {"think", "retrieval", "appraisal", "plan", "formulation"} for v in verdicts)
    # The simulator's plan, written after the appraisal, means to show the feeling: its reply always says it.
    assert summary["orders"]["appraisal_first"]["rate"] == 1.0
    assert summary["rational_bias"] == round(1.0 - summary["orders"]["plan_first"]["rate"], 4)
    assert any("check the pipeline" in note for note in summary["notes"])


def test_a_bad_persona_or_option_is_one_line_and_status_2(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = mirror("eval", "persona-order", "--persona", str(bad), "--json")
    assert result.returncode == 2 and "bad.json" in result.stderr, result.stderr
    refused = mirror("eval", "persona-order", "--url", "http://127.0.0.1:9", "--token", "t", "--json")
    assert refused.returncode == 2 and "--judge" in refused.stderr, refused.stderr
