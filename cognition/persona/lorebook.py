"""Lorebooks: a card's ``character_book``, and SillyTavern's World Info files beside cards.

A character card may carry its lorebook (``data.character_book``, the V2 spec's shape:
``{"entries": [{"keys", "content", "insertion_order", "enabled", "priority"?, ...}]}``).
SillyTavern also keeps lorebooks on their own, as World Info files (``Eldoria.json`` beside its
default card Seraphina): ``{"entries": {"0": {"uid", "key", "content", "order", "disable", ...}}}``.
Such a file is not a character (it has no name, no description), so reading one as a card is
refused with :class:`NotACard`, which says what it is and how to attach it; attached
(:func:`with_lorebook`), it becomes the persona's ``character_book`` — converted as SillyTavern
converts it when it embeds a World Info file in a card (``convertWorldInfoToCharacterBook``) —
and its entries become the persona's lorebook biography.

Entries become biography entries with importance ``priority`` / the book's largest ``priority``
(:data:`~mirror.cognition.persona.model.DEFAULT_LOREBOOK_IMPORTANCE` without one); a disabled
entry (``enabled: false``) or one with empty content gives none, as SillyTavern never inserts it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from mirror.cognition.errors import PersonaInvalid

from .model import DEFAULT_LOREBOOK_IMPORTANCE, BiographyEntry, Persona

__all__ = ["ATTACH_HINT", "NotACard", "is_lorebook", "lorebook_biography", "lorebook_of", "with_lorebook"]

ATTACH_HINT = ("attach it to a persona with `mirror persona import-lorebook PERSONA FILE` "
               "(POST /v1/personas/{name}/lorebook) or `mirror persona push CARD --lorebook FILE`")
_CARD_KEYS = ("spec", "data", "name", "description", "first_mes", "char_name")


class NotACard(PersonaInvalid):
    """A lorebook (World Info, or a bare ``character_book``) given where a character card was expected."""

    def __init__(self, file: str) -> None:
        super().__init__(file, "$", f"this is a World Info lorebook, not a character card: {ATTACH_HINT}")


def is_lorebook(document: Any) -> bool:
    """A top-level object with ``entries`` (a World Info map or a ``character_book`` list) and
    none of a card's keys."""
    return (isinstance(document, dict) and isinstance(document.get("entries"), dict | list)
            and not any(key in document for key in _CARD_KEYS))


def _table(file: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PersonaInvalid(file, key, f"expected an object, got {type(value).__name__}")
    return value


def _world_info_entry(file: str, key: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One World Info entry in the ``character_book`` shape (SillyTavern's own conversion)."""
    keys = entry.get("key", [])
    if not isinstance(keys, list):
        raise PersonaInvalid(file, f"{key}.key", f"expected a list of strings, got {type(keys).__name__}")
    converted: dict[str, Any] = {
        "id": entry.get("uid"), "keys": keys, "secondary_keys": entry.get("keysecondary", []),
        "comment": entry.get("comment", ""), "content": entry.get("content", ""),
        "constant": entry.get("constant", False), "selective": entry.get("selective", False),
        "insertion_order": entry.get("order", 100), "enabled": not entry.get("disable", False),
        "position": "before_char" if entry.get("position", 0) == 0 else "after_char",
    }
    known = {"uid", "key", "keysecondary", "comment", "content", "constant", "selective", "order", "disable"}
    extensions = {name: value for name, value in entry.items() if name not in known}
    if extensions:
        converted["extensions"] = extensions
    return converted


def lorebook_of(document: Any, file: str, name: str = "") -> dict[str, Any]:
    """The ``character_book`` a lorebook file makes (a World Info map converted; a ``character_book``
    as it is), validated; ``name`` names the book when the file does not."""
    table = _table(file, "$", document)
    raw = table.get("entries")
    if isinstance(raw, dict):
        entries = [_world_info_entry(file, f"entries.{index}", _table(file, f"entries.{index}", entry))
                   for index, entry in raw.items()]
        book = {key: value for key, value in table.items() if key != "entries"}
        book = {"name": name, **book, "entries": entries} if name or "name" in book else {**book, "entries": entries}
    elif isinstance(raw, list):
        book = dict(table)
    else:
        raise PersonaInvalid(file, "entries", "is missing (a lorebook is an object with entries)")
    lorebook_biography(file, "entries", book)  # every entry checked now, not when a prompt needs it
    return book


def lorebook_biography(file: str, key: str, book: Any) -> tuple[BiographyEntry, ...]:
    """The book's entries as biography (see the module docstring); ``key`` is where the book sits."""
    if book is None:
        return ()
    table = _table(file, key, book)
    raw = table.get("entries", [])
    if not isinstance(raw, list):
        raise PersonaInvalid(file, f"{key}.entries", f"expected a list, got {type(raw).__name__}")
    entries = [_table(file, f"{key}.entries[{index}]", item) for index, item in enumerate(raw)]
    priorities: list[float | None] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry.get("content", ""), str):
            raise PersonaInvalid(file, f"{key}.entries[{index}].content", f"{entry['content']!r} is not a string")
        priority = entry.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int | float)
                                     or not math.isfinite(priority)):
            raise PersonaInvalid(file, f"{key}.entries[{index}].priority", f"{priority!r} is not a number")
        priorities.append(priority)
    largest = max((p for p in priorities if p is not None), default=0)
    biography = []
    for entry, priority in zip(entries, priorities, strict=True):
        content = entry.get("content", "")
        if not content.strip() or entry.get("enabled", True) is False:
            continue
        if largest > 0 and priority is not None:
            importance = min(1.0, max(0.0, priority / largest))
        else:
            importance = DEFAULT_LOREBOOK_IMPORTANCE
        biography.append(BiographyEntry(content, importance, "lorebook"))
    return tuple(biography)


def with_lorebook(persona: Persona, book: dict[str, Any], file: str) -> Persona:
    """``persona`` with ``book`` as its ``character_book`` (replacing any it had) and its lorebook
    biography made from it; the ``mirror`` biography is kept."""
    own = tuple(entry for entry in persona.biography if entry.source != "lorebook")
    return replace(persona, other_data={**persona.other_data, "character_book": book},
                   biography=own + lorebook_biography(file, "character_book", book))
