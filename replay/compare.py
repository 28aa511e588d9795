"""What a verify compares and reports: the recorded events of a step against the replayed ones.

Shared by every step verifier (:mod:`~mirror.replay.verify` for MIRROR's Talker, thinking,
memory, recall and reflection, :mod:`~mirror.replay.persona` for the persona mind): the
:class:`VerifyReport` and its :class:`Divergence` entries, :func:`compare` (type, seq, turn,
payload, provenance and causation; timestamps are the only thing allowed to differ),
:func:`config_from` (the pipeline configuration a recorded call was made with),
:func:`basis_of` (the state a step started from, by its causation) and
:class:`FailsAsRecorded` (a failed step asked again fails the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.pipeline import MirrorConfig, Mode
from mirror.events.codec import to_json_ready
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey, event_id
from mirror.events.payloads import Provenance, ThinkerFailed
from mirror.projections.state import ConversationState

from .errors import NonDeterminism, RecordingMiss
from .prompt_record import PromptComparison
from .recorded import RecordedLLM, ReplayedFailure

RECORDING_MISS = "recording_miss"
"""A divergence's ``kind`` when the replay asked a request the log holds no answer to."""


@dataclass(frozen=True)
class Divergence:
    """Where the replay went otherwise than the log. ``kind`` is :data:`RECORDING_MISS` when the
    replay made a request the log never answered (``stage`` says which step asked it), else empty."""

    seq: int
    reason: str
    recorded: Any = None
    replayed: Any = None
    kind: str = ""
    stage: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "reason": self.reason, "kind": self.kind, "stage": self.stage,
                "recorded": self.recorded, "replayed": self.replayed}


@dataclass
class VerifyReport:
    """What a verify found. ``prompt_set`` is the version it replayed with; ``prompt_notes`` say,
    when it diverged, how that set differs from the one(s) the diverging events were recorded with."""

    key: StreamKey
    events: int = 0
    steps: int = 0
    unverifiable: int = 0
    model_calls: int = 0
    embedding_calls: int = 0
    recorded_answers: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    prompt_set: str = ""
    prompt_notes: list[str] = field(default_factory=list)
    persona_prompt_set: str = ""
    """The persona mind's prompt set it replayed with (empty: the log holds no persona step)."""

    @property
    def ok(self) -> bool:
        return not self.divergences

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.key.tenant, "conversation": self.key.conversation, "branch": self.key.branch,
            "ok": self.ok, "events": self.events, "steps": self.steps, "unverifiable": self.unverifiable,
            "model_calls": self.model_calls, "embedding_calls": self.embedding_calls,
            "recorded_answers": self.recorded_answers, "prompt_set": self.prompt_set,
            "persona_prompt_set": self.persona_prompt_set,
            "prompt_notes": list(self.prompt_notes),
            "divergences": [d.as_dict() for d in self.divergences],
        }

    def raise_for_divergence(self) -> None:
        if self.divergences:
            raise NonDeterminism(self.key, self.divergences)


def config_from(provenance: Provenance | None, mode: str | None, *, talker: bool) -> MirrorConfig:
    """The pipeline configuration a recorded call was made with."""
    checked_mode = cast(Mode, mode or "full")  # a recorded string: MirrorConfig rejects one not in MODES
    if provenance is None:
        return MirrorConfig(model="unknown", mode=checked_mode)
    parameters = provenance.parameters
    max_tokens = int(parameters.get("max_tokens", 1024 if talker else 3000))
    seed = parameters.get("seed")
    return MirrorConfig(
        model=provenance.model, mode=checked_mode,
        temperature=float(parameters.get("temperature", 0.7)),
        talker_max_tokens=max_tokens if talker else 1024,
        thinker_max_tokens=3000 if talker else max_tokens,
        seed=None if seed is None else int(seed),
    )


def comparable(event: Event) -> dict[str, Any]:
    record = dict(to_json_ready(event))
    record.pop("ts", None)
    record.pop("timestamp", None)
    return record


def _recorded_prompt_set(events: Sequence[Event | None]) -> str:
    return next((event.provenance.prompt_set for event in events if event is not None and event.provenance), "")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _missed(old: Event | None, new: Event) -> str | None:
    """The stage whose request the log never answered, when ``new`` records that and ``old`` did not."""
    payload = new.payload
    if not (isinstance(payload, ThinkerFailed) and payload.error_type == RecordingMiss.__name__):
        return None
    if old is not None and isinstance(old.payload, ThinkerFailed) and old.payload.error_type == payload.error_type:
        return None
    return payload.stage


