"""The msgpack codec: round trips, golden records, upcasting, and typed errors for bad input.

Whatever bytes arrive, ``decode`` either returns an :class:`Event` or raises a
:class:`CodecError` (``CorruptEvent`` / ``UnknownEventType``) that names the conversation and
seq when they can be read; no other exception may escape, since the ingester and replay treat
a ``CodecError`` as "skip and report" and anything else as a crash.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mirror.events.codec import (
    RECORD_FORMAT,
    CheckedRecord,
    check,
    check_record,
    decode,
    encode,
    event_to_record,
    record_to_event,
    unpack,
)
from mirror.events.envelope import Event, make_event
from mirror.events.errors import CodecError, CorruptEvent, InvalidIdentifier, UnknownEventType
from mirror.events.ids import MAX_IDENTIFIER_LENGTH, StreamKey
from mirror.events.payloads import PAYLOAD_TYPES, Belief, Edge, Payload, Provenance, Turn
from mirror.events.upcasting import upcast
from tests.support.strategies import (
    PAYLOAD_STRATEGIES,
    events,
    msgpack_values,
    provenances,
)

FAST = settings(max_examples=150, deadline=None)
KEY = StreamKey("acme", "chat-7")


def pack(record: Any) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def valid_record(**changes: Any) -> dict[str, Any]:
    """The record of a plain turn event at seq 7, with envelope fields replaced by ``changes``."""
    event = make_event(KEY, 7, Turn("hello", "hi there", narrative_seq=3), turn=2, timestamp=1_700_000_000.5)
    record = event_to_record(event)
    record.update(changes)
    return record


# ------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("payload_type", PAYLOAD_TYPES, ids=lambda cls: cls.TYPE)
@given(data=st.data())
@FAST
def test_every_event_type_round_trips(payload_type: type[Payload], data: st.DataObject) -> None:
    event = data.draw(events(PAYLOAD_STRATEGIES[payload_type]))
    encoded = encode(event)
    decoded = decode(encoded)
    assert decoded == event
    assert type(decoded.payload) is payload_type
    assert decoded.id == event.id
    assert decoded.schema_version == payload_type.VERSION
    # Encoding is canonical: what was read writes back to the same bytes.
    assert encode(decoded) == encoded


@given(events())
@FAST
def test_check_accepts_what_encode_produced(event: Event) -> None:
    checked = check(encode(event))
    assert isinstance(checked, CheckedRecord)
    assert checked.payload_class is type(event.payload)
    assert checked.record["seq"] == event.seq
    assert checked.record["conversation"] == event.conversation
    assert checked.payload == unpack(encode(event))["payload"]


def test_tuples_come_back_as_tuples() -> None:
    # msgpack has no tuple: lists on the wire must become tuples again, or equality breaks.
    event = make_event(
        KEY, 1, Edge("rain", "causes", "wet", "contradict", "world", contradicts=("rain", "prevents", "wet")), timestamp=1.0
    )
    decoded = decode(encode(event))
    assert isinstance(decoded.payload, Edge)
    assert decoded.payload.contradicts == ("rain", "prevents", "wet")
    assert type(decoded.payload.contradicts) is tuple
    belief = decode(encode(make_event(KEY, 2, Belief("b", "consistent", related=("x", "y")), timestamp=1.0)))
    assert isinstance(belief.payload, Belief)
    assert type(belief.payload.related) is tuple


# ----------------------------------------------------------------------------------- golden

GOLDEN_V2_BELIEF = bytes.fromhex(
    "8ca16601a674656e616e74a461636d65ac636f6e766572736174696f6ea6636861742d37a66272616e6368a46d"
    "61696ea373657104a474797065a662656c696566a6736368656d6101a27473cb41d954fc40100000a47475726e"
    "02a9636175736174696f6ea3616263a77061796c6f616486a962656c6965665f6964a26231a96f706572617469"
    "6f6eaa636f6e74726164696374a973746174656d656e74b074686520736b7920697320677265656eab6d656d6f"
    "72795f74797065a9656d6f74696f6e616caa636f6e666964656e6365cb3fe8000000000000a772656c61746564"
    "91a26230aa70726f76656e616e636588a56d6f64656cac67656d6d612d332d3237306daa70726f6d70745f7365"
    "74a27631b3726571756573745f66696e6765727072696e74a466303064aa706172616d657465727382ab74656d"
    "7065726174757265cb3fe6666666666666aa6d61785f746f6b656e73cd0bb8aa6c6174656e63795f6d73cb4029"
    "000000000000ad70726f6d70745f746f6b656e7364b1636f6d706c6574696f6e5f746f6b656e7314a872657370"
    "6f6e7365a27b7d"
)
"""A belief event (schema 1) as record format 1 wrote it: it must keep decoding, unchanged."""


def test_golden_record_still_decodes() -> None:
    # Format 1, belief schema 1: read through both upcasters (the provenance gains an empty
    # response_digest, the belief gains empty memory fields), never rewritten.
    assert unpack(GOLDEN_V2_BELIEF)["f"] == 1 and unpack(GOLDEN_V2_BELIEF)["schema"] == 1
    event = decode(GOLDEN_V2_BELIEF)
    assert event == make_event(
        KEY,
        4,
        Belief("b1", "contradict", "the sky is green", "emotional", 0.75, ("b0",)),
        turn=2,
        causation="abc",
        timestamp=1_700_000_000.25,
        provenance=Provenance("gemma-3-270m", "v1", "f00d", {"temperature": 0.7, "max_tokens": 3000}, 12.5, 100, 20, "{}"),
    )
    assert event.id == "6e74197f79a5ad16b966af85f5a715f1"
    assert event.provenance is not None and event.provenance.response == "{}"
    assert not event.provenance.response_in_payload
    # Written again, it is a current record (format 2, belief schema 2) that reads back equal.
    rewritten = encode(event)
    assert unpack(rewritten)["f"] == RECORD_FORMAT == 2 and unpack(rewritten)["schema"] == 2
    assert decode(rewritten) == event


def v1_turn_record(payload: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A turn record as the prototype wrote it: schema 1, payload ``{"user", "assistant"}``."""
    record = {
        "f": 1,
        "tenant": "acme",
        "conversation": "legacy-1",
        "branch": "main",
        "seq": 3,
        "type": "turn",
        "schema": 1,
        "ts": 1_600_000_000.0,
        "turn": 2,
        "causation": None,
        "payload": payload,
        "provenance": None,
    }
    record.update(changes)
    return record


