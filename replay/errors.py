"""Errors of the replay layer.

    MirrorError
    └── ReplayError
        ├── UnknownPosition        a seq or time outside what the conversation has
        ├── UnknownConversation    a conversation the tenant's log does not hold
        ├── UnknownBranch          a branch with no events (or a fork whose parent is missing)
        ├── UnknownReflection      a reflection number the branch has not reached
        ├── UnknownSubject         a belief id or an edge no event of the branch names ("why")
        ├── UnknownPromptSet       a branch's prompt set cannot be rebuilt from what its fork recorded
        ├── RecordingMiss          RecordedLLM has no recorded answer for a request (LLMError too)
        ├── NonDeterminism         re-thinking produced other events than the log holds
        └── RecomputeError         a recompute cannot run as asked (bad prompts, branch clash)

``RecordingMiss`` is also an :class:`~mirror.cognition.errors.LLMError`, so a pipeline meeting
it records a ``thinker_failed`` exactly as it would for a model that did not answer.
"""

from __future__ import annotations

from typing import Any

from mirror.cognition.errors import LLMError
from mirror.events.errors import MirrorError
from mirror.events.ids import StreamKey


class ReplayError(MirrorError):
    """Re-reading or re-running history cannot do what was asked."""


class UnknownPosition(ReplayError, ValueError):
    """Asked for a state at a seq beyond the end, or a negative one."""

    def __init__(self, key: StreamKey, position: Any, last_seq: int) -> None:
        self.key, self.position, self.last_seq = key, position, last_seq
        super().__init__(
            f"{key} has no seq {position}: it ends at seq {last_seq} (ask for 0..{last_seq})"
        )


class UnknownConversation(ReplayError, LookupError):
    """The tenant's log holds no event of this conversation (a typo, or another tenant's)."""

    def __init__(self, tenant: str, conversation: str) -> None:
        self.tenant, self.conversation = tenant, conversation
        super().__init__(
            f"tenant {tenant!r} has no conversation {conversation!r} (`mirror status` lists its conversations)"
        )


class UnknownBranch(ReplayError, LookupError):
    """``where`` (a key, or a text such as "tenant 'acme'" when no one conversation is meant) has
    no such branch."""

    def __init__(self, where: StreamKey | str, detail: str) -> None:
        self.key = where
        super().__init__(f"{where}: {detail}")


class UnknownReflection(ReplayError, LookupError):
    """Asked for reflection ``number`` of a branch that has had fewer (numbers start at 1)."""

    def __init__(self, key: StreamKey, number: Any, count: int) -> None:
        self.key, self.number, self.count = key, number, count
        which = f"ask for 1..{count}" if count else "it has not reflected yet"
        super().__init__(f"{key} has no reflection {number}: it has had {count} ({which})")


class UnknownSubject(ReplayError, LookupError):
    """Asked why of a belief id or an edge ``src relation dst`` that no event of the branch names."""

    def __init__(self, key: StreamKey, kind: str, name: str) -> None:
        self.key, self.kind, self.name = key, kind, name
        super().__init__(f"{key} never had {kind} {name} (`/beliefs` and `/edges` list what it holds)")


class UnknownPromptSet(ReplayError, LookupError):
    """The prompt set a branch was made with cannot be rebuilt here; ``--prompts`` can name it."""

    def __init__(self, key: StreamKey, prompt_set: str, detail: str) -> None:
        self.key, self.prompt_set = key, prompt_set
        super().__init__(
            f"{key} was made with prompt set {prompt_set}, which cannot be rebuilt here: {detail}; "
            "pass --prompts with a directory holding that prompt set"
        )


class RecordingMiss(ReplayError, LLMError):
    """No recorded answer matches the request's fingerprint (the prompt set or pipeline changed)."""

    def __init__(self, fingerprint: str, prompt_set: str) -> None:
        self.fingerprint, self.prompt_set = fingerprint, prompt_set
        super().__init__(
            f"no recorded answer for request {fingerprint[:16]}… (prompt set {prompt_set}): "
            "the request differs from every recorded one; pass a live model to answer it"
        )


class NonDeterminism(ReplayError):
    """Re-thinking from the recorded turns produced other events than the log holds."""

    def __init__(self, key: StreamKey, divergences: list[Any]) -> None:
        self.key, self.divergences = key, divergences
        first = divergences[0]
        super().__init__(f"{key} diverges at seq {first.seq}: {first.reason} ({len(divergences)} divergence(s))")


class RecomputeError(ReplayError, ValueError):
    """A recompute was asked for something it cannot do; nothing was written."""


__all__ = [
    "NonDeterminism", "RecomputeError", "RecordingMiss", "ReplayError", "UnknownBranch",
    "UnknownConversation", "UnknownPosition", "UnknownPromptSet", "UnknownReflection", "UnknownSubject",
]
