"""The recompute report as a person reads it (``summary``): what this run re-thought — nothing, when
the branch was already complete — and the branch's diff, item by item. Pure: report dicts in, text out."""

from __future__ import annotations

from typing import Any

import pytest

from mirror.actors.recompute_driver import persona_prompt_set_with, summary
from mirror.cognition.persona.prompting import PERSONA_TEMPLATES, default_persona_prompts
from mirror.replay import RecomputeError


def report(**result: Any) -> dict[str, Any]:
    one = {"conversation": "lookback", "parent_branch": "main", "branch": "rc-0123456789ab", "fork_seq": 0,
           "turns": 4, "resumed_at_turn": 0, "events_written": 17, "model_calls": 4, "embedding_calls": 0,
           "recorded_answers": 12, "diff": None, "replies": None, "error": None, **result}
    return {"tenant": "default", "branch": one["branch"], "prompt_set": "custom-0123456789ab", "from_seq": 1,
            "mode": None, "counterfactual": False, "conversations": 1, "completed": 1, "failed": 0,
            "model_calls": one["model_calls"], "recorded_answers": one["recorded_answers"],
            "events_written": one["events_written"], "seconds": 0.5, "results": [one]}


def test_a_re_run_of_a_complete_branch_says_nothing_was_re_thought() -> None:
    text = summary(report(resumed_at_turn=4, events_written=0, model_calls=0, recorded_answers=0))
    assert "- lookback: nothing re-thought: branch rc-0123456789ab was already complete (4 turn(s))" in text
    assert "re-thought (resumed" not in text and "4 turn(s) re-thought" not in text


def test_a_fresh_and_a_resumed_run_count_what_they_re_thought() -> None:
    assert "- lookback: 4 turn(s) re-thought (17 event(s) written)" in summary(report())
    resumed = summary(report(resumed_at_turn=1, events_written=9))
    assert "- lookback: 3 of 4 turn(s) re-thought, resumed after the 1 an earlier run did (9 event(s) written)" in resumed
    # The last turn appended before an interruption, its thinking not: the run still wrote something.
    assert ("- lookback: no turn re-thought: all 4 were on the branch; finished the thinking an earlier run left "
            "(3 event(s) written)") in summary(report(resumed_at_turn=4, events_written=3))


def test_the_branch_diff_lists_its_beliefs_not_just_counts() -> None:
    change = {"source": "main@9", "target": "rc-0123456789ab@9", "changed": True, "narrative_changed": False,
              "beliefs_added": [{"belief_id": "b-1", "statement": "The user is allergic to peanuts",
                                 "kind": "belief", "memory_type": "standard", "confidence": 0.6}]}
    text = summary(report(diff=change))
    assert "  main@9 → rc-0123456789ab@9\n    beliefs added (1):\n      + b-1  The user is allergic to peanuts" in text
    assert "beliefs added: 1" not in text


def test_persona_templates_of_a_recompute_replace_the_built_in_ones_by_name() -> None:
    built_in = default_persona_prompts()
    assert persona_prompt_set_with({}) is None  # nothing changed: the plan keeps the built-in set
    assert persona_prompt_set_with(dict(built_in.templates)) is None  # the built-in texts sent back change nothing
    changed = persona_prompt_set_with({"appraisal.md": built_in.templates["appraisal.md"] + "\nBe brief.\n"})
    assert changed is not None and changed.version.startswith("persona-") and changed.version != built_in.version
    assert {name for name in PERSONA_TEMPLATES if changed.templates[name] != built_in.templates[name]} == {"appraisal.md"}
    with pytest.raises(RecomputeError, match="unknown persona template"):
        persona_prompt_set_with({"apraisal.md": "typo"})
    with pytest.raises(RecomputeError, match="empty"):
        persona_prompt_set_with({"plan.md": "  "})
    with pytest.raises(RecomputeError, match="placeholder"):
        persona_prompt_set_with({"plan.md": "a $ sign alone"})


def test_a_persona_recompute_names_the_persona_prompt_set_it_ran_with() -> None:
    plain = summary(report())
    assert "(prompt set custom-0123456789ab)" in plain and "persona prompt set" not in plain
    persona = summary({**report(), "persona_prompt_set": "persona-0123456789ab"})
    assert "(prompt set custom-0123456789ab, persona prompt set persona-0123456789ab)" in persona
