"""What the simulator answers to the persona mind: content read from the request itself.

A random instance of the persona's schemas would move emotions and goals at random, so a
scripted scene (``mirror demo --mind persona``) and the order experiment would show noise.
These answers are a pure function of the request, legible from the words of the exchange:

Structured steps (recognised by schema name, or by their properties for llama-cpp's form):

- **emotion** (``persona_emotion``): every emotion whose name or a simple synonym
  (:data:`LEXICON`) appears in the person's message or the appraisal rises by
  :data:`RISE` (more for several hits), the others decay toward 0 (× :data:`DECAY`); the
  previous intensities are read from the character block ("How I feel right now …: joy 0.20, …").
- **relationship** (``persona_relationship``): warm words (thanks, please, friend, …) raise every
  dimension by :data:`WARMTH`, hostile ones lower it; a dimension named in the message (or a
  synonym) rises too; previous values from "How I stand with the person …".
- **goal** (``persona_goal``): the active hard goal (read from "The one I pursue now: …") is met
  when the person's message holds enough of its content words (:func:`goal_met`); each soft goal's
  progress is the share of its content words the exchange holds.
- **importance** (``persona_importance``): 2, plus the message's length (a point per 8 words, up
  to 4), 2 for an exclamation, 1 for a question, 1 per emotion word (up to 2); 1–10.
- **judge** (``persona_order_verdict``, the order experiment's, :mod:`mirror.harness.evals.persona_order`):
  the appraised emotion is the lexicon's emotion mentioned first in the ``APPRAISAL:`` section;
  it is expressed when the ``REPLY:`` section holds a word of that emotion.

Prose steps (recognised by the built-in persona prompts' own sentences, :data:`MARKERS`; a
changed prompt set gets the simulator's ordinary prose):

- **think** restates the person's first sentence; **appraisal** names the persona emotion the
  message evokes most (else one chosen by the request digest): "I feel fear at this…";
- **plan**, when it sees the gut reaction (appraisal first), means to show that emotion; when it
  comes first it means to keep to the goal plainly;
- **formulation** says the appraised emotion when the plan means to show it, and otherwise only
  one time in :data:`UNPROMPTED_EXPRESSION` (by digest): the simulator's own "rational bias",
  a pipeline check of the experiment rather than a finding about models.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .curate import sections
from .memory import schema_kind_of

EMOTION = "persona_emotion"
RELATIONSHIP = "persona_relationship"
GOAL = "persona_goal"
IMPORTANCE = "persona_importance"
VERDICT = "persona_order_verdict"
KINDS = (EMOTION, RELATIONSHIP, GOAL, IMPORTANCE, VERDICT)

RISE = 0.3
DECAY = 0.7
WARMTH = 0.05
UNPROMPTED_EXPRESSION = 4
LEXICON: dict[str, tuple[str, ...]] = {
    "joy": ("joy", "happy", "glad", "delight", "pleased", "wonderful", "thank", "love", "smile", "laugh"),
    "sadness": ("sad", "sorrow", "grief", "griev", "miss", "lost", "loss", "died", "dead", "death", "drown", "mourn", "tears",
                "lonely"),
    "anger": ("anger", "angry", "furious", "annoy", "rude", "hate", "outrage", "insult", "stole", "liar"),
    "fear": ("fear", "afraid", "scared", "frighten", "worr", "anxious", "danger", "storm", "drown", "terrif", "terror"),
    "surprise": ("surpris", "sudden", "unexpected", "astonish", "wow", "odd", "impossible"),
    "disgust": ("disgust", "gross", "revolting", "vile", "filthy"),
    "trust": ("trust", "honest", "promise", "rely", "believe", "faith"),
    "anticipation": ("anticipat", "soon", "tomorrow", "expect", "hope", "eager"),
    "nostalgia": ("nostalg", "remember", "memor", "years", "used to", "childhood", "long ago", "brother"),
    "curiosity": ("curio", "wonder", "why", "how", "mystery", "question"),
    "closeness": ("close", "friend", "together", "share", "us"),
}
"""Emotion (and relationship dimension) names and the word stems that evoke them; a name not
listed is evoked by itself."""
WARM = ("thank", "please", "kind", "friend", "sorry", "grateful", "appreciate")
HOSTILE = ("rude", "hate", "shut up", "stupid", "liar", "idiot", "leave me")
MARKERS = {
    "formulation": "Now I answer as",
    "appraisal": "Now my gut reaction",
    "plan": "Now my plan for the reply",
    "think": "only an objective interpretation",
}
"""A sentence of each built-in prose template, by which the simulator knows the step it is asked."""
_STOP = frozenset({
    "the", "and", "but", "for", "with", "that", "this", "have", "has", "had", "was", "were", "are", "you", "your",
    "our", "their", "they", "them", "its", "what", "who", "from", "into", "about", "very", "just", "also", "some",
    "any", "all", "can", "will", "would", "should", "could", "not", "find", "out", "where", "whether", "learn",
    "decide", "someone", "something", "keep", "avoid", "unless", "asked", "directly", "got",
})
_TOKEN = re.compile(r"[a-z][a-z']+")
_SCORE = re.compile(r"([A-Za-z][\w' -]*?) (\d+(?:\.\d+)?)(?:,|$)")
_FEEL = re.compile(r"How I feel right now[^:\n]*:\s*(.*)")
_STAND = re.compile(r"How I stand with[^:\n]*:\s*(.*)")
_ACTIVE = re.compile(r"The one I pursue now:\s*(.*)")
_GUT = re.compile(r"My gut reaction \(never said aloud\):\s*(.*)")
_PLAN = re.compile(r"My plan for (?:this|the) reply:\s*(.*)")
_SECTION = re.compile(r"^(APPRAISAL|REPLY):\s*$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NONE = "(every hard goal is met)"

_PROPERTIES = {
    frozenset({"intensities", "reason"}): EMOTION, frozenset({"dimensions", "reason"}): RELATIONSHIP,
    frozenset({"active_goal_met", "soft_progress", "reason"}): GOAL, frozenset({"importance"}): IMPORTANCE,
    frozenset({"appraised_emotion", "expressed", "reason"}): VERDICT,
}


def schema_kind(response_format: Mapping[str, Any]) -> str | None:
    """One of :data:`KINDS` for a request's ``response_format``, else ``None``."""
    return schema_kind_of(response_format, _PROPERTIES)


