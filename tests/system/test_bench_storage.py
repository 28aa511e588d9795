"""`mirror bench storage` at 3 turns: both runs report every figure, and only memory writes beliefs.

Real parts throughout (nats-server, the ingester process, the simulator, the Conversation), so
the bytes checked are the ones the ingester committed to DuckDB.
"""

from __future__ import annotations

import json

from mirror.harness.bench.storage import StorageBenchConfig, run_storage_bench

RUN_FIELDS = {
    "memory", "thinking_unfinished", "log_caught_up", "seconds", "last_seq", "events", "events_by_type",
    "bytes", "bytes_per_turn", "bytes_per_turn_by_type", "model_output_chars_per_turn", "bytes_per_output_char",
    "raw_response_chars_per_turn", "vector_bytes", "vector_bytes_by_type", "vector_share", "belief_operations",
    "beliefs_with_vector", "snapshots", "snapshot_bytes", "file_bytes", "empty_file_bytes", "file_bytes_per_turn",
}


def test_the_storage_bench_measures_both_runs_from_the_log_file() -> None:
    report = json.loads(json.dumps(run_storage_bench(StorageBenchConfig(turns=3))))
    assert report["turns"] == 3 and report["mode"] == "full"
    off, on = report["memory_off"], report["memory_on"]
    for run in (off, on):
        assert set(run) == RUN_FIELDS
        assert run["thinking_unfinished"] == 0 and run["log_caught_up"]
        assert run["events"] == run["last_seq"] == sum(run["events_by_type"].values())
        assert run["events_by_type"]["turn"] == 3
        assert run["bytes"] > 0 and run["bytes_per_turn"] == round(run["bytes"] / 3)
        assert abs(sum(run["bytes_per_turn_by_type"].values()) - run["bytes_per_turn"]) <= len(run["events_by_type"])
        assert run["model_output_chars_per_turn"] > 0
        assert run["file_bytes"] >= run["empty_file_bytes"] > 0
    assert "belief" not in off["events_by_type"] and "memory_step" not in off["events_by_type"]
    assert off["vector_bytes"] == 0 and off["vector_share"] == 0
    assert on["events_by_type"]["belief"] > 0 and on["events_by_type"]["memory_step"] == 3
    assert on["vector_bytes_by_type"]["belief"] == on["beliefs_with_vector"] * 384 * 4
    assert 0 < on["vector_share"] < 1
    assert report["memory_added_bytes_per_turn"] == on["bytes_per_turn"] - off["bytes_per_turn"] > 0
