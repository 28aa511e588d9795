"""The persona mind: a character from the cards people already keep, and its cycle.

Persona files:

- ``model`` — :class:`Persona` (the frozen definition and its content hash, ``version``),
  :class:`BiographyEntry` and the documented defaults of Mirror's own keys;
- ``cards`` — a Character Card V2/V3 document (or a native TOML table) to a :class:`Persona`,
  validating every key, and a :class:`Persona` back to a V3 card;
- ``png`` — PNG chunks (signature, length/type/data/CRC) read and written with ``struct`` and
  ``zlib``: the ``chara``/``ccv3`` text chunks and a tiny image for cards that have none;
- ``files`` — :func:`read_persona` (JSON, PNG or TOML by content), :func:`write_card` and
  :func:`read_lorebook`;
- ``macros`` — ``{{char}}``, ``{{user}}`` and SillyTavern's other card macros, substituted
  wherever a card's text reaches a prompt;
- ``lorebook`` — a card's ``character_book`` and SillyTavern's World Info files: recognised,
  refused as a card (:class:`NotACard`), attached to a persona (:func:`with_lorebook`).

The cycle (Buscaroli & Tamburini's dual-process affective persona), each step an event:

- ``choice`` — :class:`MindChoice`, a conversation's ``mirror`` or ``persona`` mind;
- ``prompting`` — the cycle's own prompt set (``prompts/``) and how its requests are built;
- ``retrieval`` — episodic (50/30/20) and biographical (70/30) scoring, pure;
- ``turn_path`` — think, retrieval, plan and appraisal (configurable order), formulation: the
  steps the reply needs, run before it;
- ``background`` — emotion, relationship, goals and importance: after the reply, in the writer's
  think loop.

``examples/`` holds two personas shipped with the package (a V2 JSON card and a V3 PNG card).

The files need nothing of cognition beyond ``mirror.cognition.errors``; the cycle's modules may
import the rest of ``mirror.cognition``, ``mirror.projections`` and ``mirror.events``, never the
runtime or ``replay``.
"""

from .cards import from_document, to_card
from .files import EXAMPLES, lorebook_from_bytes, persona_from_bytes, read_lorebook, read_persona, write_card
from .lorebook import NotACard, with_lorebook
from .macros import DEFAULT_USER_NAME, substitute
from .model import (
    BIG_FIVE_TRAITS,
    DEFAULT_BIG_FIVE,
    DEFAULT_BIOGRAPHY_IMPORTANCE,
    DEFAULT_EMOTIONS,
    DEFAULT_LOREBOOK_IMPORTANCE,
    DEFAULT_RELATIONSHIP,
    BiographyEntry,
    Persona,
)

__all__ = [
    "BIG_FIVE_TRAITS",
    "DEFAULT_BIG_FIVE",
    "DEFAULT_BIOGRAPHY_IMPORTANCE",
    "DEFAULT_EMOTIONS",
    "DEFAULT_LOREBOOK_IMPORTANCE",
    "DEFAULT_RELATIONSHIP",
    "DEFAULT_USER_NAME",
    "EXAMPLES",
    "BiographyEntry",
    "NotACard",
    "Persona",
    "from_document",
    "lorebook_from_bytes",
    "persona_from_bytes",
    "read_lorebook",
    "read_persona",
    "substitute",
    "to_card",
    "with_lorebook",
    "write_card",
]
