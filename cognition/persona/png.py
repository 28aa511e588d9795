"""PNG chunks, read and written with ``struct`` and ``zlib``: enough for character cards.

A PNG is an 8-byte signature and chunks of ``length (4, big-endian) | type (4) | data | CRC-32
of type+data``. A card's JSON sits base64-encoded in a ``tEXt`` chunk (``keyword NUL text``,
Latin-1) keyed ``chara`` (V2) or ``ccv3`` (V3). No pixels are ever decoded, so no image library
is needed.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["CARD_KEYWORDS", "SIGNATURE", "PngInvalid", "card_texts", "tiny_png", "with_card", "without_cards"]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CARD_KEYWORDS = ("ccv3", "chara")
"""Text chunk keywords holding a card, preferred first."""


class PngInvalid(ValueError):
    """Bytes that are not a well-formed PNG (the reader turns this into ``PersonaInvalid``)."""


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    if not png.startswith(SIGNATURE):
        raise PngInvalid("does not start with the PNG signature")
    chunks, offset = [], len(SIGNATURE)
    while offset < len(png):
        if offset + 8 > len(png):
            raise PngInvalid(f"truncated chunk header at byte {offset}")
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        end = offset + 8 + length
        if end + 4 > len(png):
            raise PngInvalid(f"chunk {kind!r} at byte {offset} runs past the end of the file")
        data = png[offset + 8:end]
        (crc,) = struct.unpack(">I", png[end:end + 4])
        if crc != zlib.crc32(kind + data):
            raise PngInvalid(f"chunk {kind!r} at byte {offset} fails its CRC")
        chunks.append((kind, data))
        offset = end + 4
        if kind == b"IEND":
            break
    if not chunks or chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
        raise PngInvalid("does not begin with IHDR and end with IEND")
    return chunks


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I4s", len(data), kind) + data + struct.pack(">I", zlib.crc32(kind + data))


def _text_key(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode("latin-1")


def card_texts(png: bytes) -> dict[str, str]:
    """The card chunks' texts by keyword (``ccv3``, ``chara``), still base64."""
    found: dict[str, str] = {}
    for kind, data in _chunks(png):
        if kind == b"tEXt" and b"\0" in data and _text_key(data) in CARD_KEYWORDS:
            found.setdefault(_text_key(data), data.split(b"\0", 1)[1].decode("latin-1"))
    return found


def without_cards(png: bytes) -> bytes:
    """``png`` with its card chunks removed and every other chunk as it was."""
    kept = [(kind, data) for kind, data in _chunks(png)
            if not (kind == b"tEXt" and _text_key(data) in CARD_KEYWORDS)]
    return SIGNATURE + b"".join(_chunk(kind, data) for kind, data in kept)


def with_card(png: bytes, keyword: str, text: str) -> bytes:
    """``png`` without card chunks, plus one ``tEXt`` chunk ``keyword`` = ``text`` just before IEND."""
    chunks = _chunks(without_cards(png))
    card = (b"tEXt", keyword.encode("latin-1") + b"\0" + text.encode("latin-1"))
    return SIGNATURE + b"".join(_chunk(kind, data) for kind, data in [*chunks[:-1], card, chunks[-1]])


def tiny_png() -> bytes:
    """A valid 1x1 grey PNG, for a card that came without an image."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)  # 1x1, 8-bit greyscale
    pixels = zlib.compress(b"\x00\x80")  # filter byte 0, one grey pixel
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")
