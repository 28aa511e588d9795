"""The event envelope: who, where and when, around a typed payload."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .errors import InvalidIdentifier
from .ids import MAIN_BRANCH, StreamKey, event_id, validate_identifier
from .payloads import Payload, Provenance

MAX_SEQ = 2**63 - 1
"""Largest seq or turn: the log stores them as BIGINT."""


@dataclass(frozen=True, slots=True)
class Event:
    """One immutable fact in one conversation's log.

    Invariants: identifiers are valid; ``seq`` starts at 1 and grows by one per
    (tenant, conversation, branch) with no gaps; ``id`` is a pure function of those four, so a
    retried append carries the same id and is deduplicated.
    """

    tenant: str
    conversation: str
    branch: str
    seq: int
    payload: Payload
    timestamp: float
    turn: int = 0
    causation: str | None = None
    provenance: Provenance | None = None

    def __post_init__(self) -> None:
        validate_identifier("tenant", self.tenant)
        validate_identifier("conversation", self.conversation)
        validate_identifier("branch", self.branch)
        if type(self.seq) is not int or not 1 <= self.seq <= MAX_SEQ:
            raise InvalidIdentifier("seq", self.seq, f"seq is a whole number from 1 to {MAX_SEQ}")
        if type(self.turn) is not int or not 0 <= self.turn <= MAX_SEQ:
            raise InvalidIdentifier("turn", self.turn, f"turn is a whole number from 0 to {MAX_SEQ}")
        if type(self.timestamp) not in (float, int) or not math.isfinite(self.timestamp):
            raise InvalidIdentifier("timestamp", self.timestamp, "timestamp is a finite number of seconds")

    @property
    def type(self) -> str:
        return self.payload.TYPE

    @property
    def schema_version(self) -> int:
        return self.payload.VERSION

    @property
    def id(self) -> str:
        return event_id(self.tenant, self.conversation, self.branch, self.seq)

    @property
    def key(self) -> StreamKey:
        return StreamKey(self.tenant, self.conversation, self.branch)


def make_event(
    key: StreamKey,
    seq: int,
    payload: Payload,
    *,
    turn: int = 0,
    causation: str | None = None,
    provenance: Provenance | None = None,
    timestamp: float | None = None,
) -> Event:
    """Build an event for ``key`` at ``seq``, stamped now unless ``timestamp`` is given."""
    return Event(
        tenant=key.tenant,
        conversation=key.conversation,
        branch=key.branch,
        seq=seq,
        payload=payload,
        timestamp=time.time() if timestamp is None else timestamp,
        turn=turn,
        causation=causation,
        provenance=provenance,
    )


__all__ = ["Event", "make_event", "MAIN_BRANCH"]
