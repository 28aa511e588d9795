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
from mirror.events.envelope import Event, make_event
from mirror.events.errors import CorruptEvent
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, PersonaChosen, Provenance, Recall, ThinkerFailed, Turn
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
    decoded = decode(encode(event)).payload
    assert isinstance(decoded, ThinkerFailed) and decoded.stage == "memory"


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


def test_json_ready_records_carry_a_tuple_of_vectors_as_base64_texts() -> None:
    vectors = (vector_to_bytes([1.0]), vector_to_bytes([0.5, 0.25]))
    event = make_event(KEY, 1, PersonaChosen("ada", "v1", "{}", biography=("a", "b"), biography_embeddings=vectors),
                       timestamp=1.0)
    ready = json.loads(json.dumps(to_json_ready(event)))  # no default=: every value is JSON already
    assert [base64.b64decode(text) for text in ready["payload"]["biography_embeddings"]] == list(vectors)
    assert ready["payload"]["biography"] == ["a", "b"]


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


# ------------------------------------------------------------------------------------ golden


def _hex(*lines: str) -> bytes:
    return bytes.fromhex("".join(lines))


GOLDEN_FORMAT_2 = {
    "turn_with_digest": _hex(
        "8ca16602a674656e616e74a461636d65ac636f6e766572736174696f6ea86d656d6f72792d31a66272616e63",
        "68a46d61696ea373657101a474797065a47475726ea6736368656d6102a27473cb41d954fc40000000a47475",
        "726e00a9636175736174696f6ec0a77061796c6f616484ac757365725f6d657373616765b64920616d20616c",
        "6c657267696320746f206e7574732ea57265706c79a64e6f7465642ead6e61727261746976655f736571c0a4",
        "6d6f6465a466756c6caa70726f76656e616e636589a56d6f64656ca567656d6d61aa70726f6d70745f736574",
        "a27631b3726571756573745f66696e6765727072696e74a462656566aa706172616d657465727381ab74656d",
        "7065726174757265cb3fe6666666666666aa6c6174656e63795f6d73cb4000000000000000ad70726f6d7074",
        "5f746f6b656e7308b1636f6d706c6574696f6e5f746f6b656e7302a8726573706f6e7365c0af726573706f6e",
        "73655f646967657374b030313233343536373839616263646566",
    ),
    "belief_v2": _hex(
        "8ca16602a674656e616e74a461636d65ac636f6e766572736174696f6ea86d656d6f72792d31a66272616e63",
        "68a46d61696ea373657102a474797065a662656c696566a6736368656d6102a27473cb41d954fc40200000a4",
        "7475726e00a9636175736174696f6ec0a77061796c6f61648ca962656c6965665f6964a26231a96f70657261",
        "74696f6ea6617373657274a973746174656d656e74b7416e6e20697320616c6c657267696320746f206e7574",
        "73ab6d656d6f72795f74797065a87374616e64617264aa636f6e666964656e6365cb3fe6666666666666a772",
        "656c6174656490a561626f7574a3416e6ea46b696e64a662656c696566ab736f757263655f7475726e00a965",
        "6d62656464696e67c40c0000003f000080be0000803faf656d62656464696e675f6d6f64656ca66d696e696c",
        "6db5656d62656464696e675f66696e6765727072696e74a461613131aa70726f76656e616e636589a56d6f64",
        "656ca567656d6d61aa70726f6d70745f736574a27631b3726571756573745f66696e6765727072696e74a466",
        "303064aa706172616d657465727381ab74656d7065726174757265cb3fe6666666666666aa6c6174656e6379",
        "5f6d73cb400c000000000000ad70726f6d70745f746f6b656e730ab1636f6d706c6574696f6e5f746f6b656e",
        "7305a8726573706f6e7365a75b7b2e2e2e7d5daf726573706f6e73655f646967657374a0",
    ),
    "recall_v1": _hex(
        "8ca16602a674656e616e74a461636d65ac636f6e766572736174696f6ea86d656d6f72792d31a66272616e63",
        "68a46d61696ea373657103a474797065a6726563616c6ca6736368656d6101a27473cb41d954fc40400000a4",
        "7475726e01a9636175736174696f6ec0a77061796c6f616487a57175657279a56e7574733faf71756572795f",
        "656d62656464696e67c4080000803e0000003faf656d62656464696e675f6d6f64656ca66d696e696c6db171",
        "756572795f66696e6765727072696e74a462623232aa62656c6965665f69647391a26231aa7265766965775f",
        "69647391b372762d30303131323233333434353536363737a565646765739193a46e757473a56361757365a4",
        "72617368aa70726f76656e616e6365c0",
    ),
    "recall_v2": _hex(
        "8ca16602a674656e616e74a461636d65ac636f6e766572736174696f6ea86d656d6f72792d31a66272616e63",
        "68a46d61696ea373657104a474797065a6726563616c6ca6736368656d6102a27473cb41d954fc40800000a4",
        "7475726e02a9636175736174696f6ec0a77061796c6f616488a57175657279a97761746572696e673faf7175",
        "6572795f656d62656464696e67c4080000003f0000803eaf656d62656464696e675f6d6f64656ca66d696e69",
        "6c6db171756572795f66696e6765727072696e74a463633333aa62656c6965665f69647391a26232aa726576",
        "6965775f69647390a5656467657390a564657074680aaa70726f76656e616e6365c0",
    ),
}
"""Records of format 2 as this build wrote them: they must keep decoding to the same events."""


