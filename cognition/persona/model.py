"""The persona definition: who the character is, as Mirror will use it, and its content hash.

A :class:`Persona` keeps every field of the card it came from: the fields Mirror models are
attributes, everything else (the lorebook, other apps' ``extensions``, V3's assets, keys no spec
names) is kept verbatim in ``other_data``, ``extensions`` and ``card_fields``, so exporting it
writes back what was read. ``version`` hashes the content only: the same character read from a V2
JSON card and from the V3 PNG exported from it has the same version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .macros import DEFAULT_USER_NAME, substitute

__all__ = [
    "BIG_FIVE_TRAITS",
    "DEFAULT_BIG_FIVE",
    "DEFAULT_BIOGRAPHY_IMPORTANCE",
    "DEFAULT_EMOTIONS",
    "DEFAULT_LOREBOOK_IMPORTANCE",
    "DEFAULT_RELATIONSHIP",
    "BiographyEntry",
    "Persona",
    "canonical_json",
]

BIG_FIVE_TRAITS = ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism")
"""The five traits, each a score in [0, 1]."""
DEFAULT_BIG_FIVE: dict[str, float] = dict.fromkeys(BIG_FIVE_TRAITS, 0.5)
"""A trait the card does not give is 0.5: the middle of the scale, no lean either way."""
DEFAULT_EMOTIONS = ("joy", "sadness", "anger", "fear", "surprise", "disgust", "trust", "anticipation")
"""Plutchik's eight basic emotions, used when the card names no set of its own."""
DEFAULT_RELATIONSHIP: dict[str, float] = {"closeness": 0.2, "trust": 0.5}
"""A stranger: little closeness, neutral trust (each dimension a start value in [0, 1])."""
DEFAULT_BIOGRAPHY_IMPORTANCE = 0.5
"""Importance of a biography entry that does not give one."""
DEFAULT_LOREBOOK_IMPORTANCE = 0.5
"""Importance of a lorebook entry when its book gives no positive ``priority`` to normalise by."""


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, unicode kept: the same content always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class BiographyEntry:
    """One thing the character remembers of its life, with how much it matters in [0, 1].

    ``source`` is ``mirror`` (from ``extensions.mirror.biography``) or ``lorebook`` (from the
    card's ``character_book``; those stay in the book when the card is written back).
    """

    text: str
    importance: float
    source: str = "mirror"

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "importance": self.importance, "source": self.source}


@dataclass(frozen=True)
class Persona:
    """A character: the card's fields, Mirror's own keys, and everything else of the card verbatim.

    ``hard_goals`` are pursued strictly in order; ``soft_goals`` all the time. ``source_format``
    (e.g. ``chara_card_v2+json``) and ``image`` (the PNG a card came in, without its card chunks)
    say where it came from and are not part of the content: they take no part in equality or
    ``version``.
    """

    name: str
    description: str = ""
    personality: str = ""
    scenario: str = ""
    first_mes: str = ""
    mes_example: str = ""
    system_prompt: str = ""
    post_history_instructions: str = ""
    tags: tuple[str, ...] = ()
    creator: str = ""
    character_version: str = ""
    big_five: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_BIG_FIVE))
    hard_goals: tuple[str, ...] = ()
    soft_goals: tuple[str, ...] = ()
    biography: tuple[BiographyEntry, ...] = ()
    relationship: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RELATIONSHIP))
    emotions: tuple[str, ...] = DEFAULT_EMOTIONS
    other_data: dict[str, Any] = field(default_factory=dict)
    """The card's ``data`` keys Mirror does not model (``character_book``, ``alternate_greetings``,
    V3's ``nickname``, ``assets``, dates, unknown keys), verbatim."""
    extensions: dict[str, Any] = field(default_factory=dict)
    """``data.extensions`` of other apps (everything but ``mirror``), verbatim."""
    card_fields: dict[str, Any] = field(default_factory=dict)
    """Top-level keys of the card besides ``spec``, ``spec_version`` and ``data``, verbatim."""
    source_format: str = field(default="native", compare=False)
    image: bytes | None = field(default=None, compare=False, repr=False)

    def content(self) -> dict[str, Any]:
        """Everything that makes this character, as plain JSON values (what ``version`` hashes)."""
        return {
            "name": self.name, "description": self.description, "personality": self.personality,
            "scenario": self.scenario, "first_mes": self.first_mes, "mes_example": self.mes_example,
            "system_prompt": self.system_prompt, "post_history_instructions": self.post_history_instructions,
            "tags": list(self.tags), "creator": self.creator, "character_version": self.character_version,
            "big_five": dict(self.big_five), "hard_goals": list(self.hard_goals),
            "soft_goals": list(self.soft_goals), "biography": [entry.as_dict() for entry in self.biography],
            "relationship": dict(self.relationship), "emotions": list(self.emotions),
            "other_data": self.other_data, "extensions": self.extensions, "card_fields": self.card_fields,
        }

    @property
    def version(self) -> str:
        """sha256 (hex) of the canonical JSON of :meth:`content`."""
        return hashlib.sha256(canonical_json(self.content()).encode("utf-8")).hexdigest()

    def said(self, text: str, user_name: str) -> str:
        """``text`` of this card with its macros substituted for a user called ``user_name``."""
        return substitute(text, char=self.name, user=user_name, card=self.content())

    def view(self, user_name: str | None = None) -> dict[str, Any]:
        """The persona as the cycle will use it (what ``mirror persona show --json`` prints): the
        card's text as the prompts will carry it, macros substituted for a user called
        ``user_name`` (:data:`~mirror.cognition.persona.macros.DEFAULT_USER_NAME` when ``None``),
        the greeting that opens a conversation, the Big Five, goals and biography."""
        user = DEFAULT_USER_NAME if user_name is None else user_name
        return {
            "name": self.name, "user_name": user,
            "description": self.said(self.description, user), "personality": self.said(self.personality, user),
            "scenario": self.said(self.scenario, user), "greeting": self.said(self.first_mes, user),
            "example_messages": self.said(self.mes_example, user),
            "system_prompt": self.said(self.system_prompt, user),
            "post_history_instructions": self.said(self.post_history_instructions, user),
            "big_five": dict(self.big_five), "hard_goals": list(self.hard_goals),
            "soft_goals": list(self.soft_goals),
            "biography": [{**entry.as_dict(), "text": self.said(entry.text, user)} for entry in self.biography],
            "emotions": list(self.emotions), "relationship": dict(self.relationship),
            "source_format": self.source_format, "version": self.version,
        }
