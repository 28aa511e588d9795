"""The codec for memory events: Belief v2, Recall, vectors as bytes, provenance format 2."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.codec import RECORD_FORMAT, decode, encode, event_to_record, to_json_ready, unpack
from mirror.events.envelope import make_event
from mirror.events.errors import CorruptEvent
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Provenance, Recall, ThinkerFailed, Turn
from mirror.events.vectors import dimensions, vector_from_bytes, vector_to_bytes
from mirror.replay import RecordedVectors

KEY = StreamKey("acme", "memory-1")
PROVENANCE = Provenance("gemma", "v1", "f00d", {"temperature": 0.7}, 1.0, 10, 5, "the answer")


def pack(record: Any) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def record_of(payload: Any, *, schema: int, fmt: int = RECORD_FORMAT, provenance: Any = None, kind: str = "belief") -> dict[str, Any]:
    return {
        "f": fmt, "tenant": "acme", "conversation": "memory-1", "branch": "main", "seq": 3, "type": kind,
        "schema": schema, "ts": 1_600_000_000.0, "turn": 1, "causation": None, "payload": payload,
        "provenance": provenance,
    }


@given(
    belief_id=st.text(max_size=10),
    operation=st.sampled_from(["assert", "reinforce", "recall", "consistent", "contradict"]),
    statement=st.text(max_size=20),
    related=st.lists(st.text(max_size=5), max_size=3),
)
@settings(max_examples=100, deadline=None)
def test_any_v1_belief_upcasts_to_v2_with_empty_memory_fields(
    belief_id: str, operation: str, statement: str, related: list[str]
) -> None:
    v1 = {"belief_id": belief_id, "operation": operation, "statement": statement, "memory_type": "emotional",
          "confidence": 0.7, "related": related}
    event = decode(pack(record_of(v1, schema=1, fmt=1)))
    assert event.payload == Belief(belief_id, operation, statement, "emotional", 0.7, tuple(related))  # type: ignore[arg-type]
    assert (event.payload.about, event.payload.kind, event.payload.source_turn, event.payload.embedding) == ("", "belief", None, b"")
    assert event.schema_version == 2


def test_a_recall_round_trips_with_tuples_all_the_way_down() -> None:
    recall = Recall("nuts?", vector_to_bytes([0.5, 0.25]), "minilm", "ab" * 32, ("b1", "b0"), ("rv-1",),
                    (("nuts", "cause", "rash"), ("rash", "needs", "cream")))
    decoded = decode(encode(make_event(KEY, 1, recall, timestamp=1.0))).payload
    assert decoded == recall
    assert type(decoded.edges) is tuple and all(type(edge) is tuple for edge in decoded.edges)
    assert vector_from_bytes(decoded.query_embedding) == (0.5, 0.25)


def test_bytes_are_checked_as_bytes() -> None:
    payload = {"belief_id": "b", "operation": "assert", "embedding": "not bytes"}
    with pytest.raises(CorruptEvent, match="embedding"):
        decode(pack(record_of(payload, schema=2)))
    with pytest.raises(CorruptEvent, match="edges"):
        decode(pack(record_of({"query": "q", "edges": [["a", "b"]]}, schema=1, kind="recall")))


def test_memory_stage_failures_are_thinker_failed_events() -> None:
    event = make_event(KEY, 1, ThinkerFailed("memory", "bad_response", "unparsable", 2, 0), timestamp=1.0)
    assert decode(encode(event)).payload.stage == "memory"


# ------------------------------------------------------------------------------ provenance


def test_format_1_provenance_reads_with_the_response_kept() -> None:
    provenance = {name: value for name, value in event_to_record(make_event(KEY, 1, Turn("a", "b"), provenance=PROVENANCE, timestamp=1.0))["provenance"].items() if name != "response_digest"}
    event = decode(pack(record_of({"user_message": "a", "reply": "b"}, schema=2, fmt=1, provenance=provenance, kind="turn")))
    assert event.provenance == PROVENANCE
    assert not event.provenance.response_in_payload


def test_format_1_cannot_claim_the_format_2_digest() -> None:
    provenance = {"model": "m", "prompt_set": "p", "request_fingerprint": "f", "response_digest": "00ff"}
    with pytest.raises(CorruptEvent, match="format-1"):
        decode(pack(record_of({"user_message": "a", "reply": "b"}, schema=2, fmt=1, provenance=provenance, kind="turn")))


def test_a_provenance_cannot_hold_the_response_and_point_at_the_payload() -> None:
    provenance = {"model": "m", "prompt_set": "p", "request_fingerprint": "f", "response": "b", "response_digest": "00ff"}
    with pytest.raises(CorruptEvent, match="also says"):
        decode(pack(record_of({"user_message": "a", "reply": "b"}, schema=2, provenance=provenance, kind="turn")))


def test_a_compact_provenance_round_trips() -> None:
    compact = Provenance("gemma", "v1", "f00d", {}, 1.0, 10, 5, None, response_digest="0123456789abcdef")
    event = make_event(KEY, 1, Turn("a", "b"), provenance=compact, timestamp=1.0)
    assert decode(encode(event)) == event
    assert unpack(encode(event))["f"] == 2


# ------------------------------------------------------------------------------------ json


def test_json_ready_records_carry_vectors_as_base64() -> None:
    vector = vector_to_bytes([1.0, -2.0])
    event = make_event(KEY, 1, Belief("b", "assert", "x", embedding=vector), timestamp=1.0)
    ready = json.loads(json.dumps(to_json_ready(event)))
    assert base64.b64decode(ready["payload"]["embedding"]) == vector


# ---------------------------------------------------------------------------------- vectors


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64))
@settings(max_examples=100, deadline=None)
def test_vectors_round_trip_as_little_endian_float32(values: list[float]) -> None:
    data = vector_to_bytes(values)
    assert len(data) == 4 * len(values) and dimensions(data) == len(values)
    assert vector_from_bytes(data) == tuple(values)


def test_vectors_are_little_endian_and_refuse_bad_input() -> None:
    assert vector_to_bytes([1.0]) == b"\x00\x00\x80\x3f"
    with pytest.raises(ValueError):
        vector_to_bytes([float("nan")])
    with pytest.raises(CorruptEvent):
        vector_from_bytes(b"\x00\x00\x80")


def test_recorded_vectors_answer_from_beliefs_and_recalls() -> None:
    statement, query = vector_to_bytes([1.0, 0.0]), vector_to_bytes([0.0, 1.0])
    log = [
        make_event(KEY, 1, Belief("b", "assert", "Ann is allergic to nuts", embedding=statement,
                                  embedding_model="minilm", embedding_fingerprint="aa"), timestamp=1.0),
        make_event(KEY, 2, Belief("b", "reinforce", "Ann is allergic to nuts"), timestamp=2.0),
        make_event(KEY, 3, Recall("nuts?", query, "minilm", "bb", ("b",)), timestamp=3.0),
    ]
    vectors = RecordedVectors(decode(encode(event)) for event in log)
    assert len(vectors) == 2
    assert vectors.by_fingerprint("aa") == statement and vectors.by_fingerprint("bb") == query
    assert vectors.by_text("minilm", "nuts?") == query
    assert vectors.by_text("other-model", "nuts?") is None  # another model's vector is another vector
    assert vectors.by_fingerprint("cc") is None
    assert (vectors.hits, vectors.misses) == (3, 2)
