"""``mirror bench lifecycle`` at a small size, on its real nats-server and ingester: every
event exported is imported, each erase finishes, a tenant's conversations share one fresh copy
of the file, and forgets asked at once share copies where one at a time pays one each (~15 s)."""

from __future__ import annotations

from mirror.harness.bench.lifecycle import LifecycleBenchConfig, run_lifecycle_bench


def test_the_lifecycle_bench_measures_the_product_path() -> None:
    result = run_lifecycle_bench(LifecycleBenchConfig(conversation_events=50, tenant_conversations=3,
                                                      background_events=500, batch=25))
    assert result["export"]["events"] == result["import"]["events"] == 150
    assert result["export"]["bytes"] == result["import"]["bytes"] > 0
    assert result["erase_tenant"]["events"] == 150 and result["erase_conversation"]["events"] == 50
    assert result["fresh_copies"] == 2  # the conversation's, then one for the tenant's three
    batching = result["batching"]
    assert batching["one_at_a_time"]["fresh_copies"] == 5
    assert batching["asked_together"]["fresh_copies"] < 5
    assert result["raw_fresh_copy"]["bytes"] > 0 and result["raw_fresh_copy"]["s"] > 0