def test_golden_v1_turn_is_upcast_to_the_current_version() -> None:
    data = pack(v1_turn_record({"user": "what is 2+2?", "assistant": "4"}))
    event = decode(data)
    assert event.payload == Turn(user_message="what is 2+2?", reply="4", narrative_seq=None, mode="full", memory=None,
                                 reflection=None)
    assert (event.conversation, event.seq, event.turn, event.timestamp) == ("legacy-1", 3, 2, 1_600_000_000.0)
    assert event.schema_version == Turn.VERSION == 5
    # Read once, the event is written back at the current version, never as v1.
    rewritten = unpack(encode(event))
    assert rewritten["schema"] == 5
    assert rewritten["payload"] == {"user_message": "what is 2+2?", "reply": "4", "narrative_seq": None, "mode": "full",
                                    "memory": None, "reflection": None, "idempotency_key": None}
    assert check(data).payload == rewritten["payload"]


def test_v1_turn_keeps_its_mode() -> None:
    event = decode(pack(v1_turn_record({"user": "u", "assistant": "a", "mode": "baseline"})))
    assert isinstance(event.payload, Turn)
    assert event.payload.mode == "baseline"


@given(user=st.text(), assistant=st.text())
@settings(max_examples=50, deadline=None)
def test_any_v1_turn_upcasts(user: str, assistant: str) -> None:
    event = decode(pack(v1_turn_record({"user": user, "assistant": assistant})))
    assert event.payload == Turn(user, assistant, None, "full", None, None)


@pytest.mark.parametrize(
    "payload",
    [
        {"user": "u"},  # no assistant
        {"assistant": "a"},
        {},
        {"user_message": "u", "reply": "a"},  # a v2 payload mislabelled as v1
        {"user": 5, "assistant": "a"},  # upcast, then the v2 check rejects the type
    ],
)
def test_malformed_v1_turn_is_corrupt(payload: dict[str, Any]) -> None:
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(v1_turn_record(payload)))
    assert caught.value.conversation == "legacy-1"
    assert caught.value.seq == 3


