"""Errors of the replay layer.

    MirrorError
    └── ReplayError
        ├── UnknownPosition        a seq or time outside what the conversation has
        ├── UnknownBranch          a branch with no events (or a fork whose parent is missing)
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


class UnknownBranch(ReplayError, LookupError):
    def __init__(self, key: StreamKey, detail: str) -> None:
        self.key = key
        super().__init__(f"{key}: {detail}")


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
    "UnknownPosition",
]