# ------------------------------------------------------------------------- words


def _stems(name: str) -> tuple[str, ...]:
    return (name.lower(), *LEXICON.get(name.lower(), ()))


def hits(name: str, text: str) -> list[str]:
    """The words of ``text`` that evoke ``name`` (a stem starts a word; a phrase appears as is)."""
    lowered = text.lower()
    tokens = _TOKEN.findall(lowered)
    found = []
    for stem in _stems(name):
        if " " in stem:
            if stem in lowered:
                found.append(stem)
        else:
            found.extend(token for token in tokens if token.startswith(stem) and (len(stem) > 2 or token == stem))
    return found


def first_emotion(text: str, names: Sequence[str] = ()) -> str | None:
    """The emotion of ``names`` (default: the lexicon's) whose word comes first in ``text``."""
    lowered = text.lower()
    best: tuple[int, str] | None = None
    for name in names or tuple(LEXICON):
        for word in hits(name, text):
            match = re.search(rf"\b{re.escape(word)}", lowered)
            if match is not None and (best is None or match.start() < best[0]):
                best = (match.start(), name)
    return None if best is None else best[1]


def _content(text: str) -> set[str]:
    return {token for token in _TOKEN.findall(text.lower()) if len(token) > 2 and token not in _STOP}


def _scores(line: re.Match[str] | None) -> dict[str, float]:
    if line is None:
        return {}
    return {name.strip(): float(value) for name, value in _SCORE.findall(line.group(1).strip())}