def test_a_v2_turn_did_not_record_memory_nor_reflection() -> None:
    payload = {"user_message": "u", "reply": "r", "narrative_seq": 1, "mode": "baseline"}
    # unknown, both: the stack's setting applies
    assert upcast("turn", 2, payload) == {**payload, "memory": None, "reflection": None, "idempotency_key": None}


def test_a_v3_turn_did_not_record_reflection() -> None:
    payload = {"user_message": "u", "reply": "r", "narrative_seq": 1, "mode": "full", "memory": False}
    assert upcast("turn", 3, payload) == {**payload, "reflection": None, "idempotency_key": None}


def test_a_v4_turn_recorded_no_idempotency_key() -> None:
    payload = {"user_message": "u", "reply": "r", "narrative_seq": 1, "mode": "full", "memory": False,
               "reflection": True}
    assert upcast("turn", 4, payload) == {**payload, "idempotency_key": None}


def test_upcast_is_a_no_op_at_the_current_version() -> None:
    payload = {"user_message": "u", "reply": "r", "narrative_seq": 1, "mode": "full", "memory": False,
               "reflection": True, "idempotency_key": "k-1"}
    assert upcast("turn", 5, payload) == payload


# -------------------------------------------------------------------- unknown types, versions


def test_unknown_type_names_conversation_and_seq() -> None:
    record = valid_record(type="persona_mood", schema=1, payload={"mood": "wry"})
    with pytest.raises(UnknownEventType) as caught:
        decode(pack(record))
    error = caught.value
    assert isinstance(error, CodecError)
    assert (error.tenant, error.conversation, error.branch, error.seq) == ("acme", "chat-7", "main", 7)
    assert "chat-7" in str(error) and "seq=7" in str(error) and "persona_mood" in str(error)
    # check (the ingester's path) says the same thing.
    with pytest.raises(UnknownEventType):
        check(pack(record))


def test_newer_schema_is_unknown_and_says_upgrade() -> None:
    with pytest.raises(UnknownEventType) as caught:
        decode(pack(valid_record(schema=Turn.VERSION + 1)))
    assert caught.value.conversation == "chat-7" and caught.value.seq == 7
    assert "newer" in str(caught.value) and "upgrade" in str(caught.value)


@pytest.mark.parametrize("schema", [0, -1, -(2**63)])
def test_schema_without_an_upcaster_is_unknown(schema: int) -> None:
    record = valid_record(type="monologue", schema=schema, payload={"reasoning": "r", "memory": "m", "goal": "g"})
    with pytest.raises(UnknownEventType) as caught:
        decode(pack(record))
    assert caught.value.seq == 7


# --------------------------------------------------------------------------- corrupt records


@pytest.mark.parametrize("record", [[], [1, 2], 5, "event", None, True, 1.5, b"\x00"], ids=repr)
def test_non_map_record_is_corrupt(record: Any) -> None:
    with pytest.raises(CorruptEvent):
        decode(pack(record))


@pytest.mark.parametrize("field", sorted(valid_record()))
def test_missing_envelope_field_is_corrupt(field: str) -> None:
    record = valid_record()
    del record[field]
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(record))
    assert field in str(caught.value)
    if field not in ("tenant", "conversation", "branch", "seq"):
        assert caught.value.conversation == "chat-7" and caught.value.seq == 7


def test_extra_envelope_field_is_corrupt() -> None:
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(valid_record(priority=1)))
    assert "priority" in str(caught.value)
    assert caught.value.seq == 7


BAD_ENVELOPE_VALUES = [
    ("f", 3),
    ("f", 0),
    ("f", "1"),
    ("f", True),
    ("f", 1.0),
    ("f", None),
    ("tenant", 5),
    ("tenant", None),
    ("tenant", b"acme"),
    ("conversation", ["chat-7"]),
    ("branch", 0),
    ("seq", "7"),
    ("seq", 7.0),
    ("seq", True),
    ("seq", None),
    ("seq", 0),
    ("seq", -1),
    ("type", None),
    ("type", 1),
    ("schema", "2"),
    ("schema", 2.0),
    ("schema", None),
    ("ts", "now"),
    ("ts", None),
    ("ts", True),
    ("turn", -1),
    ("turn", 1.5),
    ("turn", False),
    ("causation", 5),
    ("causation", b"abc"),
    ("payload", None),
    ("payload", ["hello", "hi"]),
    ("payload", "hello"),
    ("provenance", "gpt"),
    ("provenance", []),
    ("provenance", {"model": "m"}),
    ("provenance", {"model": "m", "prompt_set": "p", "request_fingerprint": "f", "parameters": {"t": None}}),
    ("provenance", {"model": "m", "prompt_set": "p", "request_fingerprint": "f", "secret": "k"}),
]


