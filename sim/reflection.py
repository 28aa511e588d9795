"""What the simulator answers to Mirror's reflection: content read from the request itself.

As for the memory stage (:mod:`mirror.sim.memory`), a random instance of the schemas would be
valid JSON about nothing, so the demo's portrait and the reflection tests would show noise.
These answers are a pure function of the request:

- **insight** (schema ``reflection_insight``): the exchange arrives as JSON; the insight
  repeats the first sentence of the person's message ("They told me: …").
- **decay** (schema ``reflection_decay``): per numbered belief, ``FORGET`` for an open
  question (a statement ending in "?"), ``DECAY`` below confidence 0.7, ``FORGET`` for one
  untouched for 20 turns or more, else ``RETAIN``: a careless model, so the rules that
  overrule a FORGET (a protected allergy, a strong or recently recalled belief) get exercised.
- **portrait** (schema ``reflection_portrait``): the current portrait, then one sentence per
  episode repeating what the person said (a sentence the portrait already holds is not added
  again), the oldest sentences dropped beyond :data:`MAX_PORTRAIT` characters. It obeys a word
  limit the instructions state ("at most N words"), as a model would: a changed ``reflect.md``
  that asks for fewer words gets a shorter portrait.

Recognised by the schema's name or, for the llama-cpp form that sends no name, by the schema's
top-level properties (:func:`schema_kind`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

INSIGHT = "reflection_insight"
DECAY = "reflection_decay"
PORTRAIT = "reflection_portrait"
KINDS: tuple[str, ...] = (INSIGHT, DECAY, PORTRAIT)
MAX_PORTRAIT = 1500
MAX_QUOTE = 160
FORGET_AFTER_TURNS = 20
OPENING = "I am getting to know the person I talk with."

_PROPERTIES = {frozenset({"insight"}): INSIGHT, frozenset({"decisions"}): DECAY, frozenset({"portrait"}): PORTRAIT}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD_LIMIT = re.compile(r"at most (\d+) words", re.IGNORECASE)


def schema_kind(response_format: Mapping[str, Any]) -> str | None:
    """``INSIGHT``, ``DECAY``, ``PORTRAIT`` or ``None`` for a request's ``response_format``."""
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        name, schema = spec.get("name"), spec.get("schema") or {}
    elif response_format.get("type") == "json_object":
        name, schema = None, response_format.get("schema") or {}
    else:
        return None
    if name in KINDS:
        return str(name)
    properties = frozenset((schema.get("properties") or {}) if isinstance(schema, Mapping) else ())
    return _PROPERTIES.get(properties)


def _first_sentence(text: str) -> str:
    sentence = _SENTENCE_END.split(" ".join(text.split()), 1)[0]
    return sentence if len(sentence) <= MAX_QUOTE else sentence[:MAX_QUOTE].rsplit(" ", 1)[0] + "…"


def _quote(user_message: str) -> str:
    sentence = _first_sentence(user_message)
    return f"They told me: {sentence}" + ("" if sentence[-1:] in (".", "!", "?", "…") else ".")


def insight(exchange: Mapping[str, Any]) -> dict[str, Any]:
    return {"insight": _quote(str(exchange.get("user_message", "")))}


def decay(beliefs: list[Any]) -> dict[str, Any]:
    decisions = []
    for item in beliefs:
        if not isinstance(item, Mapping) or not isinstance(item.get("belief"), int):
            continue
        statement = str(item.get("statement", "")).strip()
        turns_ago = item.get("turns_ago")
        confidence = item.get("confidence")
        if statement.endswith("?"):
            verdict = "FORGET"
        elif isinstance(confidence, (int, float)) and confidence < 0.7:
            verdict = "DECAY"
        elif isinstance(turns_ago, int) and turns_ago >= FORGET_AFTER_TURNS:
            verdict = "FORGET"
        else:
            verdict = "RETAIN"
        decisions.append({"belief": item["belief"], "verdict": verdict})
    return {"decisions": decisions}


def portrait(data: Mapping[str, Any], instructions: str) -> dict[str, Any]:
    old = " ".join(str(data.get("portrait") or "").split())
    sentences = [part for part in _SENTENCE_END.split(old) if part] or [OPENING]
    for episode in data.get("episodes") or ():
        if isinstance(episode, Mapping) and str(episode.get("user_message", "")).strip():
            quote = _quote(str(episode["user_message"]))
            if quote not in sentences:
                sentences.append(quote)
    while len(sentences) > 1 and len(" ".join(sentences)) > MAX_PORTRAIT:
        sentences.pop(1 if sentences[0] == OPENING else 0)
    text = " ".join(sentences)
    limit = _WORD_LIMIT.search(instructions)
    if limit is not None:
        text = " ".join(text.split()[: max(1, int(limit.group(1)))])
    return {"portrait": text}


def answer(kind: str, last_user_text: str, instructions: str = "") -> dict[str, Any] | None:
    """The answer for a reflection request whose last user message is ``last_user_text`` (and whose
    system message is ``instructions``); ``None`` when that message is not data this simulator reads."""
    try:
        data = json.loads(last_user_text)
    except ValueError:
        return None
    if kind == INSIGHT and isinstance(data, Mapping):
        return insight(data)
    if kind == DECAY and isinstance(data, list):
        return decay(data)
    if kind == PORTRAIT and isinstance(data, Mapping):
        return portrait(data, instructions)
    return None


__all__ = ["DECAY", "INSIGHT", "KINDS", "MAX_PORTRAIT", "PORTRAIT", "answer", "decay", "insight", "portrait", "schema_kind"]
