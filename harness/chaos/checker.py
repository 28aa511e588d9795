"""What must hold of each conversation's log after the chaos, checked on its events (pure).

For a conversation, given every turn the gateway acknowledged (``seq``, ``message``: a 200 with
that seq) and the events the log holds (the events API's JSON: ``seq``, ``type``, ``payload``):

- **lost**: an acknowledged message that is in no ``turn`` event;
- **misplaced**: an acknowledged message found, but not at the acknowledged seq;
- **duplicated**: an acknowledged message in more than one ``turn`` event;
- **gaps**: seqs missing from 1..max (every seq from 1 to the last must be present);
- **doubled seqs**: two events with one seq;
- **failure narratives**: a ``narrative`` event whose text is a failure instead of a narrative:
  blank, containing the ``message`` of a ``thinker_failed`` event of the conversation, or
  looking like an error (:data:`FAILURE_TEXT`: a traceback, ``SomethingError:``). A failed
  thinking step must leave the previous narrative in force, never replace it with its error.

Messages are unique per attempt (the driver numbers them), so a message the gateway never
acknowledged but the log holds — the request failed after the append — is counted as
``unacknowledged_logged``: expected under crashes, not a fault, reported for information.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAILURE_TEXT", "Acknowledged", "ConversationCheck", "check_conversation", "is_failure_narrative"]

FAILURE_TEXT = re.compile(r"Traceback \(most recent call last\)|\b[A-Z][A-Za-z]*(?:Error|Exception)\b\s*:")
MIN_QUOTED_FAILURE = 8
"""A thinker_failed message shorter than this is not searched for in narratives (too likely by chance)."""


@dataclass(frozen=True)
class Acknowledged:
    """A turn the gateway acknowledged: 200 with this seq for this message."""

    conversation: str
    seq: int
    message: str
    sent_s: float
    """When the request was sent, in seconds since the run started."""
    acked_s: float


@dataclass
class ConversationCheck:
    conversation: str
    acknowledged: int = 0
    events: int = 0
    last_seq: int = 0
    lost: list[int] = field(default_factory=list)
    misplaced: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    gaps: list[int] = field(default_factory=list)
    doubled_seqs: list[int] = field(default_factory=list)
    failure_narratives: list[int] = field(default_factory=list)
    thinker_failed: int = 0
    unacknowledged_logged: int = 0
    answers: bool | None = None
    """Whether it answered one more turn after the run (None: not asked)."""
    unreadable: str = ""
    """Why its events could not be read (then nothing above was checked): the error, else ""."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.misplaced or self.duplicated or self.gaps or self.doubled_seqs
                    or self.failure_narratives or self.unreadable) and self.answers is not False

    def as_dict(self) -> dict[str, Any]:
        return {"conversation": self.conversation, "ok": self.ok, "acknowledged": self.acknowledged,
                "events": self.events, "last_seq": self.last_seq, "lost": self.lost, "misplaced": self.misplaced,
                "duplicated": self.duplicated, "gaps": self.gaps, "doubled_seqs": self.doubled_seqs,
                "failure_narratives": self.failure_narratives, "thinker_failed": self.thinker_failed,
                "unacknowledged_logged": self.unacknowledged_logged, "answers": self.answers,
                "unreadable": self.unreadable}


def is_failure_narrative(text: str, failure_messages: Iterable[str]) -> bool:
    """Whether a narrative's text is a failure (see the module docstring)."""
    if not text.strip() or FAILURE_TEXT.search(text):
        return True
    return any(len(message.strip()) >= MIN_QUOTED_FAILURE and message.strip() in text for message in failure_messages)


def check_conversation(conversation: str, acknowledged: Iterable[Acknowledged], events: Iterable[Mapping[str, Any]],
                       *, message_prefix: str = "") -> ConversationCheck:
    """Check one conversation's log against what was acknowledged in it (see the module docstring).

    ``message_prefix``: the run's messages start with it; a logged turn with it that was not
    acknowledged counts as ``unacknowledged_logged`` ("" counts every unacknowledged turn).
    """
    acks = list(acknowledged)
    events = list(events)
    check = ConversationCheck(conversation, acknowledged=len(acks), events=len(events))
    seqs = Counter(int(event["seq"]) for event in events)
    check.last_seq = max(seqs, default=0)
    check.doubled_seqs = sorted(seq for seq, count in seqs.items() if count > 1)
    check.gaps = [seq for seq in range(1, check.last_seq + 1) if seq not in seqs]
    turn_seqs: dict[str, list[int]] = {}
    for event in events:
        if event["type"] == "turn":
            turn_seqs.setdefault(str(event["payload"].get("user_message", "")), []).append(int(event["seq"]))
    for ack in acks:
        found = turn_seqs.get(ack.message, [])
        if not found:
            check.lost.append(ack.seq)
        elif ack.seq not in found:
            check.misplaced.append(ack.seq)
        if len(found) > 1:
            check.duplicated.append(ack.seq)
    acked_messages = {ack.message for ack in acks}
    check.unacknowledged_logged = sum(len(found) for message, found in turn_seqs.items()
                                      if message.startswith(message_prefix) and message not in acked_messages)
    failures = [str(event["payload"].get("message", "")) for event in events if event["type"] == "thinker_failed"]
    check.thinker_failed = len(failures)
    check.failure_narratives = [int(event["seq"]) for event in events if event["type"] == "narrative"
                                and is_failure_narrative(str(event["payload"].get("text", "")), failures)]
    return check
