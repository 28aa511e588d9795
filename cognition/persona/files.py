"""Persona files on disk: read a card (JSON or PNG) or a native TOML file, write a V3 card; read
a lorebook (SillyTavern World Info) to attach to one.

The format is told by the content, not the name: a PNG signature, else TOML for a ``.toml``
file, else JSON. Every failure is a :class:`~mirror.cognition.errors.PersonaInvalid` naming the
file (and the key where there is one); a file that cannot be read raises it too.
"""

from __future__ import annotations

import base64
import binascii
import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from mirror.cognition.errors import PersonaInvalid

from .cards import from_document, to_card
from .lorebook import is_lorebook, lorebook_of
from .model import Persona
from .png import CARD_KEYWORDS, SIGNATURE, PngInvalid, card_texts, tiny_png, with_card, without_cards

__all__ = [
    "EXAMPLES", "FORMATS", "lorebook_from_bytes", "persona_from_bytes", "read_lorebook", "read_persona", "write_card"]

EXAMPLES = Path(__file__).parent / "examples"
"""The example personas shipped with Mirror."""
FORMATS = ("json", "png")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json(text: str | bytes, file: str, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PersonaInvalid(file, where, f"is not JSON: {exc}") from exc


def read_persona(path: Path | str) -> Persona:
    """The persona in ``path`` (a V2/V3 card as JSON or PNG, or native TOML), validated."""
    path = Path(path)
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PersonaInvalid(file, "$", f"cannot be read: {exc.strerror or exc}") from exc
    return persona_from_bytes(raw, file, toml=path.suffix.lower() == ".toml")


def persona_from_bytes(raw: bytes, file: str, *, toml: bool = False) -> Persona:
    """The persona in ``raw`` (a PNG card by its signature; TOML when ``toml``; else JSON), validated;
    ``file`` names where it came from in errors (a path, ``request body``)."""
    if raw.startswith(SIGNATURE):
        try:
            texts = card_texts(raw)
            image = without_cards(raw)
        except PngInvalid as exc:
            raise PersonaInvalid(file, "$", f"is not a valid PNG: {exc}") from exc
        keyword = next((key for key in CARD_KEYWORDS if key in texts), None)
        if keyword is None:
            raise PersonaInvalid(file, "tEXt", "the PNG has no 'ccv3' or 'chara' text chunk (is it a character card?)")
        try:
            decoded = base64.b64decode(texts[keyword], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PersonaInvalid(file, f"tEXt.{keyword}", f"is not base64: {exc}") from exc
        persona = from_document(_json(decoded, file, f"tEXt.{keyword}"), file, "png")
        return _with_image(persona, image)
    if toml:
        try:
            document = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PersonaInvalid(file, "$", f"is not TOML: {exc}") from exc
        return from_document(document, file, "toml")
    return from_document(_json(raw, file, "$"), file, "json")


def read_lorebook(path: Path | str) -> dict[str, Any]:
    """The lorebook in ``path`` (a SillyTavern World Info file, or a bare ``character_book``) as a
    ``character_book``, validated; named after the file (``Eldoria.json`` → ``Eldoria``) when it
    names itself nothing, as SillyTavern names it."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PersonaInvalid(str(path), "$", f"cannot be read: {exc.strerror or exc}") from exc
    return lorebook_from_bytes(raw, str(path), path.stem)


def lorebook_from_bytes(raw: bytes, file: str, name: str = "") -> dict[str, Any]:
    """The lorebook in ``raw`` (JSON) as a ``character_book``; a character card here is refused."""
    document = _json(raw, file, "$")
    if not is_lorebook(document):
        raise PersonaInvalid(file, "$", "is not a lorebook (an object with entries and no card's keys): "
                                        "a character card is read with `mirror persona show` / push")
    return lorebook_of(document, file, name)


def _with_image(persona: Persona, image: bytes) -> Persona:
    return replace(persona, image=image)


def write_card(persona: Persona, path: Path | str, format: str = "json") -> Path:
    """Write ``persona`` as a V3 card: JSON, or PNG (its own image if it came in one, else a tiny one)."""
    if format not in FORMATS:
        raise ValueError(f"unknown card format {format!r}; expected one of {', '.join(FORMATS)}")
    path = Path(path)
    text = json.dumps(to_card(persona), ensure_ascii=False, indent=2, allow_nan=False)
    if format == "json":
        path.write_text(text + "\n", encoding="utf-8")
    else:
        encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
        path.write_bytes(with_card(persona.image or tiny_png(), "ccv3", encoded))
    return path
