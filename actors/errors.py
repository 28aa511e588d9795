"""Errors of the actor runtime: the Ray actors that run conversations and own the log.

    MirrorError                      (mirror.events.errors)
    └── ActorError
        ├── IngesterUnavailable      the ingester actor of a shard is not consuming and serving reads
        ├── Fenced                   a conversation lost the single-writer fence and stopped
        ├── Passivated               a conversation is passivating: ask its new incarnation
        ├── SettingConflict          a turn asked for a mode (or memory) other than its conversation's
        ├── IdempotencyKeyReused     a turn's idempotency key names an earlier turn of another request
        └── HistoryMoved             a transcript-placed turn found its branch moved on since it was placed
            └── TranscriptElsewhere  a quickly placed turn's transcript is not its branch's turns

The rooms above keep their own errors beside the code that raises them (``mirror.sim.errors``,
``mirror.stack.errors``, ``mirror.cli.errors``, ``mirror.harness.errors``), each a
:class:`~mirror.events.errors.MirrorError`. Every error names the setting or address it is
about and says how to fix the problem, and crosses Ray whole (``MirrorError.__reduce__``).
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["ActorError", "Fenced", "HistoryMoved", "IdempotencyKeyReused", "IngesterUnavailable", "Passivated", "SettingConflict",
           "TranscriptElsewhere"]


class ActorError(MirrorError):
    """Something went wrong running Mirror's processes and servers."""


class IngesterUnavailable(ActorError):
    """The ingester actor of a shard did not start consuming and serving reads in time."""

    def __init__(self, shard: str, db_path: object, last_error: str) -> None:
        self.shard = shard
        self.db_path = db_path
        self.last_error = last_error
        super().__init__(f"the ingester of shard {shard!r} ({db_path}) is not serving: last error {last_error}; "
                         f"check that NATS is reachable and that no other process owns the file")


class Fenced(ActorError):
    """This conversation lost the single-writer fence: another writer appended. It stops for
    good and a new one must reload the conversation; it never forks the sequence."""

    def __init__(self, key: object, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"conversation {key} is fenced off and stopped: {detail}; reload it to continue")


class Passivated(ActorError):
    """The conversation actor is passivating; get a fresh handle and ask again."""

    def __init__(self, key: object) -> None:
        self.key = key
        super().__init__(f"conversation {key} is passivating; ask again to re-activate it")


class SettingConflict(ActorError):
    """A turn asked for a thinking mode, or memory on or off, other than its conversation's.

    A conversation's first turn fixes both (the ``turn`` event records them); switching midway
    would leave a history no one setting explains. Re-think it another way with ``recompute``
    (``--mode``) instead.
    """

    def __init__(self, key: object, setting: str, asked: object, running: object, why: str = "") -> None:
        self.key = key
        self.setting = setting
        self.asked = asked
        self.running = running
        self.why = why
        super().__init__(f"conversation {key} runs {setting} {running!r}, not {asked!r}: "
                         + (why or "its first turn fixed it; start a new conversation, or re-think this one with recompute"))


class IdempotencyKeyReused(ActorError):
    """A turn came with an idempotency key that an earlier turn of this conversation used for
    another request (another message, or other settings). Nothing is appended: a key names one
    request, so send a new key with a new request."""

    def __init__(self, key: object, idempotency_key: str, seq: int, why: str) -> None:
        self.key = key
        self.idempotency_key = idempotency_key
        self.seq = seq
        self.why = why
        super().__init__(f"idempotency key {idempotency_key!r} was used by the turn at seq {seq} of conversation {key} "
                         f"for another request ({why}); use a new key for a new request")


class HistoryMoved(ActorError):
    """A turn placed by its client's transcript (:class:`~mirror.cognition.turn.Continuation`)
    found its branch other than the gateway saw it: another request appended to it, or forked the
    same new branch first. Nothing is appended; sending the request again places it afresh
    (the ``openai`` SDKs retry a 409 by themselves)."""

    def __init__(self, key: object, expected: str, found: str) -> None:
        self.key = key
        self.expected = expected
        self.found = found
        super().__init__(f"conversation {key} moved on while this turn was placed: expected {expected}, found {found}; "
                         "send the request again")


class TranscriptElsewhere(HistoryMoved):
    """A turn placed quickly (a :class:`~mirror.cognition.turn.Continuation` with a ``digest``)
    whose transcript is not exactly its branch's turns. Nothing is appended; the gateway then
    aligns the transcript against every branch from the log (issue 35's path) and sends the turn
    where that places it, so a client never sees this (were it to, it is a 409 like its parent)."""

    def __init__(self, key: object, turns: int) -> None:
        super().__init__(key, "the branch's turns to be the transcript's exchanges",
                         f"{turns} turns that differ from them (or the log not yet holding them)")
