"""docs/grafana/mirror.json names only metrics Mirror exposes (:func:`mirror.metrics.catalogue`):
a renamed metric fails here, not as an empty panel on an operator's screen."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mirror.metrics import catalogue

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "mirror.json"
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
PROMQL_WORDS = frozenset({"sum", "by", "rate", "histogram_quantile", "max", "le", "label_values", "without", "irate",
                          "increase", "avg", "min", "on", "ignoring"})


def exposed() -> set[str]:
    names = set()
    for name, kind, _, _ in catalogue():
        names.add(name)
        if kind == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SERIES)
    return names


def expressions() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    found = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    # Grafana's label_values(METRIC, LABEL): the metric is the first argument.
    found += [variable["query"].split(",")[0] + ")" for variable in board["templating"]["list"]
              if variable["type"] == "query"]
    return found


def metric_names(expression: str) -> set[str]:
    """The identifiers of ``expression`` that are metric names: not inside a label matcher's
    braces or a string, not a function or keyword, not a ``$variable``."""
    bare = re.sub(r'"[^"]*"', "", expression)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = re.sub(r"\bby \([^)]*\)", "", bare)
    return {word for word in re.findall(r"(?<![$\w])[a-zA-Z_:][\w:]*", bare) if word not in PROMQL_WORDS}


def test_every_expression_names_only_metrics_in_the_catalogue() -> None:
    known = exposed()
    named = set()
    for expression in expressions():
        names = metric_names(expression)
        assert names, f"no metric in {expression!r}"
        assert names <= known, f"{expression!r} names {sorted(names - known)}, not in mirror/metrics.py"
        named |= names
    # The panels: turn latency, TTFT, model time by stage, backlog, ingest lag, errors, limits.
    for wanted in ("mirror_turn_duration_seconds_bucket", "mirror_time_to_first_token_seconds_bucket",
                   "mirror_model_call_duration_seconds_sum", "mirror_model_calls_waiting", "mirror_ingest_lag_messages",
                   "mirror_turn_failures_total", "mirror_limits_hit_total"):
        assert wanted in named, wanted


def test_the_check_itself_catches_a_name_not_in_the_catalogue() -> None:
    assert metric_names('sum by (tenant) (rate(mirror_turnz_total{tenant=~"$tenant"}[5m]))') == {"mirror_turnz_total"}
    assert "mirror_turnz_total" not in exposed()