def compare(recorded: Sequence[Event], replayed: Sequence[Event], report: VerifyReport,
             prompts: PromptComparison | None = None) -> None:
    for index in range(max(len(recorded), len(replayed))):
        old = recorded[index] if index < len(recorded) else None
        new = replayed[index] if index < len(replayed) else None
        stage = None if new is None else _missed(old, new)
        if new is not None and stage is not None:
            # The rest of the recorded step never happened on replay: this one divergence says why.
            version = _recorded_prompt_set([old, *recorded])
            cause = prompts.cause(version, stage) if prompts is not None else f"recorded with prompt set {version}"
            where = f"where the log has {_article(old.type)}" if old is not None else "where the log has nothing"
            report.divergences.append(Divergence(
                new.seq, f"{stage}: the replay asked a request the log never answered ({cause}); it would record a "
                f"thinker_failed {where}", old and comparable(old), comparable(new), RECORDING_MISS, stage))
            return
        if old is None or new is None:
            present = old or new
            assert present is not None  # index < the longer length: one of the two is there
            seq = present.seq
            what = "the replay produced an extra event" if old is None else "the replay produced no such event"
            report.divergences.append(Divergence(seq, what, old and comparable(old), new and comparable(new)))
            continue
        a, b = _same_storage_form(comparable(old), comparable(new))
        if a != b:
            report.divergences.append(Divergence(old.seq, f"{old.type} differs in {', '.join(_differing(a, b))}", a, b))


def _same_storage_form(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compare what the model was asked and answered, not how the log stores or labels it.

    A log written before one copy of each model output (record format 1) holds the raw answer
    in the provenance; the replayed event keeps a digest instead, since its payload gives the
    answer back. Where either side keeps a digest, the payloads (compared too) carry the
    answer, so the ``response`` and ``response_digest`` fields are left out on both sides.
    Two raw responses (e.g. the unparsable answer of a ``thinker_failed``) are still compared.
    """
    left, right = a.get("provenance"), b.get("provenance")
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return a, b
    if left.get("request_fingerprint") == right.get("request_fingerprint") and left.get("prompt_set") != right.get("prompt_set"):
        # The same request under another prompt-set label: the set gained or changed templates
        # this request does not use (e.g. the memory stage's). The label is not part of what
        # was asked (ChatRequest.fingerprint), so it is no divergence; a recorded answer keeps
        # its label, only a call that got no answer is rebuilt with today's.
        left, right = {**left, "prompt_set": ""}, {**right, "prompt_set": ""}
        a, b = {**a, "provenance": left}, {**b, "provenance": right}
    if not (left.get("response_digest") or right.get("response_digest")):
        return a, b
    storage = ("response", "response_digest")
    return (
        {**a, "provenance": {k: v for k, v in left.items() if k not in storage}},
        {**b, "provenance": {k: v for k, v in right.items() if k not in storage}},
    )


def _differing(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ, one level into nested records."""
    names = []
    for name in sorted(set(a) | set(b)):
        left, right = a.get(name), b.get(name)
        if left == right:
            continue
        if not prefix and isinstance(left, dict) and isinstance(right, dict):
            names.extend(_differing(left, right, f"{name}."))
        else:
            names.append(prefix + name)
    return names


class FailsAsRecorded:
    """The recorded LLM, but a call the log does not answer fails as the step recorded it failing."""

    def __init__(self, llm: RecordedLLM, failure: ThinkerFailed) -> None:
        self.llm, self.failure = llm, failure

    async def chat(self, request: ChatRequest) -> ChatResponse:
        try:
            return await self.llm.chat(request)
        except RecordingMiss:
            raise ReplayedFailure(self.failure.error_type, self.failure.message) from None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.llm.embed(texts)


def basis_of(key: StreamKey, first: Event, states: dict[int, ConversationState]) -> ConversationState | None:
    if first.causation is None:  # recorded without causation: the step saw the state just before it
        return states.get(first.seq - 1)
    for seq in sorted(states, reverse=True):
        if event_id(key.tenant, key.conversation, key.branch, seq) == first.causation:
            return states[seq]
    return None


def step_basis(key: StreamKey, first: Event, provenance: Provenance | None, states: dict[int, ConversationState],
                report: VerifyReport) -> ConversationState | None:
    """The state a recorded step (starting at ``first``) started from, counted as a verified step;
    ``None`` (counted as unverifiable, or reported as a divergence) when it cannot be replayed:
    no provenance (recorded before steps kept theirs: nothing to ask with), or its causation's
    state unknown."""
    if provenance is None:
        report.unverifiable += 1
        return None
    basis = basis_of(key, first, states)
    if basis is None:
        report.divergences.append(Divergence(first.seq, f"the state this step started from ({first.causation}) is unknown"))
        return None
    report.steps += 1
    return basis



__all__ = [
    "Divergence", "FailsAsRecorded", "RECORDING_MISS", "VerifyReport", "basis_of", "comparable", "compare", "step_basis",
           "config_from"]
