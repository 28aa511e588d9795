"""One reflection, all or nothing: decay, gather, consolidate, validate, check health.

:func:`reflect` makes the whole reflection from one state: the decay call about the candidate
beliefs (when there are any) and the consolidation call, then one
:class:`~mirror.events.payloads.Reflection` holding the triggers, the old and new portrait's
outcome (``accepted``/``reason``), the health check, the decisions with their overrulings, and
the decay call's fingerprint, raw answer, tokens and milliseconds. The event's provenance is
the consolidation call's (one copy: the payload gives the answer back).

A failed call never leaves half a reflection: the result is one ``thinker_failed`` of stage
``reflection``, nothing else (no decay applied, the portrait and the pending insights as they
were, the triggers still standing), and the writer tries again at the next opportunity. The
failure carries the decay call's provenance when that call answered (the evidence replay needs
to ask the consolidation again and fail it as recorded), else the failed call's own.
"""

from __future__ import annotations

from dataclasses import replace

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import LLM, ChatResponse, unanswered_provenance
from mirror.cognition.pipeline import MirrorConfig, Thinking, Thought
from mirror.cognition.prompts import PromptSet
from mirror.cognition.responses import one_copy
from mirror.events.payloads import Provenance, Reflection, ThinkerFailed
from mirror.projections.state import ConversationState

from .consolidate import consolidation_request, health_warning, parse_portrait, unique_ratio, validate
from .decay import decay_candidates, decay_request, decide, parse_proposals
from .policy import ReflectionPolicy


class _Failed(Exception):
    def __init__(self, error: LLMError, provenance: Provenance) -> None:
        super().__init__(str(error))
        self.error, self.provenance = error, provenance


async def reflect(state: ConversationState, llm: LLM, prompts: PromptSet, config: MirrorConfig,
                  policy: ReflectionPolicy, *, triggers: tuple[str, ...], attempt: int = 1) -> Thinking:
    """The reflection of ``state`` (after its newest turn) for ``triggers``, or its failure."""
    if not state.recent_turns:
        raise ValueError("there is no turn to reflect on")
    turn = state.turn_count - 1
    try:
        payload, provenance = await _reflection(state, llm, prompts, config, policy, triggers, turn)
    except _Failed as failed:
        failure = ThinkerFailed("reflection", failed.error.kind, str(failed.error)[:500], attempt, turn)
        return Thinking(turn, (Thought(failure, failed.provenance),))
    return Thinking(turn, (Thought(payload, provenance),))


async def _reflection(state: ConversationState, llm: LLM, prompts: PromptSet, config: MirrorConfig,
                      policy: ReflectionPolicy, triggers: tuple[str, ...], turn: int) -> tuple[Reflection, Provenance]:
    candidates = decay_candidates(state, policy)
    evidence: Provenance | None = None
    proposals = None
    decay_call: dict[str, object] = {}
    if candidates:
        chat = decay_request(state, candidates, prompts, config)
        try:
            answer = await llm.chat(chat)
        except LLMError as exc:
            raise _Failed(exc, unanswered_provenance(chat)) from exc
        evidence = answer.provenance
        proposals = parse_proposals(answer.content, candidates)  # unreadable: None, retain all
        decay_call = {
            "decay_fingerprint": chat.fingerprint(), "decay_answer": answer.content,
            "decay_tokens": answer.provenance.prompt_tokens + answer.provenance.completion_tokens,
            "decay_ms": answer.provenance.latency_ms,
        }
    decisions = decide(state, candidates, proposals, policy)
    chat = consolidation_request(state, prompts, config, policy)
    response: ChatResponse | None = None
    try:
        response = await llm.chat(chat)
        portrait = parse_portrait(response.content)
    except LLMError as exc:
        recorded = evidence or (response.provenance if response is not None else unanswered_provenance(chat))
        raise _Failed(exc, recorded) from exc
    accepted, reason = validate(state.portrait, portrait, policy)
    ratio = unique_ratio(portrait)
    payload = Reflection(
        portrait=portrait, accepted=accepted, reason=reason, unique_ratio=ratio,
        warning=health_warning(ratio, policy), insights_used=len(state.pending_insights),
        episodes_used=min(len(state.recent_turns), policy.max_episodes), for_turn=turn, triggers=triggers,
        decisions=decisions, **decay_call,  # type: ignore[arg-type]  # the decay_* fields, typed above
    )
    provenance = one_copy(payload, response.provenance, lambda text: replace(payload, portrait=parse_portrait(text)))
    return payload, provenance


__all__ = ["reflect"]
