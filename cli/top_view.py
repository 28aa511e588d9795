"""What ``mirror top`` draws: a running stack's metrics, per tenant, per stage, per component.

It is a small Prometheus of its own: it asks a gateway for every process serving metrics
(``GET /metrics/targets``), scrapes each (their text format, parsed by ``prometheus_client``),
sums the series over processes and draws three tables with Rich. Live, each frame shows the
last interval (turns/s; latency quantiles from the histograms' buckets over that interval); with
``--once`` it prints one frame of everything since the processes started, and exits.

Quantiles are estimated as PromQL's ``histogram_quantile`` does: linearly within the bucket the
rank falls in.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from rich.console import Group
from rich.table import Table

Key = tuple[str, tuple[tuple[str, str], ...]]
"""A series: its sample name and its labels (sorted), the process's own labels left out."""



@dataclass
class Scrape:
    """Every series of every process, summed over processes; which components answered."""

    at: float
    values: dict[Key, float] = field(default_factory=dict)
    components: dict[str, list[bool]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.values[key] = self.values.get(key, 0.0) + value

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: value for (sample, labels), value in self.values.items() if sample == name}


def scrape(gateway: str, http: httpx.Client) -> Scrape:
    """One scrape of every target the gateway lists."""
    from prometheus_client.parser import text_string_to_metric_families

    taken = Scrape(time.monotonic())
    for target in http.get(f"{gateway}/metrics/targets").raise_for_status().json():
        component = target["labels"].get("component", "?")
        for address in target["targets"]:
            try:
                text = http.get(f"http://{address}/metrics").raise_for_status().text
            except httpx.HTTPError:
                taken.components[component].append(False)
                continue
            taken.components[component].append(True)
            for family in text_string_to_metric_families(text):
                if family.name.startswith("mirror_"):
                    for sample in family.samples:
                        taken.add(sample.name, sample.labels, sample.value)
    return taken


def _delta(now: Scrape, before: Scrape | None, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``name``'s series over the interval (everything, without a previous scrape); a counter that
    went back (a process restarted) counts from zero."""
    current = now.series(name)
    if before is None:
        return current
    previous = before.series(name)
    return {labels: value - previous.get(labels, 0.0) if value >= previous.get(labels, 0.0) else value
            for labels, value in current.items()}


def _by(series: Mapping[tuple[tuple[str, str], ...], float], label: str, **only: str) -> dict[str, float]:
    """Summed by one label's value, keeping the series whose labels match ``only``."""
    summed: dict[str, float] = defaultdict(float)
    for labels, value in series.items():
        named = dict(labels)
        if all(named.get(key) == wanted for key, wanted in only.items()):
            summed[named.get(label, "")] += value
    return summed


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """``histogram_quantile(q, …)`` of cumulative ``{upper bound: count}``; None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


def _quantiles(now: Scrape, before: Scrape | None, histogram: str, label: str) -> dict[str, tuple[float | None, ...]]:
    """(p50, p99) of ``histogram`` per value of ``label``, over the interval."""
    grouped: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in _delta(now, before, f"{histogram}_bucket").items():
        named = dict(labels)
        grouped[named.get(label, "")][float(named["le"])] += value
    return {key: (quantile(0.5, buckets), quantile(0.99, buckets)) for key, buckets in grouped.items()}


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.1f}"


def frame(now: Scrape, before: Scrape | None) -> Group:
    """The three tables: per tenant, per stage, per component."""
    span = None if before is None else max(now.at - before.at, 1e-9)
    turns = _by(_delta(now, before, "mirror_turns_total"), "tenant")
    failures = _by(_delta(now, before, "mirror_turn_failures_total"), "tenant")
    limits = _by(_delta(now, before, "mirror_limits_hit_total"), "tenant")
    latency = _quantiles(now, before, "mirror_turn_duration_seconds", "tenant")
    overhead = _quantiles(now, before, "mirror_turn_overhead_seconds", "tenant")
    first = _quantiles(now, before, "mirror_time_to_first_token_seconds", "tenant")
    backlog = _by(now.series("mirror_model_calls_waiting"), "tenant", priority="thinker")
    tenants = Table(title="tenants" + ("" if span is None else f" (last {span:.1f} s)"), title_justify="left")
    for column in ("tenant", "turns" if span is None else "turns/s", "p50 ms", "p99 ms", "overhead p50 ms",
                   "TTFT p50 ms", "thinking backlog", "errors", "limits hit"):
        tenants.add_column(column, justify="left" if column == "tenant" else "right", no_wrap=column == "tenant")
    for tenant in sorted(set(turns) | set(failures) | set(backlog) | set(limits)):
        count = turns.get(tenant, 0.0)
        p50, p99 = latency.get(tenant, (None, None))
        tenants.add_row(tenant, f"{count:.0f}" if span is None else f"{count / span:.2f}", _ms(p50), _ms(p99),
                        _ms(overhead.get(tenant, (None,))[0]), _ms(first.get(tenant, (None,))[0]),
                        f"{backlog.get(tenant, 0):.0f}", f"{failures.get(tenant, 0):.0f}", f"{limits.get(tenant, 0):.0f}")

    calls = _by(_delta(now, before, "mirror_model_call_duration_seconds_count"), "stage")
    model = _quantiles(now, before, "mirror_model_call_duration_seconds", "stage")
    tokens = _delta(now, before, "mirror_model_tokens_total")
    stage_failures = _by(_delta(now, before, "mirror_model_call_failures_total"), "stage")
    stages = Table(title="model calls by stage", title_justify="left")
    for column in ("stage", "calls" if span is None else "calls/s", "p50 ms", "p99 ms", "tokens in", "tokens out",
                   "failures"):
        stages.add_column(column, justify="left" if column == "stage" else "right", no_wrap=column == "stage")
    for stage in sorted(set(calls) | set(stage_failures)):
        count = calls.get(stage, 0.0)
        p50, p99 = model.get(stage, (None, None))
        stages.add_row(stage, f"{count:.0f}" if span is None else f"{count / span:.2f}", _ms(p50), _ms(p99),
                       f"{_by(tokens, 'stage', type='input').get(stage, 0):.0f}",
                       f"{_by(tokens, 'stage', type='output').get(stage, 0):.0f}",
                       f"{stage_failures.get(stage, 0):.0f}")

    components = Table(title="components", title_justify="left")
    for column in ("component", "processes up", "figures"):
        components.add_column(column)
    lag = _by(now.series("mirror_ingest_lag_messages"), "shard")
    live = sum(now.series("mirror_conversations_live").values())
    thinking = sum(now.series("mirror_conversations_thinking").values())
    said = {"host": f"{live:.0f} live, {thinking:.0f} thinking",
            "ingester": ", ".join(f"shard {shard}: lag {value:.0f}" for shard, value in sorted(lag.items()))}
    for component, answers in sorted(now.components.items()):
        components.add_row(component, f"{sum(answers)}/{len(answers)}", said.get(component, ""))
    return Group(tenants, stages, components)


__all__ = ["Scrape", "frame", "quantile", "scrape"]
