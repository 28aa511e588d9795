"""The codec: an event to msgpack bytes and back — the one entry every reader and writer uses.

A record is a msgpack map: the envelope's fields, the payload as a map of its class's fields and
the provenance (or nil). Writers always write ``RECORD_FORMAT``; the golden logs hold the
bytes, and an event of the current version must encode back to exactly the bytes it was read
from. Decoding checks every envelope field here and every payload and provenance field against
its class (:mod:`mirror.events._typecheck`), so a corrupt or foreign record is a typed error
that names the conversation and seq (when they can be read), never a half-built event. A record
of an older schema version goes through the upcasters (:mod:`mirror.events.upcasting`), one
version at a time, before its payload class sees it.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from ._typecheck import Check, Shape
from .envelope import MAX_SEQ, Event
from .errors import CorruptEvent, InvalidIdentifier, UnknownEventType
from .ids import validate_identifier
from .payloads import PAYLOAD_TYPES, Payload, Provenance
from .upcasting import payload_class, provenance_format_1_to_2, upcast

RECORD_FORMAT = 2
"""Version of the envelope layout itself (independent of each payload's schema version).

Format 2 added ``Provenance.response_digest`` (one copy of each model output); a format-1
record is read through :func:`~mirror.events.upcasting.provenance_format_1_to_2`. Writers always write the newest.
"""

READABLE_FORMATS = frozenset({1, RECORD_FORMAT})

# ---------------------------------------------------------------------------------- encode


_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (*PAYLOAD_TYPES, Provenance)
}


def _payload_to_dict(payload: Payload) -> dict[str, Any]:
    return {name: getattr(payload, name) for name in _FIELD_NAMES[type(payload)]}


def _provenance_to_dict(provenance: Provenance) -> dict[str, Any]:
    return {name: getattr(provenance, name) for name in _FIELD_NAMES[Provenance]}


def event_to_record(event: Event) -> dict[str, Any]:
    return {
        "f": RECORD_FORMAT,
        "tenant": event.tenant,
        "conversation": event.conversation,
        "branch": event.branch,
        "seq": event.seq,
        "type": event.type,
        "schema": event.schema_version,
        "ts": float(event.timestamp),
        "turn": event.turn,
        "causation": event.causation,
        "payload": _payload_to_dict(event.payload),
        "provenance": None if event.provenance is None else _provenance_to_dict(event.provenance),
    }


def encode(event: Event) -> bytes:
    """Raises :class:`CorruptEvent` for values msgpack cannot carry (e.g. integers over 64 bits)."""
    try:
        return msgpack.packb(event_to_record(event), use_bin_type=True)
    except (OverflowError, TypeError, ValueError) as exc:
        raise CorruptEvent(
            f"event cannot be encoded: {exc}", tenant=event.tenant, conversation=event.conversation,
            branch=event.branch, seq=event.seq,
        ) from exc


# ---------------------------------------------------------------------------------- decode

_SHAPES: dict[type, Shape] = {cls: Shape.of(cls) for cls in (*PAYLOAD_TYPES, Provenance)}
_PROVENANCE = _SHAPES[Provenance]
_ENVELOPE: dict[str, Check] = {
    "f": lambda v: type(v) is int and v in READABLE_FORMATS,
    "tenant": lambda v: type(v) is str,
    "conversation": lambda v: type(v) is str,
    "branch": lambda v: type(v) is str,
    "seq": lambda v: type(v) is int,
    "type": lambda v: type(v) is str,
    "schema": lambda v: type(v) is int,
    "ts": lambda v: type(v) is int or (type(v) is float and math.isfinite(v)),
    "turn": lambda v: type(v) is int,
    "causation": lambda v: v is None or type(v) is str,
    "payload": lambda v: isinstance(v, dict),
    "provenance": lambda v: v is None or isinstance(v, dict),
}
_ENVELOPE_KEYS = frozenset(_ENVELOPE)
_ENVELOPE_ITEMS = tuple(_ENVELOPE.items())


@dataclasses.dataclass(frozen=True, slots=True)
class CheckedRecord:
    """A record that passed every check: its envelope, and its payload at the current version."""

    record: dict[str, Any]
    payload_class: type[Payload]
    payload: dict[str, Any]


def _corruption(record: Any) -> Callable[[str], CorruptEvent]:
    where: dict[str, Any] = {}
    if isinstance(record, dict):
        where = {name: record.get(name) for name in ("tenant", "conversation", "branch", "seq")}

    def corrupt(reason: str) -> CorruptEvent:
        return CorruptEvent(f"corrupt event record: {reason}", **where)

    return corrupt


def check_record(record: Any) -> CheckedRecord:
    """Check a decoded record completely without building objects (the ingester's path).

    Raises :class:`CorruptEvent` or :class:`UnknownEventType` naming conversation and seq.
    """
    if type(record) is not dict:
        raise CorruptEvent("event record is not a map")
    if record.keys() != _ENVELOPE_KEYS:
        missing = _ENVELOPE_KEYS - record.keys()
        extra = record.keys() - _ENVELOPE_KEYS
        raise _corruption(record)(
            f"missing envelope fields {sorted(missing)}" if missing else f"unknown envelope fields {sorted(map(str, extra))}"
        )
    for name, check in _ENVELOPE_ITEMS:
        if not check(record[name]):
            raise _corruption(record)(f"envelope field {name!r} has a bad value {record[name]!r:.80}")
    try:
        validate_identifier("tenant", record["tenant"])
        validate_identifier("conversation", record["conversation"])
        validate_identifier("branch", record["branch"])
        if not 1 <= record["seq"] <= MAX_SEQ or not 0 <= record["turn"] <= MAX_SEQ:
            raise CorruptEvent(f"seq must be 1..{MAX_SEQ} and turn 0..{MAX_SEQ}, got {record['seq']} and {record['turn']}")
        cls = payload_class(record["type"])
        fields = record["payload"]
        if record["schema"] != cls.VERSION:
            fields = upcast(record["type"], record["schema"], fields)
    except UnknownEventType as exc:
        raise UnknownEventType(
            str(exc), tenant=record["tenant"], conversation=record["conversation"],
            branch=record["branch"], seq=record["seq"],
        ) from None
    except (CorruptEvent, InvalidIdentifier) as exc:
        raise _corruption(record)(str(exc)) from None
    if not _SHAPES[cls].fits(fields):
        raise _corruption(record)(_SHAPES[cls].reason(fields))
    if record["provenance"] is not None:
        if record["f"] == 1:
            if "response_digest" in record["provenance"]:
                raise _corruption(record)("a format-1 provenance cannot have a response_digest (format 2 added it)")
            record = {**record, "provenance": provenance_format_1_to_2(record["provenance"])}
        if not _PROVENANCE.fits(record["provenance"]):
            raise _corruption(record)(_PROVENANCE.reason(record["provenance"]))
        provenance = record["provenance"]
        if provenance.get("response_digest") and provenance.get("response") is not None:
            raise _corruption(record)("provenance holds a response and also says it is in the payload")
    return CheckedRecord(record, cls, fields)


def record_to_event(record: Any) -> Event:
    checked = check_record(record)
    record = checked.record
    provenance = record["provenance"]
    return Event(
        tenant=record["tenant"],
        conversation=record["conversation"],
        branch=record["branch"],
        seq=record["seq"],
        payload=_SHAPES[checked.payload_class].build(checked.payload),
        timestamp=float(record["ts"]),
        turn=record["turn"],
        causation=record["causation"],
        provenance=None if provenance is None else _PROVENANCE.build(provenance),
    )


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError, msgpack.exceptions.StackError, ValueError, TypeError) as exc:
        raise CorruptEvent(f"event record is not valid msgpack: {exc}") from None


def check(data: bytes) -> CheckedRecord:
    """Unpack and check one record without building the event."""
    return check_record(unpack(data))


def decode(data: bytes) -> Event:
    """Decode one record; raises :class:`CorruptEvent` or :class:`UnknownEventType`."""
    return record_to_event(unpack(data))


def to_json_ready(event: Event) -> Mapping[str, Any]:
    """The record as plain JSON-compatible values, for APIs and tools.

    Tuples become lists when serialised; bytes (embedding vectors) become base64 text here,
    since JSON has no bytes: ``base64.b64decode`` gives back the little-endian float32s. A tuple
    of vectors (a persona's ``biography_embeddings``) becomes a list of base64 texts.
    """
    record = event_to_record(event)
    payload = record["payload"]
    if any(_holds_bytes(value) for value in payload.values()):
        record["payload"] = {name: _base64(value) if _holds_bytes(value) else value for name, value in payload.items()}
    record["id"] = event.id
    return record


def _holds_bytes(value: Any) -> bool:
    return type(value) is bytes or (type(value) in (tuple, list) and any(type(item) is bytes for item in value))


def _base64(value: Any) -> Any:
    if type(value) is bytes:
        return base64.b64encode(value).decode("ascii")
    return [_base64(item) for item in value]


__all__ = [
    "CheckedRecord", "READABLE_FORMATS", "RECORD_FORMAT", "check", "check_record", "decode",
    "encode", "event_to_record", "record_to_event", "to_json_ready", "unpack",
]
