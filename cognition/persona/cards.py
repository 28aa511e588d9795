"""Character Card V2/V3 documents (and native TOML tables) to a :class:`Persona`, and back.

A card is ``{"spec": "chara_card_v2" | "chara_card_v3", "spec_version": ..., "data": {...}}``;
a native TOML file is either the same shape or the ``data`` table itself at the top level.
Mirror's keys live under ``data.extensions.mirror``; anything else the card holds is kept
verbatim. Every key Mirror reads is checked, and the first wrong one raises
:class:`~mirror.cognition.errors.PersonaInvalid` naming the file and the key's dotted path.
"""

from __future__ import annotations

import math
from typing import Any

from mirror.cognition.errors import PersonaInvalid

from .lorebook import NotACard, is_lorebook, lorebook_biography
from .model import (
    BIG_FIVE_TRAITS,
    DEFAULT_BIG_FIVE,
    DEFAULT_BIOGRAPHY_IMPORTANCE,
    DEFAULT_EMOTIONS,
    DEFAULT_RELATIONSHIP,
    BiographyEntry,
    Persona,
)

__all__ = ["MIRROR_KEYS", "SPEC_V2", "SPEC_V3", "STRING_FIELDS", "from_document", "to_card"]

SPEC_V2 = "chara_card_v2"
SPEC_V3 = "chara_card_v3"
V3_SPEC_VERSION = "3.0"
STRING_FIELDS = (
    "description", "personality", "scenario", "first_mes", "mes_example", "system_prompt",
    "post_history_instructions", "creator", "character_version",
)
"""The card's text fields Mirror models; each is "" when absent."""
MIRROR_KEYS = ("big_five", "hard_goals", "soft_goals", "biography", "relationship", "emotions")
"""The keys of ``data.extensions.mirror``; any other key there is an error (a typo, not data)."""
_MODELLED = {"name", "tags", "extensions", *STRING_FIELDS}


