"""The macros front ends write in cards, substituted as SillyTavern substitutes them.

Cards are written for SillyTavern and its kin, whose text says ``{{char}}`` for the character and
``{{user}}`` for the person talking to it (and, in older cards, ``<BOT>`` and ``<USER>``). A model
that reads the macros raw answers as if someone were called "{{user}}", so every piece of a card
that reaches a prompt goes through :func:`substitute` first: the description, personality,
scenario, example messages, system prompt, post-history instructions, the greeting, and the
lorebook and biography entries (substituted once, when the persona is chosen, so their vectors
are the vectors of what the model reads).

What is substituted — SillyTavern's set (``public/scripts/macros.js``, ``substituteParams``) for
a card's static text, all case-insensitive:

- ``{{char}}``, ``<BOT>``, ``<CHAR>``, and (there are no group chats) ``{{group}}``,
  ``{{charIfNotGroup}}``, ``<GROUP>``, ``<CHARIFNOTGROUP>`` → the character's name;
- ``{{user}}``, ``<USER>`` → the user's name (:data:`DEFAULT_USER_NAME` unless the conversation
  was given one);
- the card's own fields, before the names (so the names inside them are substituted too):
  ``{{description}}``, ``{{personality}}``, ``{{scenario}}``, ``{{mesExamples}}``,
  ``{{charPrompt}}`` (the system prompt), ``{{charJailbreak}}`` (post-history instructions),
  ``{{charVersion}}`` / ``{{char_version}}``; ``{{persona}}`` (the user's own description, which
  Mirror does not keep) and ``{{original}}`` (the front end's own prompt that a card's prompt
  overrides; Mirror's templates stay around it anyway) are empty;
- text formatting: ``{{newline}}`` → a line break, ``{{trim}}`` (with the line breaks around it)
  and ``{{noop}}`` → nothing, ``{{// a comment}}`` → nothing, ``{{reverse:text}}`` → the text
  reversed.

What is **not** substituted, and stays as written: the macros whose value is not a function of
the card — ``{{random}}``, ``{{pick}}``, ``{{roll}}`` (chance), ``{{time}}``, ``{{date}}``,
``{{weekday}}``, ``{{isotime}}``, ``{{isodate}}``, ``{{datetimeformat}}``, ``{{time_UTC±N}}``,
``{{timeDiff}}``, ``{{idle_duration}}`` (the clock), ``{{lastMessage}}`` and kin, ``{{input}}``,
``{{model}}`` and the variables. A persona's prompts are rebuilt by ``replay verify`` and
``recompute`` from the log alone; a value drawn at render time would make the rebuilt request
differ from the recorded one (a divergence where nothing diverged), and one drawn once when the
persona is chosen would freeze a "time" that is soon wrong. The prompts already carry the
conversation itself.

:func:`substitute` is pure: the same text, names and card always give the same prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["CARD_MACROS", "DEFAULT_USER_NAME", "LEFT_AS_WRITTEN", "substitute"]

DEFAULT_USER_NAME = "User"
"""The user's name when a conversation is given none: SillyTavern's own default (``name1``)."""

CARD_MACROS: dict[str, str] = {
    "description": "description", "personality": "personality", "scenario": "scenario",
    "mesExamples": "mes_example", "charPrompt": "system_prompt", "charJailbreak": "post_history_instructions",
    "charVersion": "character_version", "char_version": "character_version",
}
"""Macro name → the card field it stands for."""
_EMPTY_MACROS = ("persona", "original")
LEFT_AS_WRITTEN = (
    "random", "pick", "roll", "time", "date", "weekday", "isotime", "isodate", "datetimeformat", "time_UTC",
    "timeDiff", "idle_duration", "lastMessage", "lastUserMessage", "lastCharMessage", "input", "model",
)
"""Macros left in the text (see the module docstring): their value is not the card's."""

_LEGACY_CHAR = re.compile(r"<(?:BOT|CHAR|CHARIFNOTGROUP|GROUP)>", re.IGNORECASE)
_LEGACY_USER = re.compile(r"<USER>", re.IGNORECASE)
_CHAR = re.compile(r"\{\{(?:char|group|charIfNotGroup)\}\}", re.IGNORECASE)
_USER = re.compile(r"\{\{user\}\}", re.IGNORECASE)
_FIELDS = re.compile(r"\{\{(" + "|".join(re.escape(name) for name in (*CARD_MACROS, *_EMPTY_MACROS)) + r")\}\}",
                     re.IGNORECASE)
_TRIM = re.compile(r"(?:\r?\n)*\{\{trim\}\}(?:\r?\n)*", re.IGNORECASE)
_NEWLINE = re.compile(r"\{\{newline\}\}", re.IGNORECASE)
_NOOP = re.compile(r"\{\{noop\}\}", re.IGNORECASE)
_COMMENT = re.compile(r"\{\{//[\s\S]*?\}\}")
_REVERSE = re.compile(r"\{\{reverse:(.+?)\}\}", re.IGNORECASE)
_BY_LOWER = {name.lower(): field for name, field in CARD_MACROS.items()}


def substitute(text: str, *, char: str, user: str, card: Mapping[str, Any] | None = None) -> str:
    """``text`` with the card macros replaced (the module docstring lists them).

    ``char`` is the character's name, ``user`` the user's; ``card`` the card's fields (as
    :meth:`~mirror.cognition.persona.model.Persona.content` holds them) for ``{{description}}``
    and kin (without it they are empty). A field's own macros are substituted too, one level
    deep (a field naming itself is not expanded again). ``user == ""`` substitutes nothing: a
    conversation recorded before Mirror substituted macros is replayed as it ran.
    """
    if not user or not text:
        return text
    fields = card or {}

    def field(match: re.Match[str]) -> str:
        name = _BY_LOWER.get(match.group(1).lower())
        value = fields.get(name, "") if name is not None else ""
        return value if isinstance(value, str) else ""

    text = _FIELDS.sub(field, text)
    text = _LEGACY_USER.sub(lambda _: user, text)
    text = _LEGACY_CHAR.sub(lambda _: char, text)
    text = _NEWLINE.sub("\n", text)
    text = _TRIM.sub("", text)
    text = _NOOP.sub("", text)
    text = _COMMENT.sub("", text)
    text = _REVERSE.sub(lambda match: match.group(1)[::-1], text)
    text = _USER.sub(lambda _: user, text)
    return _CHAR.sub(lambda _: char, text)
