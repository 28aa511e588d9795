"""Event payloads: one frozen class per event type, each with its schema version.

A payload says what happened, in the past tense of the domain, and nothing else: the
envelope (:class:`mirror.events.Event`) carries who, where and when. Adding a field is a new
schema version with an upcaster in :mod:`mirror.events.codec`; old records are never
rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

MemoryType = Literal["standard", "emotional", "operational", "location"]
EdgeOrigin = Literal["conversation", "world", "data", "user_confirmed"]
BeliefOperation = Literal["assert", "reinforce", "recall", "consistent", "contradict"]
EdgeOperation = Literal["assert", "reinforce", "contradict"]
ThinkerStage = Literal["monologue", "controller", "reflection", "talker"]


@dataclass(frozen=True, slots=True)
class Payload:
    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class Turn(Payload):
    """The user said something and the Talker answered, seeing the narrative at ``narrative_seq``.

    Version 1 (the prototype) stored ``user`` and ``assistant`` and no narrative reference.
    """

    TYPE: ClassVar[str] = "turn"
    VERSION: ClassVar[int] = 2
    user_message: str
    reply: str
    narrative_seq: int | None = None
    mode: str = "full"


@dataclass(frozen=True, slots=True)
class Monologue(Payload):
    """The Inner Monologue Manager produced its three parallel thought streams for a turn."""

    TYPE: ClassVar[str] = "monologue"
    reasoning: str
    memory: str
    goal: str


@dataclass(frozen=True, slots=True)
class Narrative(Payload):
    """The Cognitive Controller regenerated the whole narrative; it replaces the previous one."""

    TYPE: ClassVar[str] = "narrative"
    text: str
    monologue_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Belief(Payload):
    """A belief was asserted, reinforced, recalled, supported or contradicted.

    The dedup gate and the contradiction check decide ``operation``; the projection applies the
    confidence arithmetic, so every state is a pure function of the events.
    ``related`` names the beliefs a ``consistent`` event boosts or a ``contradict`` event opposes.
    """

    TYPE: ClassVar[str] = "belief"
    belief_id: str
    operation: BeliefOperation
    statement: str = ""
    memory_type: MemoryType = "standard"
    confidence: float = 0.6
    related: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Edge(Payload):
    """A causal edge ``src -relation-> dst`` was asserted, reinforced or contradicted."""

    TYPE: ClassVar[str] = "edge"
    src: str
    relation: str
    dst: str
    operation: EdgeOperation = "assert"
    origin: EdgeOrigin = "conversation"
    contradicts: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class Insight(Payload):
    """A one-sentence insight from one interaction, pending the next reflection."""

    TYPE: ClassVar[str] = "insight"
    text: str


@dataclass(frozen=True, slots=True)
class Reflection(Payload):
    """A reflection ran: ``accepted`` says whether ``snapshot`` replaced the previous one."""

    TYPE: ClassVar[str] = "reflection"
    snapshot: str
    accepted: bool
    reason: str = ""
    unique_ratio: float = 1.0
    insights_used: int = 0


@dataclass(frozen=True, slots=True)
class ThinkerFailed(Payload):
    """A thinking step failed; the previous good state stays in force and the step is retried."""

    TYPE: ClassVar[str] = "thinker_failed"
    stage: ThinkerStage
    error_type: str
    message: str
    attempt: int = 1
    for_turn: int | None = None


@dataclass(frozen=True, slots=True)
class Fork(Payload):
    """This branch was forked from ``parent_branch`` after ``fork_seq`` to re-think history."""

    TYPE: ClassVar[str] = "fork"
    parent_branch: str
    fork_seq: int
    prompt_set: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where an LLM-produced event came from: enough to audit it and to replay it exactly.

    ``request_fingerprint`` hashes the exact request (model, messages, parameters); replay
    serves a recorded response whose fingerprint matches. API keys are never part of it.
    """

    model: str
    prompt_set: str
    request_fingerprint: str
    parameters: dict[str, float | int | str] = field(default_factory=dict)
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    response: str | None = None


PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    Turn,
    Monologue,
    Narrative,
    Belief,
    Edge,
    Insight,
    Reflection,
    ThinkerFailed,
    Fork,
)