def _number(file: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PersonaInvalid(file, key, f"{value!r} is not a number")
    if not 0.0 <= value <= 1.0:
        raise PersonaInvalid(file, key, f"{value!r} is not in [0, 1]")
    return value


def _text(file: str, key: str, value: Any, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise PersonaInvalid(file, key, f"{value!r} is not a string")
    if not empty and not value.strip():
        raise PersonaInvalid(file, key, "is empty")
    return value


def _table(file: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PersonaInvalid(file, key, f"expected a table/object, got {type(value).__name__}")
    return value


def _texts(file: str, key: str, value: Any, *, unique: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise PersonaInvalid(file, key, f"expected a list of strings, got {type(value).__name__}")
    items = tuple(_text(file, f"{key}[{index}]", item, empty=False) for index, item in enumerate(value))
    if unique and len(set(items)) != len(items):
        duplicate = next(item for item in items if items.count(item) > 1)
        raise PersonaInvalid(file, key, f"{duplicate!r} is named twice")
    return items


def _big_five(file: str, key: str, value: Any) -> dict[str, float]:
    table = _table(file, key, value)
    for trait in table:
        if trait not in BIG_FIVE_TRAITS:
            raise PersonaInvalid(file, f"{key}.{trait}", f"unknown trait; the five are {', '.join(BIG_FIVE_TRAITS)}")
    return {trait: _number(file, f"{key}.{trait}", table.get(trait, DEFAULT_BIG_FIVE[trait]))
            for trait in BIG_FIVE_TRAITS}


def _biography(file: str, key: str, value: Any) -> tuple[BiographyEntry, ...]:
    if not isinstance(value, list):
        raise PersonaInvalid(file, key, f"expected a list of entries, got {type(value).__name__}")
    entries = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        entry = _table(file, where, item)
        for unknown in set(entry) - {"text", "importance"}:
            raise PersonaInvalid(file, f"{where}.{unknown}", "unknown key; an entry has text and importance")
        if "text" not in entry:
            raise PersonaInvalid(file, f"{where}.text", "is missing")
        text = _text(file, f"{where}.text", entry["text"], empty=False)
        importance = _number(file, f"{where}.importance", entry.get("importance", DEFAULT_BIOGRAPHY_IMPORTANCE))
        entries.append(BiographyEntry(text, importance, "mirror"))
    return tuple(entries)


def _relationship(file: str, key: str, value: Any) -> dict[str, float]:
    table = _table(file, key, value)
    for dimension in table:
        if not dimension.strip():
            raise PersonaInvalid(file, key, "a dimension has an empty name")
    return {dimension: _number(file, f"{key}.{dimension}", start) for dimension, start in table.items()}


def from_document(document: Any, file: str, container: str) -> Persona:
    """The persona in a parsed card (or native TOML table); ``container`` is json, png or toml."""
    top = _table(file, "$", document)
    if is_lorebook(top):
        raise NotACard(file)
    if "data" in top or "spec" in top:
        spec = top.get("spec")
        if spec not in (SPEC_V2, SPEC_V3):
            raise PersonaInvalid(file, "spec", f"{spec!r} is not {SPEC_V2!r} or {SPEC_V3!r}")
        data, prefix = _table(file, "data", top.get("data")), "data."
        card_fields = {k: v for k, v in top.items() if k not in ("spec", "spec_version", "data")}
        source_format = f"{spec}+{container}"
    else:
        data, prefix, card_fields, source_format = top, "", {}, f"native+{container}"
    if "name" not in data:
        raise PersonaInvalid(file, f"{prefix}name", "is missing")
    name = _text(file, f"{prefix}name", data["name"], empty=False)
    texts = {key: _text(file, f"{prefix}{key}", data.get(key, "")) for key in STRING_FIELDS}
    tags = _texts(file, f"{prefix}tags", data.get("tags", []))
    extensions = dict(_table(file, f"{prefix}extensions", data.get("extensions", {})))
    mirror = _table(file, f"{prefix}extensions.mirror", extensions.pop("mirror", {}))
    where = f"{prefix}extensions.mirror"
    for unknown in set(mirror) - set(MIRROR_KEYS):
        raise PersonaInvalid(file, f"{where}.{unknown}", f"unknown key; Mirror's keys are {', '.join(MIRROR_KEYS)}")
    other_data = {k: v for k, v in data.items() if k not in _MODELLED}
    biography = _biography(file, f"{where}.biography", mirror.get("biography", []))
    lore = lorebook_biography(file, f"{prefix}character_book", data.get("character_book"))
    return Persona(
        name=name, description=texts["description"], personality=texts["personality"],
        scenario=texts["scenario"], first_mes=texts["first_mes"], mes_example=texts["mes_example"],
        system_prompt=texts["system_prompt"], post_history_instructions=texts["post_history_instructions"],
        creator=texts["creator"], character_version=texts["character_version"], tags=tags,
        big_five=_big_five(file, f"{where}.big_five", mirror.get("big_five", {})),
        hard_goals=_texts(file, f"{where}.hard_goals", mirror.get("hard_goals", [])),
        soft_goals=_texts(file, f"{where}.soft_goals", mirror.get("soft_goals", [])),
        biography=biography + lore,
        relationship=_relationship(file, f"{where}.relationship", mirror.get("relationship", DEFAULT_RELATIONSHIP)),
        emotions=_texts(file, f"{where}.emotions", mirror.get("emotions", list(DEFAULT_EMOTIONS)), unique=True),
        other_data=other_data, extensions=extensions, card_fields=card_fields, source_format=source_format,
    )


def to_card(persona: Persona) -> dict[str, Any]:
    """A V3 card of ``persona``: its fields, the kept ones verbatim, Mirror's under ``extensions.mirror``.

    Lorebook entries stay in ``character_book`` (kept in ``other_data``), not in the mirror
    biography, so reading the card back gives the same persona.
    """
    mirror = {
        "big_five": dict(persona.big_five), "hard_goals": list(persona.hard_goals),
        "soft_goals": list(persona.soft_goals),
        "biography": [{"text": e.text, "importance": e.importance} for e in persona.biography if e.source == "mirror"],
        "relationship": dict(persona.relationship), "emotions": list(persona.emotions),
    }
    data: dict[str, Any] = {"name": persona.name}
    data.update({key: getattr(persona, key) for key in STRING_FIELDS})
    data["tags"] = list(persona.tags)
    data.update(persona.other_data)
    data["extensions"] = {**persona.extensions, "mirror": mirror}
    return {**persona.card_fields, "spec": SPEC_V3, "spec_version": V3_SPEC_VERSION, "data": data}
