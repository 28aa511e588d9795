"""Identifiers: validation and deterministic event ids.

Tenants, conversations and branches become NATS subject tokens and parts of file names, so
they are checked before anything else sees them: ``.``, ``*``, ``>`` and whitespace must never
reach the broker.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import InvalidIdentifier

MAX_IDENTIFIER_LENGTH = 64
MAIN_BRANCH = "main"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EVENT_ID_PERSON = b"mirror-event-id"


def validate_identifier(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid identifier, else raise :class:`InvalidIdentifier`."""
    if type(value) is str and _is_valid(value):
        return value
    if not isinstance(value, str):
        raise InvalidIdentifier(kind, value, f"expected a string, got {type(value).__name__}")
    if not value:
        raise InvalidIdentifier(kind, value, "it is empty")
    if len(value) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifier(kind, value, f"it is {len(value)} characters long")
    if _IDENTIFIER.fullmatch(value) is None:
        bad = sorted({ch for ch in value if _IDENTIFIER.fullmatch(ch) is None})
        raise InvalidIdentifier(kind, value, f"it contains {''.join(bad)!r}")
    return value


@lru_cache(maxsize=65536)
def _is_valid(value: str) -> bool:
    # Identifiers repeat on every event of a conversation; the cache keeps the check cheap.
    return _IDENTIFIER.fullmatch(value) is not None


@dataclass(frozen=True, slots=True, order=True)
class StreamKey:
    """One append-only sequence of events: a conversation on a branch, within a tenant."""

    tenant: str
    conversation: str
    branch: str = MAIN_BRANCH

    def __post_init__(self) -> None:
        validate_identifier("tenant", self.tenant)
        validate_identifier("conversation", self.conversation)
        validate_identifier("branch", self.branch)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.conversation}/{self.branch}"


def event_id(tenant: str, conversation: str, branch: str, seq: int) -> str:
    """The deterministic id of the event at ``seq``: a retry of the same append has the same id.

    32 hex digits of a personalised BLAKE2b of the four coordinates: the same in every process
    and run, so it doubles as the NATS message id.
    """
    coordinates = f"{tenant}/{conversation}/{branch}/{seq}".encode()
    return hashlib.blake2b(coordinates, digest_size=16, person=_EVENT_ID_PERSON).hexdigest()


__all__ = ["MAIN_BRANCH", "MAX_IDENTIFIER_LENGTH", "StreamKey", "event_id", "validate_identifier"]