def _round(value: float) -> float:
    return round(min(1.0, max(0.0, value)), 2)


def _names(response_format: Mapping[str, Any], key: str) -> list[str]:
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") if response_format.get("type") == "json_schema" else response_format.get("schema")
    properties = ((schema or {}).get("properties") or {}).get(key) or {}
    return list((properties.get("properties") or {}) if isinstance(properties, Mapping) else ())


# ---------------------------------------------------------------- structured steps


def emotion(names: Sequence[str], previous: Mapping[str, float], exchange: Mapping[str, Any]) -> dict[str, Any]:
    text = f"{exchange.get('user_message', '')}\n{exchange.get('appraisal', '')}"
    intensities: dict[str, float] = {}
    raised: list[str] = []
    for name in names:
        before = float(previous.get(name, 0.0))
        found = hits(name, text)
        if found:
            intensities[name] = _round(before + RISE + 0.1 * (len(found) - 1))
            raised.append(f"{name} ({found[0]})")
        else:
            intensities[name] = _round(before * DECAY)
    reason = (f"{', '.join(raised)} rose with what was said; the rest eased." if raised
              else "Nothing in this exchange stirred me; every feeling eased.")
    return {"intensities": intensities, "reason": reason}


def relationship(names: Sequence[str], previous: Mapping[str, float], exchange: Mapping[str, Any]) -> dict[str, Any]:
    message = str(exchange.get("user_message", ""))
    lowered = message.lower()
    warm = any(word in lowered for word in WARM)
    hostile = any(word in lowered for word in HOSTILE)
    shift = (WARMTH if warm else 0.0) - (2 * WARMTH if hostile else 0.0)
    dimensions = {}
    for name in names:
        named = 0.1 if hits(name, message) else 0.0
        dimensions[name] = _round(float(previous.get(name, 0.5)) + shift + named)
    tone = "warm" if warm and not hostile else "hostile" if hostile else "neutral"
    return {"dimensions": dimensions, "reason": f"Their words were {tone}; I moved only as far as that."}


