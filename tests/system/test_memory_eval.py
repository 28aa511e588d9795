"""The memory eval with the simulator's embeddings (through a real loopback simulator and
``OpenAIEmbedder``, started by the eval itself): the figures have the promised shape (the data
set alone: ``tests/unit/test_memory_eval.py``)."""

from __future__ import annotations

from mirror.harness.evals.memory import ReflectionEvalSettings, load_dialogues, run_memory_eval, run_memory_evals

RETRIEVERS = ("keyword", "vector", "fused")


def test_the_eval_with_simulator_embeddings_reports_three_recall_figures() -> None:
    report = run_memory_eval("sim")
    assert report["embedder"] == "sim" and report["model"] == "mirror-sim"
    assert report["dialogues"] == len(load_dialogues())
    assert set(report["recall_at_5"]) == set(RETRIEVERS)
    assert all(0.0 <= value <= 1.0 for value in report["recall_at_5"].values())
    assert report["fused_beats_both"] == (
        report["recall_at_5"]["fused"] > max(report["recall_at_5"]["keyword"], report["recall_at_5"]["vector"])
    )
    assert all(miss["fused"] < 1.0 for miss in report["fused_misses"])
    assert run_memory_eval("sim")["recall_at_5"] == report["recall_at_5"]  # deterministic end to end


def test_several_embedders_give_their_figures_side_by_side() -> None:
    report = run_memory_evals(("sim",))
    assert set(report["figures"]) == {f"sim_{name}_recall_at_5" for name in RETRIEVERS}
    assert report["figures"]["sim_fused_recall_at_5"] == report["runs"]["sim"]["recall_at_5"]["fused"]


def test_the_reflection_column_scores_what_the_projection_still_holds_after_the_simulator_reflected() -> None:
    report = run_memory_eval("sim", ReflectionEvalSettings())
    column = report["reflection"]
    assert column["llm"] == "sim" and column["model"] == "mirror-sim" and not column["failed"]
    assert column["recall_at_5_before"] == report["recall_at_5"]  # the beliefs recall as the eval's items do
    # 40 turns on, the simulator (a careless model) proposes to forget every belief: the rules keep
    # the safety constraints alone.
    items = sum(len(dialogue.items()) for dialogue in load_dialogues())
    assert column["decisions"] == items and column["proposed"] == {"forget": items}
    assert column["overruled_by_rule"].get("protected", 0) == column["applied"]["retain"] > 0
    assert all(column["recall_at_5_after"][name] < column["recall_at_5_before"][name] for name in RETRIEVERS)
    allergy = next(lost for lost in column["lost"] if lost["dialogue"] == "peanut-allergy")
    epipen = next(item_id for item_id, text in next(d for d in load_dialogues() if d.dialogue_id == "peanut-allergy").items()
                  if "EpiPen" in text)
    assert epipen not in allergy["needed_forgotten"]


def test_a_reflection_before_beliefs_age_decides_nothing_and_keeps_every_fact() -> None:
    report = run_memory_evals(("sim",), ReflectionEvalSettings(turns_after=0))
    column = report["runs"]["sim"]["reflection"]
    assert column["decisions"] == 0 and not column["lost"] and not column["failed"]
    assert column["recall_at_5_after"] == column["recall_at_5_before"] == report["runs"]["sim"]["recall_at_5"]
    assert report["reflection_figures"] == {f"sim_{name}_recall_at_5_{when}": column[f"recall_at_5_{when}"][name]
                                            for name in RETRIEVERS for when in ("before", "after")}
