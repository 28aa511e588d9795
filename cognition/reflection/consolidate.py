"""Reflection's consolidation: gather, rewrite the portrait, validate, check its health.

- **Gather** (:func:`consolidation_data`): the current portrait ("" before the first), the
  pending insights and the recent episodes (at most ``max_episodes`` exchanges).
- **Consolidate**: one schema-constrained call (``reflect.md``, schema ``reflection_portrait``:
  ``{"portrait": str}``) with the ordered tasks preserve → integrate → synthesize → restore
  specificity. An answer that is not the schema, or an empty portrait, is a failure (the whole
  reflection fails: no half reflection).
- **Validate** (:func:`validate`): at least ``min_chars`` characters and at least
  ``min_length_ratio`` of the old portrait's length (the first portrait: any length above
  ``min_chars``), at most ``max_chars``; else the reflection is recorded rejected with the
  reason, and the old portrait stays byte for byte.
- **Health** (:func:`unique_ratio`, :func:`health_warning`): unique words over words; below
  ``warn_unique_ratio`` the reflection records a warning (it is still accepted).
"""

from __future__ import annotations

import re
from typing import Any

from mirror.cognition.llm import ChatRequest, JsonSchema
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.structured import parse_json_object
from mirror.projections.state import ConversationState

from .calls import UnusableReflection, request
from .policy import ReflectionPolicy

PORTRAIT_SCHEMA = JsonSchema(
    "reflection_portrait",
    {
        "type": "object",
        "properties": {"portrait": {"type": "string", "minLength": 1}},
        "required": ["portrait"],
        "additionalProperties": False,
    },
)
WORDS_PER_CHAR = 1 / 6
"""How many words a character budget allows, roughly (the prompt states words)."""
_WORD = re.compile(r"[\w']+")


def consolidation_data(state: ConversationState, policy: ReflectionPolicy) -> dict[str, Any]:
    """What the consolidation is given: the portrait, the pending insights, the recent episodes."""
    episodes = state.recent_turns[-policy.max_episodes:]
    return {
        "portrait": state.portrait or "",
        "insights": [insight.text for insight in state.pending_insights],
        "episodes": [{"user_message": turn.user_message, "reply": turn.reply} for turn in episodes],
    }


def consolidation_request(state: ConversationState, prompts: PromptSet, config: MirrorConfig,
                          policy: ReflectionPolicy) -> ChatRequest:
    max_words = max(20, int(policy.max_chars * WORDS_PER_CHAR))
    system = prompts.render("reflect.md", max_words=max_words)
    return request(system, consolidation_data(state, policy), PORTRAIT_SCHEMA, prompts, config)


def parse_portrait(content: str) -> str:
    """The portrait of an answer (ends stripped, inner text as written); an ``LLMError`` if unusable."""
    fields = parse_json_object(content, PORTRAIT_SCHEMA.schema, schema_name=PORTRAIT_SCHEMA.name)
    portrait = str(fields["portrait"]).strip()
    if not portrait:
        raise UnusableReflection("the consolidation returned an empty portrait")
    return portrait


def validate(old: str | None, new: str, policy: ReflectionPolicy) -> tuple[bool, str]:
    """``(accepted, reason)``: ``reason`` says which check a rejected portrait failed ("" if none)."""
    old_length = len(old or "")
    if len(new) < policy.min_chars:
        return False, f"too short: {len(new)} characters, the minimum is {policy.min_chars}"
    if len(new) < policy.min_length_ratio * old_length:
        return False, (f"shrank too much: {len(new)} characters against {old_length} before, the minimum is "
                       f"{policy.min_length_ratio:.0%} of the old length")
    if len(new) > policy.max_chars:
        return False, f"too long: {len(new)} characters, the maximum is {policy.max_chars}"
    return True, ""


def unique_ratio(text: str) -> float:
    """Distinct words over words (case-folded), rounded to 4 places; 1.0 for no words."""
    words = [word.lower() for word in _WORD.findall(text)]
    if not words:
        return 1.0
    return round(len(set(words)) / len(words), 4)


def health_warning(ratio: float, policy: ReflectionPolicy) -> str:
    """The warning a vocabulary this repetitive earns ("" when healthy)."""
    if ratio < policy.warn_unique_ratio:
        return f"repetitive vocabulary: unique-word ratio {ratio:.2f} is below {policy.warn_unique_ratio:.2f}"
    return ""


__all__ = [
    "PORTRAIT_SCHEMA", "consolidation_data", "consolidation_request", "health_warning", "parse_portrait",
    "unique_ratio", "validate",
]