def golden_events() -> dict[str, Event]:
    return {
        "turn_with_digest": make_event(KEY, 1, Turn("I am allergic to nuts.", "Noted.", memory=None, reflection=None), timestamp=1_700_000_000.0,
                                       provenance=Provenance("gemma", "v1", "beef", {"temperature": 0.7}, 2.0, 8, 2,
                                                             None, "0123456789abcdef")),
        "belief_v2": make_event(KEY, 2, Belief("b1", "assert", "Ann is allergic to nuts", "standard", 0.7, (), "Ann",
                                               "belief", 0, vector_to_bytes([0.5, -0.25, 1.0]), "minilm", "aa11"),
                                timestamp=1_700_000_000.5,
                                provenance=Provenance("gemma", "v1", "f00d", {"temperature": 0.7}, 3.5, 10, 5, "[{...}]")),
        # Version 1 did not record its ranking depth; the upcaster gives the one it used (100).
        "recall_v1": make_event(KEY, 3, Recall("nuts?", vector_to_bytes([0.25, 0.5]), "minilm", "bb22", ("b1",),
                                               ("rv-0011223344556677",), (("nuts", "cause", "rash"),), depth=100,
                                               analyzer="words"),
                                turn=1, timestamp=1_700_000_001.0),
        # Version 2 did not record its keyword analyzer; the upcaster gives the one it used (words).
        "recall_v2": make_event(KEY, 4, Recall("watering?", vector_to_bytes([0.5, 0.25]), "minilm", "cc33", ("b2",),
                                               depth=10, analyzer="words"),
                                turn=2, timestamp=1_700_000_002.0),
    }


@pytest.mark.parametrize("name", sorted(GOLDEN_FORMAT_2))
def test_golden_format_2_records_still_decode(name: str) -> None:
    event = decode(GOLDEN_FORMAT_2[name])
    assert event == golden_events()[name]
    if name in ("recall_v1", "recall_v2", "turn_with_digest"):  # upcast on read: written again at the current version, keeping what it held
        assert decode(encode(event)) == event and encode(event) != GOLDEN_FORMAT_2[name]
    else:
        assert encode(event) == GOLDEN_FORMAT_2[name]  # current records are written canonically


def test_a_version_1_recall_replays_with_the_depth_it_was_made_with() -> None:
    """Recall depth changed from 100 to 10: a recall recorded before must re-run at 100, one recorded after at its own."""
    from mirror.cognition.memory.recall import DEFAULT_DEPTH

    old = decode(GOLDEN_FORMAT_2["recall_v1"]).payload
    assert isinstance(old, Recall) and old.depth == 100
    new = decode(encode(make_event(KEY, 1, Recall("nuts?", depth=DEFAULT_DEPTH), timestamp=1.0))).payload
    assert isinstance(new, Recall) and new.depth == DEFAULT_DEPTH == 10


def test_recalls_before_version_3_replay_with_plain_words_and_newer_ones_with_their_analyzer() -> None:
    """The keyword analyzer changed from words to Snowball stems: an older recall re-runs with words."""
    from mirror.cognition.memory import DEFAULT_ANALYZER

    for name in ("recall_v1", "recall_v2"):
        old = decode(GOLDEN_FORMAT_2[name]).payload
        assert isinstance(old, Recall) and old.analyzer == "words"
    new = decode(encode(make_event(KEY, 1, Recall("nuts?", depth=10, analyzer=DEFAULT_ANALYZER), timestamp=1.0))).payload
    assert isinstance(new, Recall) and new.analyzer == DEFAULT_ANALYZER == "stemmed"