@pytest.mark.parametrize(("field", "value"), BAD_ENVELOPE_VALUES, ids=lambda v: repr(v))
def test_bad_envelope_value_is_corrupt(field: str, value: Any) -> None:
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(valid_record(**{field: value})))
    assert isinstance(caught.value, CodecError)
    with pytest.raises(CorruptEvent):
        check(pack(valid_record(**{field: value})))


BAD_IDENTIFIERS = ["a.b", "*", ">", "x y", "tab\there", "", "a" * (MAX_IDENTIFIER_LENGTH + 1), "é", "a/b", "new\nline"]


@pytest.mark.parametrize("field", ["tenant", "conversation", "branch"])
@pytest.mark.parametrize("value", BAD_IDENTIFIERS, ids=repr)
def test_bad_identifier_in_record_is_corrupt(field: str, value: str) -> None:
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(valid_record(**{field: value})))
    assert caught.value.seq == 7


BAD_PAYLOADS = [
    {"user_message": 5, "reply": "r"},
    {"user_message": "u"},
    {"user_message": "u", "reply": "r", "extra": 1},
    {"user_message": "u", "reply": "r", "narrative_seq": "3"},
    {"user_message": "u", "reply": "r", "narrative_seq": True},
    {"user_message": "u", "reply": "r", "mode": None},
    {"user_message": b"u", "reply": "r"},
]


@pytest.mark.parametrize("payload", BAD_PAYLOADS, ids=repr)
def test_bad_payload_fields_are_corrupt(payload: dict[str, Any]) -> None:
    with pytest.raises(CorruptEvent) as caught:
        decode(pack(valid_record(payload=payload)))
    assert caught.value.conversation == "chat-7" and caught.value.seq == 7


@pytest.mark.parametrize(
    ("event_type", "payload"),
    [
        ("belief", {"belief_id": "b", "operation": "forget"}),
        ("belief", {"belief_id": "b", "operation": "assert", "memory_type": "dream"}),
        ("belief", {"belief_id": "b", "operation": "assert", "confidence": "high"}),
        ("belief", {"belief_id": "b", "operation": "assert", "related": "b2"}),
        ("belief", {"belief_id": "b", "operation": "assert", "related": [1]}),
        ("edge", {"src": "a", "relation": "r", "dst": "b", "origin": "rumour"}),
        ("edge", {"src": "a", "relation": "r", "dst": "b", "contradicts": ["a", "r"]}),
        ("edge", {"src": "a", "relation": "r", "dst": "b", "operation": "merge"}),
        ("reflection", {"snapshot": "s", "accepted": 1}),
        ("thinker_failed", {"stage": "dreaming", "error_type": "E", "message": "m"}),
        ("fork", {"parent_branch": "main", "fork_seq": "3"}),
    ],
)
def test_values_outside_a_payload_type_are_corrupt(event_type: str, payload: dict[str, Any]) -> None:
    with pytest.raises(CorruptEvent):
        decode(pack(valid_record(type=event_type, schema=1, payload=payload)))


def test_every_truncation_is_corrupt() -> None:
    data = GOLDEN_V2_BELIEF
    for end in range(len(data)):
        with pytest.raises(CorruptEvent):
            decode(data[:end])


def test_trailing_bytes_are_corrupt() -> None:
    with pytest.raises(CorruptEvent):
        decode(GOLDEN_V2_BELIEF + b"\x00")


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\xd4\xff\x00", b"\x81\x01\x02", b"\xd9\x02\xff\xfe", b"\x91" * 5_000 + b"\xc0"],
    ids=repr,
)
def test_invalid_msgpack_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptEvent):
        decode(data)


def test_codec_errors_are_typed() -> None:
    assert issubclass(CorruptEvent, CodecError) and issubclass(UnknownEventType, CodecError)
    assert not issubclass(CorruptEvent, UnknownEventType)


# -------------------------------------------------------------------------------- fuzzing


