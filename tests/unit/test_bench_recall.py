"""`mirror bench recall` at a small size: the report has every figure, and they are sane."""

from __future__ import annotations

import pytest

from mirror.harness.bench.recall import run_recall_bench


def test_the_recall_bench_reports_latency_scaling_and_build_costs() -> None:
    report = run_recall_bench(beliefs=400, edges=300, queries=20, rounds=1)
    assert report["beliefs"] == 400 and report["edges"] == 300
    assert 0.0 < report["p50_ms"] <= report["p99_ms"]
    assert 0.0 < report["p50_ms_100"] <= report["p99_ms_100"]
    assert report["ratio_10k_vs_100"] == pytest.approx(report["p50_ms"] / report["p50_ms_100"], rel=0.02)
    assert report["index_build_ms"] > 0 and report["add_one_belief_ms"] > 0 and report["bm25s_rebuild_ms"] > 0
    assert report["sample_recall"]["items"] == 5
