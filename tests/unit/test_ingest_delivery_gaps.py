"""The ingester's decode step: a jump in the consumer's delivery count is a delivery that never
arrived (a consumer leader that moved or died mid-flight). Nothing after it may be decoded or
acknowledged — with AckAll, acknowledging a later message acknowledges the missing one too, and
an acknowledged turn would be lost — and the consumer is made again from the committed offset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.events.codec import encode
from mirror.events.duckdb.ingester import Ingester
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.nats._client import MirrorNatsClient
from mirror.events.payloads import Turn

KEY = StreamKey("acme", "talk", "main")


def delivery(seq: int, stream_seq: int, delivered: int) -> tuple[bytes, bytes, bytes, bytes | None]:
    data = encode(make_event(KEY, seq, Turn(f"hello {seq}", f"hi {seq}"), turn=seq, timestamp=1000.0 + seq))
    reply = f"$JS.ACK.MIRROR.ingest-0.1.{stream_seq}.{delivered}.1700000000000000000.0".encode()
    return b"mirror.acme.talk.main", reply, data, None  # no headers: traces off


@pytest.fixture
def ingester(tmp_path: Path) -> Iterator[Ingester]:
    event_log = DuckDBEventLog(tmp_path / "log.duckdb")
    yield Ingester(MirrorNatsClient(), event_log)
    event_log.close_sync()


def test_deliveries_in_order_are_decoded_and_the_last_is_acknowledged(ingester: Ingester) -> None:
    decoded = ingester._decode([delivery(1, 10, 1), delivery(2, 11, 2), delivery(3, 14, 3)])
    assert decoded is not None and decoded.newest == 14 and len(decoded.batch) == 3
    assert decoded.ack_subject.split(b".")[5] == b"14" and ingester._reconsume is None


def test_a_missing_delivery_cuts_the_batch_before_it_and_asks_for_the_consumer_again(ingester: Ingester) -> None:
    decoded = ingester._decode([delivery(1, 10, 1), delivery(2, 11, 2), delivery(4, 13, 4), delivery(5, 14, 5)])
    assert decoded is not None and decoded.newest == 11 and len(decoded.batch) == 2
    assert decoded.ack_subject.split(b".")[5] == b"11"  # never past the gap
    assert ingester._reconsume is not None and "3..3" in ingester._reconsume


def test_a_gap_at_the_first_message_decodes_nothing(ingester: Ingester) -> None:
    assert ingester._decode([delivery(1, 10, 1)]) is not None
    assert ingester._decode([delivery(3, 12, 3)]) is None and ingester._decoded_offset == 10


def test_a_redelivery_counts_as_a_delivery_not_a_gap(ingester: Ingester) -> None:
    first = ingester._decode([delivery(1, 10, 1), delivery(2, 11, 2)])
    again = ingester._decode([delivery(2, 11, 3), delivery(3, 12, 4)])  # 11 redelivered as delivery 3
    assert first is not None and again is not None and ingester._reconsume is None
    assert len(again.batch) == 1 and again.newest == 12
