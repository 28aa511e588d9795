"""The metrics' one module against the docs' table, what a batch of events counts, and `mirror top`'s arithmetic."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from mirror import metrics
from mirror.cli.top_view import Scrape, frame, quantile
from mirror.events.envelope import Event
from mirror.events.payloads import Monologue, Provenance, Reflection, ThinkerFailed, Turn

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """docs/operations.md's table: name → (type, labels)."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        found = re.match(r"\| `(mirror_\w+)` \| (\w+) \| ([^|]*) \|", line)
        if found:
            labels = tuple(re.findall(r"`(\w+)`", found.group(3)))
            rows[found.group(1)] = (found.group(2), labels)
    return rows


def test_the_docs_table_names_every_metric_with_its_type_and_labels() -> None:
    defined = {name: (kind, labels) for name, kind, labels, _ in metrics.catalogue()}
    assert _documented() == defined
    assert set(metrics.GENAI) <= set(defined)
    for name, kind, labels, _ in metrics.catalogue():
        assert "conversation" not in labels, f"{name}: a conversation id is never a label (unbounded series)"
        assert name.endswith("_total") == (kind == "counter"), name
        assert kind != "histogram" or name.endswith("_seconds"), name


def _event(seq: int, payload: object, provenance: Provenance | None) -> Event:
    return Event("acme", "c1", "main", seq, payload, 1.0, turn=0, provenance=provenance)  # type: ignore[arg-type]


def _value(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_appended_events_count_model_calls_by_stage_once_each_with_tokens() -> None:
    talker = Provenance("m", "default", "f-talker", latency_ms=120.0, prompt_tokens=30, completion_tokens=7)
    thought = Provenance("m", "default", "f-thought", latency_ms=300.0, prompt_tokens=50, completion_tokens=20)
    before = {stage: _value("mirror_model_call_duration_seconds_count", stage=stage) for stage in ("talker", "threads")}
    tokens = _value("mirror_model_tokens_total", tenant="acme", stage="threads", type="output")
    failed = _value("mirror_model_call_failures_total", stage="controller", error="timeout")
    rejected = _value("mirror_reflections_total", outcome="rejected")
    metrics.appended("acme", [
        _event(1, Turn("hi", "hello"), talker),
        _event(2, Monologue("r", "m", "g"), thought),
        _event(3, ThinkerFailed("controller", "timeout", "slow", 1, 0), None),
    ])
    metrics.appended("acme", [_event(4, Reflection("a portrait", accepted=False, reason="unsafe", for_turn=0), None)])
    assert _value("mirror_model_call_duration_seconds_count", stage="talker") == before["talker"] + 1
    assert _value("mirror_model_call_duration_seconds_count", stage="threads") == before["threads"] + 1
    assert _value("mirror_model_tokens_total", tenant="acme", stage="threads", type="output") == tokens + 20
    assert _value("mirror_model_call_failures_total", stage="controller", error="timeout") == failed + 1
    assert _value("mirror_reflections_total", outcome="rejected") == rejected + 1


def test_off_records_nothing() -> None:
    before = _value("mirror_turns_total", tenant="quiet", mind="mirror")
    metrics.configure(enabled=False)
    try:
        metrics.turn_done("quiet", "mirror", 10.0, 5.0)
        assert metrics.serve("127.0.0.1") is None
    finally:
        metrics.configure(enabled=True)
    assert _value("mirror_turns_total", tenant="quiet", mind="mirror") == before
    metrics.turn_done("quiet", "mirror", 10.0, 5.0)
    assert _value("mirror_turns_total", tenant="quiet", mind="mirror") == before + 1


def test_quantiles_interpolate_within_the_bucket_as_promql_does() -> None:
    buckets = {0.1: 50.0, 0.2: 100.0, float("inf"): 100.0}
    assert quantile(0.5, buckets) == 0.1
    assert abs(quantile(0.75, buckets) - 0.15) < 1e-9  # type: ignore[operator]
    assert quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def test_top_draws_tenants_and_stages_from_scraped_text() -> None:
    metrics.turn_done("top-tenant", "mirror", 40.0, 30.0)
    metrics.appended("top-tenant", [_event(1, Turn("hi", "hello"), Provenance("m", "d", "f-top", latency_ms=30.0))])
    scraped = Scrape(0.0)
    scraped.components["host"].append(True)
    for family in text_string_to_metric_families(metrics.exposition()[0].decode()):
        for sample in family.samples:
            if sample.name.startswith("mirror_"):
                scraped.add(sample.name, sample.labels, sample.value)
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(frame(scraped, None))
    text = console.export_text()
    assert "top-tenant" in text and "talker" in text and "host" in text
