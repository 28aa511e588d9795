"""What actors answer across Ray: frozen dataclasses, not dicts, so both ends name the same
fields and a typo is an AttributeError where it is made, not a KeyError in another process.

``as_dict`` gives the JSON the HTTP API has always returned: field order is its key order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TurnResult:
    """A turn's answer: the reply, where its ``turn`` event landed, and where the time went (ms).

    ``llm_ms`` is the Talker's LLM call, ``talk_ms`` the whole Talker (recall not included), ``append_ms`` the fenced
    append until the bus acknowledged, ``turn_ms`` all of it, as the conversation's process saw it.
    """

    reply: str
    turn: int
    seq: int
    narrative_seq: int | None
    llm_ms: float
    talk_ms: float
    append_ms: float
    turn_ms: float
    recall_ms: float = 0.0
    """Recall before the Talker, the message's embedding call included (0 without memory)."""
    embed_ms: float = 0.0
    """The message's embedding call, within ``recall_ms``."""
    recall_seq: int | None = None
    """The seq of the ``recall`` event appended with the turn (``None``: nothing was recalled)."""
    steps_ms: dict[str, float] | None = None
    """A persona turn's steps on its path (think, retrieval, appraisal, plan, formulation), each
    one's wall time; ``None`` for the MIRROR mind."""
    prompt_tokens: int = 0
    """The reply's model call (the Talker's, a persona's formulation): its prompt tokens, as reported or estimated."""
    completion_tokens: int = 0
    """... and the reply's tokens."""
    replayed: bool = False
    """The answer of an earlier turn that the request's idempotency key names: nothing was appended
    (its timings are zero: this request made no model call)."""
    finish_reason: str = "stop"
    """Why the reply's model call stopped, as the model said: ``length`` when the Talker's (a
    persona's formulation's) ``max_tokens`` cut the reply. A replayed answer says ``stop`` (the log
    does not keep it)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A live conversation as it stands: its projected state's headline and whether it is thinking."""

    tenant: str
    conversation: str
    branch: str
    turns: int
    last_seq: int
    narrative: str | None
    narrative_seq: int | None
    thought_turn: int | None
    thinking: bool
    mode: str
    last_failure: str | None
    updated_at: float
    mind: str = "mirror"
    greeting: str | None = None
    """The greeting a persona conversation opened with (the first assistant message; ``None``: none)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ReflectionResult:
    """A forced reflection's outcome: where its ``reflection`` event landed and what it did.

    ``accepted`` says whether its portrait replaced the old one (``reason`` says why not; then
    ``portrait`` is still the old one, ``None`` before any); ``decayed`` / ``forgotten`` /
    ``overruled`` count its decisions; ``tokens`` and ``ms`` are both its calls together."""

    seq: int
    for_turn: int | None
    accepted: bool
    reason: str
    triggers: tuple[str, ...]
    portrait: str | None
    warning: str
    decayed: int
    forgotten: int
    overruled: int
    tokens: int
    ms: float

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "triggers": list(self.triggers)}


@dataclass(frozen=True, slots=True)
class RecomputeFailure:
    """One conversation of a recompute job that failed (the others go on)."""

    conversation: str
    branch: str
    error: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RecomputeStatus:
    """A recompute job's progress, and its report (the JSON document) once done."""

    job: str
    status: str
    """``running``, ``done`` or ``failed``."""
    branch: str
    prompt_set: str
    done: int = 0
    total: int | None = None
    failed: int = 0
    report: dict[str, Any] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


__all__ = ["ConversationSummary", "RecomputeFailure", "RecomputeStatus", "ReflectionResult", "TurnResult"]