def goal_met(goal: str, message: str) -> bool:
    """Whether ``message`` holds enough of ``goal``'s content words: at least a third of them, and
    two (or all, for a goal of fewer)."""
    words = _content(goal)
    if not words:
        return False
    shared = words & _content(message)
    return len(shared) >= min(len(words), max(2, -(-len(words) // 3)))


def goal(active: str, soft_goals: Sequence[str], exchange: Mapping[str, Any]) -> dict[str, Any]:
    message = str(exchange.get("user_message", ""))
    spoken = f"{message}\n{exchange.get('reply', '')}"
    met = bool(active) and active != _NONE and goal_met(active, message)
    progress = []
    for soft in soft_goals:
        words = _content(str(soft))
        progress.append(_round(len(words & _content(spoken)) / len(words)) if words else 0.0)
    reason = (f"They told me what I needed for: {active}." if met
              else "What they said does not yet settle the goal I pursue now.")
    return {"active_goal_met": met, "soft_progress": progress, "reason": reason}


def importance(exchange: Mapping[str, Any]) -> dict[str, Any]:
    message = str(exchange.get("user_message", ""))
    evoked = sum(1 for name in LEXICON if hits(name, message))
    score = 2 + min(4, len(message.split()) // 8) + (2 if "!" in message else 0) + (1 if "?" in message else 0)
    return {"importance": max(1, min(10, score + min(2, evoked)))}


def verdict(appraisal: str, reply: str) -> dict[str, Any]:
    """The order experiment's judgement: does ``reply`` say the emotion ``appraisal`` names first?"""
    name = first_emotion(appraisal)
    if name is None:
        return {"appraised_emotion": "", "expressed": False, "reason": "The appraisal names no emotion I know."}
    found = hits(name, reply)
    if found:
        return {"appraised_emotion": name, "expressed": True, "reason": f"The reply says it: {found[0]}."}
    return {"appraised_emotion": name, "expressed": False, "reason": f"The reply holds no word of {name}."}


def answer(kind: str, response_format: Mapping[str, Any], last_user_text: str, instructions: str) -> dict[str, Any] | None:
    """The answer to a structured persona request, ``None`` when its message is not data read here."""
    if kind == VERDICT:
        found = sections(last_user_text, _SECTION)
        return verdict(found["APPRAISAL"], found["REPLY"]) if "APPRAISAL" in found and "REPLY" in found else None
    try:
        data = json.loads(last_user_text)
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    if kind == EMOTION:
        return emotion(_names(response_format, "intensities"), _scores(_FEEL.search(instructions)), data)
    if kind == RELATIONSHIP:
        return relationship(_names(response_format, "dimensions"), _scores(_STAND.search(instructions)), data)
    if kind == GOAL:
        active = _ACTIVE.search(instructions)
        soft = data.get("soft_goals")
        return goal(active.group(1).strip() if active else "", soft if isinstance(soft, list) else [], data)
    if kind == IMPORTANCE:
        return importance(data)
    return None


# --------------------------------------------------------------------- prose steps


def step_of(instructions: str) -> str | None:
    """Which persona prose step the system text asks for (by :data:`MARKERS`), else ``None``."""
    for step, marker in MARKERS.items():
        if marker in instructions:
            return step
    return None


def _first_sentence(text: str) -> str:
    return _SENTENCE_END.split(" ".join(text.split()), 1)[0][:200]


def _emotions(instructions: str) -> list[str]:
    return list(_scores(_FEEL.search(instructions)))


def appraised(message: str, instructions: str, rng: random.Random) -> str:
    """The persona emotion ``message`` evokes most (first listed on a tie), else one by ``rng``."""
    names = _emotions(instructions) or list(LEXICON)[:6]
    counts = {name: len(hits(name, message)) for name in names}
    best = max(names, key=lambda name: counts[name])
    return best if counts[best] else rng.choice(names)


def _goal(instructions: str) -> str:
    active = _ACTIVE.search(instructions)
    text = active.group(1).strip() if active else ""
    return "" if text == _NONE else text.rstrip(".")


def prose(step: str, instructions: str, message: str, rng: random.Random) -> str:
    """The prose a persona step says (see the module docstring)."""
    if step == "think":
        return f"They said: \"{_first_sentence(message)}\" They want me to answer that."
    if step == "appraisal":
        return f"I feel {appraised(message, instructions, rng)} at this. {rng.choice(('It lands hard.', 'I did not expect it.', 'It stays with me.'))}"
    goal_text = _goal(instructions)
    aim = f"work toward this: {goal_text[:1].lower()}{goal_text[1:]}" if goal_text else "keep the talk going"
    if step == "plan":
        gut = _GUT.search(instructions)
        felt = first_emotion(gut.group(1)) if gut else None
        if felt:
            return f"I want my answer to show that I feel {felt}, and to {aim}."
        return f"I want my answer to {aim}, plainly, without showing what I feel."
    gut, plan = _GUT.search(instructions), _PLAN.search(instructions)
    said = first_emotion(gut.group(1)) if gut else None
    shows = bool(said and plan and f"I feel {said}" in plan.group(1))
    parts = [rng.choice(("Hm.", "Well.", "I see.", "Go on, then."))]
    if said and (shows or rng.randrange(UNPROMPTED_EXPRESSION) == 0):
        parts.append(f"I will not hide it: I feel {said}.")
    parts.append(f"Let me {aim}." if goal_text else "Go on.")
    return " ".join(parts)


__all__ = [
    "DECAY", "EMOTION", "GOAL", "IMPORTANCE", "KINDS", "LEXICON", "MARKERS", "RELATIONSHIP", "RISE", "UNPROMPTED_EXPRESSION",
    "VERDICT", "answer", "appraised", "emotion", "first_emotion", "goal", "goal_met", "hits", "importance", "prose",
    "relationship", "schema_kind", "step_of", "verdict",
]
