"""The ingest transaction's two ways in: a small batch as one parameterised ``INSERT … VALUES``,
a larger one as an Arrow table (:data:`mirror.events.duckdb.log.VALUES_ROWS`). Both must store
the same rows, drop the same late writes to forgotten conversations, and sort a redelivered
batch the same way (copies skipped, divergent versions kept aside, new events committed)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from mirror.events.codec import encode
from mirror.events.duckdb._ingest_batch import IngestBatch
from mirror.events.duckdb.log import VALUES_ROWS, DuckDBEventLog
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Turn

LIVE = StreamKey("acme", "live")
GONE = StreamKey("acme", "gone")


def turn(key: StreamKey, seq: int, tag: str = "") -> Event:
    return make_event(key, seq, Turn(f"hello {seq}{tag}", f"hi {seq}{tag}"), turn=seq, timestamp=1000.0 + seq)


def batch_of(events: list[Event], first_stream_seq: int) -> IngestBatch:
    batch = IngestBatch()
    for stream_seq, event in enumerate(events, start=first_stream_seq):
        batch.add(encode(event), stream_seq, f"mirror.{event.tenant}.{event.conversation}.main")
    return batch


def rows(path: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT tenant, conversation, branch, seq, event_id, type, schema_version, ts, turn, "
                           "stream_seq, data FROM events ORDER BY conversation, seq").fetchall()


@pytest.mark.parametrize("size", [1, VALUES_ROWS, VALUES_ROWS + 1, 3 * VALUES_ROWS])
async def test_either_insert_stores_the_rows_and_drops_late_writes_to_a_forgotten_conversation(
    tmp_path: Path, size: int
) -> None:
    log = DuckDBEventLog(tmp_path / "log.duckdb")
    await log.forget(GONE.tenant, GONE.conversation)
    live = [turn(LIVE, seq) for seq in range(1, size + 1)]
    late = [turn(GONE, 1)]
    result = await log.commit_batch("ingest-0", "MIRROR", size + 1, batch_of([*live[:1], *late, *live[1:]], 1))
    await log.close()
    assert result.inserted == size
    expected = batch_of([*live[:1], *late, *live[1:]], 1).table().to_pylist()
    assert rows(tmp_path / "log.duckdb") == [tuple(row.values()) for row in expected if row["conversation"] == "live"]


@pytest.mark.parametrize("size", [2, VALUES_ROWS + 2])
async def test_either_insert_sorts_a_batch_that_clashes_with_the_log(tmp_path: Path, size: int) -> None:
    log = DuckDBEventLog(tmp_path / "log.duckdb")
    events = [turn(LIVE, seq) for seq in range(1, size + 1)]
    await log.commit_batch("ingest-0", "MIRROR", 2, batch_of(events[:2], 1))
    again = [events[0], turn(LIVE, 2, tag="-divergent"), *events[2:]]  # a copy, another version, the new ones
    result = await log.commit_batch("ingest-0", "MIRROR", 2 + len(again), batch_of(again, 3))
    rejected = await log.rejected()
    assert await log.committed_offset("ingest-0") == 2 + len(again)
    await log.close()
    assert (result.inserted, result.duplicates, result.rejected) == (size - 2, 1, 1)
    assert [seq for *_, seq in [row[:4] for row in rows(tmp_path / "log.duckdb")]] == list(range(1, size + 1))
    assert [(stream_seq, "divergent duplicate of acme/live/main#2" in error) for stream_seq, _, error in rejected] == [(4, True)]
