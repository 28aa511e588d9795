"""Upcasters: how a record of an older schema version is brought up to the current one.

Old records are never rewritten. Adding a field to a payload is a new ``VERSION`` on its class
(:mod:`mirror.events.payloads`) and one function here, registered with :func:`register_upcaster`,
that turns a payload dict of the old version into the next one; :func:`upcast` chains them one
version at a time. What an old record did not know is recorded as unknown (``None``, empty), or
as what the old code did when that is certain (``RECALL_V1_DEPTH``) — never guessed.

The envelope's own layout has a format number of its own (``RECORD_FORMAT`` in
:mod:`mirror.events.codec`); :func:`provenance_format_1_to_2` reads the one older format.
The codec calls this module on read; nothing here touches bytes or checks types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import CorruptEvent, UnknownEventType
from .payloads import PAYLOAD_TYPES, Payload

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


@register_upcaster("turn", 4)
def _turn_v4_to_v5(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 4 recorded no idempotency key: the client sent none Mirror kept.
    return {**payload, "idempotency_key": None}


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


@register_upcaster("persona", 1)
def _persona_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Version 1 substituted no card macro and named no user: "" replays its prompts as they ran.
    return {**payload, "user_name": ""}


def provenance_format_1_to_2(provenance: dict[str, Any]) -> dict[str, Any]:
    # Format 1 always stored the model's answer in the provenance (or none at all, for a call
    # that got no answer): the payload was never the copy.
    return {**provenance, "response_digest": ""}


def payload_class(event_type: str) -> type[Payload]:
    try:
        return _PAYLOADS[event_type]
    except KeyError:
        raise UnknownEventType(f"unknown event type {event_type!r}") from None


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


__all__ = [
    "RECALL_V1_DEPTH", "RECALL_V2_ANALYZER", "Upcaster", "payload_class", "provenance_format_1_to_2",
    "register_upcaster", "upcast",
]
