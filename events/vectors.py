"""Embedding vectors as event bytes: little-endian float32, the one layout every event uses.

A vector is stored as bytes rather than a list of floats because msgpack would spend 9 bytes
on each float64 (384 dimensions: 3.4 KB) where float32 bytes take 4 (1.5 KB), and because
bytes compare and hash exactly, so a replayed recall is byte-for-byte the recorded one.
Little-endian is fixed here, not taken from the machine, so a log reads the same everywhere.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable

from .errors import CorruptEvent

BYTE_ORDER = "<"
"""Little-endian, whatever the machine: the ``struct`` prefix of every vector."""
FLOAT32_BYTES = 4
VECTOR_DTYPE = "<f4"
"""The same layout as a numpy dtype string, for readers that pack and unpack with numpy
(:mod:`mirror.cognition.embeddings`): ``BYTE_ORDER`` and a float of ``FLOAT32_BYTES``."""


def vector_to_bytes(values: Iterable[float]) -> bytes:
    """``values`` as little-endian float32; raises ``ValueError`` for a non-finite value."""
    numbers = [float(value) for value in values]
    if not all(map(math.isfinite, numbers)):
        raise ValueError("an embedding holds a NaN or an infinity; refuse to store it")
    return struct.pack(f"{BYTE_ORDER}{len(numbers)}f", *numbers)


def vector_from_bytes(data: bytes) -> tuple[float, ...]:
    """The floats ``vector_to_bytes`` wrote; :class:`CorruptEvent` unless whole float32s."""
    if len(data) % FLOAT32_BYTES:
        raise CorruptEvent(f"an embedding of {len(data)} bytes is not a whole number of float32s")
    return struct.unpack(f"{BYTE_ORDER}{len(data) // FLOAT32_BYTES}f", data)


def dimensions(data: bytes) -> int:
    """How many float32s ``data`` holds (0 for no embedding)."""
    return len(data) // FLOAT32_BYTES


__all__ = ["BYTE_ORDER", "FLOAT32_BYTES", "VECTOR_DTYPE", "vector_to_bytes", "vector_from_bytes", "dimensions"]
