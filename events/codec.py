"""msgpack encoding of events, with validation and upcasting on read.

A record is a msgpack map. Decoding checks every envelope field and every payload field
against the payload class, so a corrupt or foreign record is a typed error that names the
conversation and seq (when they can be read), never a half-built event. A record of an older
schema version is passed through the registered upcasters, one version at a time, before the
payload class sees it.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgpack

from .envelope import MAX_SEQ, Event
from .errors import CorruptEvent, InvalidIdentifier, UnknownEventType
from .ids import validate_identifier
from .payloads import PAYLOAD_TYPES, Payload, Provenance

RECORD_FORMAT = 2
"""Version of the envelope layout itself (independent of each payload's schema version).

Format 2 added ``Provenance.response_digest`` (one copy of each model output); a format-1
record is read through :func:`_provenance_format_1_to_2`. Writers always write the newest.
"""

READABLE_FORMATS = frozenset({1, RECORD_FORMAT})

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_PAYLOADS: dict[str, type[Payload]] = {cls.TYPE: cls for cls in PAYLOAD_TYPES}
# (type, from_version) -> function turning a payload dict of that version into the next one.
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def register_upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(function: Upcaster) -> Upcaster:
        _UPCASTERS[(event_type, from_version)] = function
        return function

    return register


@register_upcaster("turn", 1)
def _turn_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # The prototype stored the exchange as user/assistant and did not know which narrative
    # the Talker saw; that is recorded as unknown (None), not guessed.
    return {
        "user_message": payload["user"],
        "reply": payload["assistant"],
        "narrative_seq": None,
        "mode": payload.get("mode", "full"),
    }


@register_upcaster("turn", 2)
def _turn_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 2 did not record whether memory was on: unknown (None), so the stack's setting applies.
    return {**payload, "memory": None}


RECALL_V1_DEPTH = 100
"""How deep each single ranking went into a version-1 recall's fusion (it was not recorded)."""


@register_upcaster("recall", 1)
def _recall_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 fused the top 100 of each ranking and did not say so; replay re-runs it that way.
    return {**payload, "depth": RECALL_V1_DEPTH}


RECALL_V2_ANALYZER = "words"
"""How versions 1 and 2 of a recall tokenized for the keyword ranking (it was not recorded)."""


@register_upcaster("recall", 2)
def _recall_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    # Before version 3 the keyword ranking used plain words (no stemming); replay re-runs it so.
    return {**payload, "analyzer": RECALL_V2_ANALYZER}


@register_upcaster("belief", 1)
def _belief_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Beliefs written before the memory stage know nothing of what they are about, which turn
    # they rest on or their vector: recorded as unknown (empty), which is what they were.
    return {
        **payload,
        "about": "",
        "kind": "belief",
        "source_turn": None,
        "embedding": b"",
        "embedding_model": "",
        "embedding_fingerprint": "",
    }


@register_upcaster("turn", 3)
def _turn_v3_to_v4(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 3 did not record whether reflection was on: unknown (None), so the stack's setting applies.
    return {**payload, "reflection": None}


@register_upcaster("insight", 1)
def _insight_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 did not say which turn the insight was about: unknown.
    return {**payload, "for_turn": None}


@register_upcaster("reflection", 1)
def _reflection_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 called the portrait "snapshot" and recorded no triggers, decisions or decay call.
    upcast = {key: value for key, value in payload.items() if key != "snapshot"}
    return {**upcast, "portrait": payload.get("snapshot", "")}


@register_upcaster("fork", 1)
def _fork_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 recorded the prompt set's version alone: its templates are unknown (empty maps).
    return {**payload, "template_digests": {}, "changed_templates": {}}


def _provenance_format_1_to_2(provenance: dict[str, Any]) -> dict[str, Any]:
    # Format 1 always stored the model's answer in the provenance (or none at all, for a call
    # that got no answer): the payload was never the copy.
    return {**provenance, "response_digest": ""}


def payload_class(event_type: str) -> type[Payload]:
    try:
        return _PAYLOADS[event_type]
    except KeyError:
        raise UnknownEventType(f"unknown event type {event_type!r}") from None


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

_Check = Callable[[Any], bool]

_EXACT_TYPES = (str, int, bool, type(None))
"""Annotations whose values are checked by exact type (``True`` is not an ``int`` here)."""


def _is_finite_float(value: Any) -> bool:
    return type(value) is float and math.isfinite(value)


def _union_checker(options: tuple[Any, ...]) -> _Check:
    """``A | B | …``: one set lookup when every option is a plain type, else any option."""
    if all(option in _EXACT_TYPES or option is float for option in options):
        exact = frozenset(option for option in options if option is not float) | (
            {int} if float in options else set()  # a float field also takes whole numbers
        )
        if float in options:
            return lambda value: type(value) in exact or _is_finite_float(value)
        return lambda value: type(value) in exact
    checks = tuple(_checker(option) for option in options)

    def any_option(value: Any) -> bool:
        for check in checks:
            if check(value):
                return True
        return False

    return any_option


def _checker(annotation: Any) -> _Check:
    """A predicate for values of a (simple) annotated field type.

    These run for every field of every record the ingester reads, so each is one expression
    without generators where it can be.
    """
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return lambda value: True
    if annotation is float:
        return lambda value: type(value) is int or _is_finite_float(value)
    if annotation in (str, int, bool, bytes):
        return lambda value: type(value) is annotation
    if origin is Literal:
        allowed = frozenset(typing.get_args(annotation))
        return lambda value: isinstance(value, str) and value in allowed
    if origin in (typing.Union, types.UnionType):
        return _union_checker(typing.get_args(annotation))
    if annotation is type(None):
        return lambda value: value is None
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker(args[0])
            return lambda value: isinstance(value, (list, tuple)) and all(map(item, value))
        items = [_checker(arg) for arg in args]
        return lambda value: (
            isinstance(value, (list, tuple))
            and len(value) == len(items)
            and all(check(v) for check, v in zip(items, value, strict=True))
        )
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        check_key, check_value = _checker(key_type), _checker(value_type)
        return lambda value: (
            isinstance(value, dict) and all(map(check_key, value.keys())) and all(map(check_value, value.values()))
        )
    raise TypeError(f"no checker for {annotation!r}")


@dataclasses.dataclass(frozen=True)
class _Shape:
    """How to check and build one dataclass from a plain dict."""

    cls: type
    checks: dict[str, _Check]
    required: frozenset[str]
    tuple_fields: frozenset[str]

    @classmethod
    def of(cls, target: type) -> _Shape:
        hints = typing.get_type_hints(target)
        fields = [f for f in dataclasses.fields(target)]
        required = frozenset(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        tuple_fields = frozenset(
            f.name
            for f in fields
            if any(typing.get_origin(arg) is tuple for arg in (hints[f.name], *typing.get_args(hints[f.name])))
        )
        return cls(target, {f.name: _checker(hints[f.name]) for f in fields}, required, tuple_fields)

    def check(self, values: Any, record: Any) -> None:
        """Raise :class:`CorruptEvent` (naming ``record``'s place) unless ``values`` fit ``cls``."""
        if type(values) is dict and values.keys() <= self.checks.keys() and self.required <= values.keys():
            checks = self.checks
            for name, value in values.items():
                if not checks[name](value):
                    break
            else:
                return
        raise _corruption(record)(self._reason(values))

    def _reason(self, values: Any) -> str:
        """Why ``values`` failed :meth:`check` (the slow path, only for bad records)."""
        if type(values) is not dict:
            return f"{self.cls.__name__} is not a map"
        keys = values.keys()
        if not keys <= self.checks.keys():
            return f"{self.cls.__name__} has unknown fields {sorted(map(str, keys - self.checks.keys()))}"
        if not self.required <= keys:
            return f"{self.cls.__name__} lacks fields {sorted(self.required - keys)}"
        name, value = next((name, value) for name, value in values.items() if not self.checks[name](value))
        return f"{self.cls.__name__}.{name} has a bad value {value!r:.80}"

    def build(self, values: dict[str, Any]) -> Any:
        """Build ``cls`` from a map that passed :meth:`check`."""
        if self.tuple_fields:
            values = {
                name: (_tupled(value) if name in self.tuple_fields and isinstance(value, list) else value)
                for name, value in values.items()
            }
        return self.cls(**values)


def _tupled(value: list[Any]) -> tuple[Any, ...]:
    """A list from the wire as the tuple it was, nested lists (e.g. ``Recall.edges``) included."""
    items = tuple(value)
    for item in items:
        if type(item) is list:
            return tuple(_tupled(item) if type(item) is list else item for item in items)
    return items


_SHAPES: dict[type, _Shape] = {cls: _Shape.of(cls) for cls in (*PAYLOAD_TYPES, Provenance)}
_ENVELOPE: dict[str, _Check] = {
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


def upcast(event_type: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Bring ``payload`` of ``version`` up to the current schema version of ``event_type``."""
    current = payload_class(event_type).VERSION
    if version > current:
        raise UnknownEventType(
            f"{event_type!r} schema version {version} is newer than this build's {current}; "
            "upgrade Mirror to read it"
        )
    while version < current:
        try:
            step = _UPCASTERS[(event_type, version)]
        except KeyError:
            raise UnknownEventType(
                f"no upcaster for {event_type!r} from schema version {version}"
            ) from None
        try:
            payload = step(payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptEvent(
                f"{event_type!r} version {version} payload cannot be upcast: {exc!r}"
            ) from exc
        version += 1
    return payload


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
    _SHAPES[cls].check(fields, record)
    if record["provenance"] is not None:
        if record["f"] == 1:
            if "response_digest" in record["provenance"]:
                raise _corruption(record)("a format-1 provenance cannot have a response_digest (format 2 added it)")
            record = {**record, "provenance": _provenance_format_1_to_2(record["provenance"])}
        _SHAPES[Provenance].check(record["provenance"], record)
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
        provenance=None if provenance is None else _SHAPES[Provenance].build(provenance),
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
    "encode", "event_to_record", "payload_class", "record_to_event", "register_upcaster",
    "to_json_ready", "unpack", "upcast",
]
