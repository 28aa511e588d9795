"""Order statistics the benchmarks report, computed one way so their p50/p90/p99 compare."""

from __future__ import annotations


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the value at ``share`` of the sorted values (no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