def _decode_or_codec_error(data: bytes) -> Event | None:
    """Decode, treating a CodecError as an acceptable outcome; any other exception fails the test."""
    try:
        event = decode(data)
    except CodecError:
        with pytest.raises(CodecError):
            check(data)  # the checking path must agree that the record is bad
        return None
    # Whatever decodes is a real event that survives its own round trip.
    assert isinstance(event, Event)
    assert decode(encode(event)) == event
    return event


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    """A valid record with one change: a key dropped, a value replaced, or a key added,
    in the envelope, the payload or the provenance."""
    event = draw(events())
    record = copy.deepcopy(event_to_record(event))
    if record["provenance"] is None:
        record["provenance"] = dataclasses.asdict(draw(provenances))
    where = draw(st.sampled_from(["envelope", "payload", "provenance"]))
    target = record if where == "envelope" else record[where]
    action = draw(st.sampled_from(["drop", "replace", "add"]))
    if action == "add":
        name = draw(st.text(max_size=12).filter(lambda name: name not in target))
        target[name] = draw(msgpack_values)
    else:
        assume(target)
        name = draw(st.sampled_from(sorted(target)))
        if action == "drop":
            del target[name]
        else:
            target[name] = draw(msgpack_values)
    return where, action, record


@given(mutated_records())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_records_decode_or_raise_codec_error(mutation: tuple[str, str, dict[str, Any]]) -> None:
    where, action, record = mutation
    event = _decode_or_codec_error(pack(record))
    # Every envelope field is required, and no map takes a field its class does not have.
    if action == "add" or (where == "envelope" and action == "drop"):
        assert event is None


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    _decode_or_codec_error(data)


@given(msgpack_values)
@settings(max_examples=200, deadline=None)
def test_arbitrary_msgpack_values_decode_or_raise_codec_error(value: Any) -> None:
    assert _decode_or_codec_error(pack(value)) is None  # nothing random is a whole event


@given(events(), st.data())
@settings(max_examples=150, deadline=None)
def test_byte_flips_decode_or_raise_codec_error(event: Event, data: st.DataObject) -> None:
    encoded = bytearray(encode(event))
    at = data.draw(st.integers(0, len(encoded) - 1))
    encoded[at] = data.draw(st.integers(0, 255))
    _decode_or_codec_error(bytes(encoded))


# ----------------------------------------------------------------------------- identifiers


def test_record_to_event_checks_like_decode() -> None:
    with pytest.raises(CorruptEvent):
        record_to_event(valid_record(tenant="a.b"))
    with pytest.raises(CorruptEvent):
        check_record([valid_record()])
    assert record_to_event(valid_record()) == decode(pack(valid_record()))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_are_refused_on_both_sides(bad: float) -> None:
    key = StreamKey("acme", "numbers")
    with pytest.raises(InvalidIdentifier, match="timestamp"):
        make_event(key, 1, Turn("hi", "hello"), timestamp=bad)
    good = make_event(key, 1, Belief("b1", "assert", "I like tea", "standard", confidence=0.6), timestamp=1.0)
    record = msgpack.unpackb(encode(good), raw=False)
    record["payload"]["confidence"] = bad
    with pytest.raises(CorruptEvent, match="confidence"):
        decode(msgpack.packb(record))
    record = msgpack.unpackb(encode(good), raw=False)
    record["ts"] = bad
    with pytest.raises(CorruptEvent, match="ts"):
        decode(msgpack.packb(record))


def test_values_msgpack_cannot_carry_are_a_codec_error() -> None:
    event = make_event(StreamKey("acme", "big"), 1, Turn("hi", "hello"), timestamp=1.0)
    huge = Provenance("m", "p", "f" * 64, {"seed": 2**70}, 1.0, 1, 1)
    with pytest.raises(CorruptEvent, match="cannot be encoded"):
        encode(dataclasses.replace(event, provenance=huge))
    with pytest.raises(InvalidIdentifier, match="seq"):
        make_event(StreamKey("acme", "big"), 2**64, Turn("hi", "hello"))


def test_a_seq_beyond_bigint_is_a_corrupt_record_not_a_crash() -> None:
    event = make_event(StreamKey("acme", "big"), 1, Turn("hi", "hello"), timestamp=1.0)
    record = msgpack.unpackb(encode(event), raw=False)
    record["seq"] = 2**63
    with pytest.raises(CorruptEvent, match="seq must be"):
        decode(msgpack.packb(record))
