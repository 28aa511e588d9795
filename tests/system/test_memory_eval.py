"""The memory eval with the simulator's embeddings (through a real loopback simulator and
``OpenAIEmbedder``, started by the eval itself): the figures have the promised shape (the data
set alone: ``tests/unit/test_memory_eval.py``)."""

from __future__ import annotations

from mirror.harness.evals.memory import load_dialogues, run_memory_eval, run_memory_evals

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
