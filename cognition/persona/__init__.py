"""Persona files: the character a ``persona`` mind plays, read from the cards people already keep.

Modules:

- ``model`` — :class:`Persona` (the frozen definition and its content hash, ``version``),
  :class:`BiographyEntry` and the documented defaults of Mirror's own keys;
- ``cards`` — a Character Card V2/V3 document (or a native TOML table) to a :class:`Persona`,
  validating every key, and a :class:`Persona` back to a V3 card;
- ``png`` — PNG chunks (signature, length/type/data/CRC) read and written with ``struct`` and
  ``zlib``: the ``chara``/``ccv3`` text chunks and a tiny image for cards that have none;
- ``files`` — :func:`read_persona` (JSON, PNG or TOML by content) and :func:`write_card`.

``examples/`` holds two personas shipped with the package (a V2 JSON card and a V3 PNG card).

Part of the cognition layer but needs nothing of it beyond ``mirror.cognition.errors``
(:class:`~mirror.cognition.errors.PersonaInvalid`); may import ``mirror.events`` for the error
root, never ``projections``, the runtime or ``replay``. No model calls: the persona cycle that uses
these files lives elsewhere.
"""

from .cards import from_document, to_card
from .files import EXAMPLES, read_persona, write_card
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
    "EXAMPLES",
    "BiographyEntry",
    "Persona",
    "from_document",
    "read_persona",
    "to_card",
    "write_card",
]
