"""One copy of each model output: the payload stands in for the response it was parsed from.

Every LLM-produced event used to store the model's text twice — in its payload and again as
``Provenance.response`` — so the log spent about 4.5 bytes per character of model output.
Most payloads can give the response back: a Turn's reply *is* the Talker's answer, a
Narrative's text the controller's, and a Monologue re-serialises to JSON that the pipeline
parses into the same three threads. For those the provenance keeps no text
(``response=None``) and replay rebuilds the answer from the
payload with :func:`response_from_payload`. The provenance keeps instead the digest of the
rebuilt answer (``response_digest``, 16 hex digits): replay refuses a rebuilt answer whose
digest differs, so a payload edited on its own diverges on ``replay verify`` as it did when the
provenance held a second copy. (Neither form resists an editor who rewrites both.)

Invariant, checked when the event is made (:func:`one_copy`): the rebuilt response either *is*
the model's raw answer, or the pipeline parses it to the identical payload. Replay asks the
same request, gets the rebuilt text, parses it to the same payload and so appends the same
event: ``replay verify`` finds no divergence and makes no model call. When the check fails (a
payload the parser would not give back, or a failure whose raw answer is the evidence) the raw
response stays in the provenance, as in record format 1.

An event may rest on a second call whose answer it keeps on its payload (a reflection's decay
call): :func:`side_answers` gives replay those answers too, so one event holds its whole step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from mirror.events.envelope import Event
from mirror.events.payloads import (
    Appraisal,
    Insight,
    Interpretation,
    Monologue,
    Narrative,
    Payload,
    Plan,
    Provenance,
    Reflection,
    Turn,
)

from .errors import LLMError

Reparse = Callable[[str], Payload]
"""How the pipeline turns a response text into the payload it records (raising if it cannot)."""


def response_from_payload(payload: Payload) -> str | None:
    """The response text ``payload`` stands for, or ``None`` if it cannot stand for one.

    The Monologue's JSON keeps the schema's key order and unicode as written (``json.dumps``
    with ``ensure_ascii=False``): any spelling parses to the same threads, and this one is
    also the shape the model is asked for.
    """
    if isinstance(payload, Turn):
        return payload.reply
    if isinstance(payload, Narrative | Interpretation | Plan | Appraisal):  # the persona's steps: their text
        return payload.text
    if isinstance(payload, Monologue):
        return json.dumps(
            {"reasoning": payload.reasoning, "memory": payload.memory, "goal": payload.goal}, ensure_ascii=False
        )
    if isinstance(payload, Insight):
        return json.dumps({"insight": payload.text}, ensure_ascii=False)
    if isinstance(payload, Reflection):
        return json.dumps({"portrait": payload.portrait}, ensure_ascii=False)
    return None


def response_digest(text: str) -> str:
    """blake2b-64 of ``text`` as 16 hex digits: enough to notice an edit, small per event."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def one_copy(payload: Payload, provenance: Provenance, reparse: Reparse) -> Provenance:
    """``provenance`` without its response when ``payload`` gives the response back.

    Idempotent: a provenance already pointing at its payload, or one without a response (a
    call that got no answer), is returned unchanged.
    """
    raw = provenance.response
    if raw is None:
        return provenance
    rebuilt = response_from_payload(payload)
    if rebuilt is None:
        return provenance
    if rebuilt != raw:
        try:
            if reparse(rebuilt) != payload:
                return provenance
        except (LLMError, ValueError):
            return provenance
    return replace(provenance, response=None, response_digest=response_digest(rebuilt))


class PayloadDoesNotMatch(ValueError):
    """An event's payload no longer rebuilds into the response its provenance has the digest of."""


def recorded_response(event: Event) -> str | None:
    """The response an event's model call gave (rebuilt from the payload where it stands in).

    ``None`` when the event has no provenance or its call got no answer. Raises
    :class:`PayloadDoesNotMatch` when the payload was changed after the event was made.
    """
    provenance = event.provenance
    if provenance is None:
        return None
    if not provenance.response_in_payload:
        return provenance.response
    rebuilt = response_from_payload(event.payload)
    if rebuilt is None or response_digest(rebuilt) != provenance.response_digest:
        raise PayloadDoesNotMatch(
            f"the {event.type} payload at seq {event.seq} does not rebuild into the response its "
            f"provenance recorded (digest {provenance.response_digest}): the event was edited"
        )
    return rebuilt


@dataclass(frozen=True, slots=True)
class SideAnswer:
    """A model call an event rests on besides the one its provenance records (a reflection's decay
    call): the answer, under a provenance of its own, for replay to serve by fingerprint."""

    provenance: Provenance
    response: str


def side_answers(event: Event) -> tuple[SideAnswer, ...]:
    """The answers of the calls ``event`` records on its payload (none for most events).

    A :class:`~mirror.events.payloads.Reflection` carries its decay call's fingerprint, raw answer,
    tokens and milliseconds: the rebuilt provenance gives them back exactly (``decay_tokens`` as
    prompt tokens), so a replayed reflection records the same ``decay_*`` fields."""
    payload = event.payload
    if not isinstance(payload, Reflection) or not payload.decay_fingerprint:
        return ()
    main = event.provenance
    provenance = Provenance(
        model="" if main is None else main.model, prompt_set="" if main is None else main.prompt_set,
        request_fingerprint=payload.decay_fingerprint, parameters={} if main is None else dict(main.parameters),
        latency_ms=payload.decay_ms, prompt_tokens=payload.decay_tokens, completion_tokens=0,
        response=payload.decay_answer,
    )
    return (SideAnswer(provenance, payload.decay_answer),)


__all__ = [
    "Reparse",
    "PayloadDoesNotMatch",
    "response_from_payload",
    "response_digest",
    "one_copy",
    "recorded_response",
    "SideAnswer",
    "side_answers",
]
