"""Reflection's decay step: the model proposes, the rules dispose.

**Candidates** (:func:`decay_candidates`): beliefs not asserted, reinforced or supported for
``decay_after_turns`` turns (or never known to be), oldest first, at most
``max_decay_candidates`` — the prompt is bounded however long the conversation grows.

**Proposal**: one schema-constrained call (``decay.md``, schema ``reflection_decay``) proposing
RETAIN, DECAY or FORGET per candidate. An answer that cannot be read (not the schema, a number
that names no candidate) proposes RETAIN for every candidate: not a failure, the conservative
fallback; a candidate the answer leaves out is retained too.

**Rules** (:func:`overruling_rule`), which overrule a proposal (the decision records which):

- ``protected``: the belief's memory type is in ``protected_memory_types`` or its statement
  names a protected term (a safety constraint: an allergy, a medication…) — overrules FORGET
  and DECAY: a safety constraint never fades;
- ``strong``: confidence at or above ``strong_confidence`` — overrules FORGET;
- ``recently_recalled``: recalled fewer than ``recent_recall_turns`` turns ago — overrules FORGET;
- ``open_review``: part of an open contradiction review — overrules FORGET.

An overruled proposal is applied as RETAIN. The decisions are
``(belief_id, proposed, applied, rule)`` tuples, as :class:`~mirror.events.payloads.Reflection`
records them and :func:`~mirror.projections.beliefs.apply_decisions` applies them.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import ChatRequest, JsonSchema
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.structured import parse_json_object
from mirror.projections.beliefs import BeliefState
from mirror.projections.state import ConversationState

from .calls import request
from .policy import ReflectionPolicy

RETAIN, DECAY, FORGET = "retain", "decay", "forget"
VERDICTS: tuple[str, ...] = ("RETAIN", "DECAY", "FORGET")
PROTECTED, STRONG, RECENTLY_RECALLED, OPEN_REVIEW = "protected", "strong", "recently_recalled", "open_review"
RULES: tuple[str, ...] = (PROTECTED, STRONG, RECENTLY_RECALLED, OPEN_REVIEW)

Decision = tuple[str, str, str, str]
"""``(belief_id, proposed, applied, rule)``."""

DECAY_SCHEMA = JsonSchema(
    "reflection_decay",
    {
        "type": "object",
        "properties": {
            "decisions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "belief": {"type": "integer", "minimum": 0},
                        "verdict": {"type": "string", "enum": list(VERDICTS)},
                    },
                    "required": ["belief", "verdict"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["decisions"],
        "additionalProperties": False,
    },
)


def current_turn(state: ConversationState) -> int:
    """The newest turn's number (-1 before the first)."""
    return state.turn_count - 1


def _untouched_for(belief: BeliefState, now: int) -> int | None:
    return None if belief.last_touched_turn is None else now - belief.last_touched_turn


def decay_candidates(state: ConversationState, policy: ReflectionPolicy) -> tuple[BeliefState, ...]:
    """The beliefs to ask about: untouched for ``decay_after_turns`` turns (or unknown), oldest
    first (unknown first, then by turn, then by id), at most ``max_decay_candidates``."""
    now = current_turn(state)
    old = [
        belief for belief in state.beliefs.values()
        if belief.last_touched_turn is None or now - belief.last_touched_turn >= policy.decay_after_turns
    ]
    old.sort(key=lambda b: (b.last_touched_turn is not None, b.last_touched_turn or 0, b.belief_id))
    return tuple(old[: policy.max_decay_candidates])


def decay_request(state: ConversationState, candidates: Sequence[BeliefState], prompts: PromptSet,
                  config: MirrorConfig) -> ChatRequest:
    """One call proposing a verdict for every candidate (none is made without candidates)."""
    now = current_turn(state)
    data = [
        {"belief": index, "statement": belief.statement, "type": belief.memory_type,
         "confidence": round(belief.confidence, 3), "turns_ago": _untouched_for(belief, now)}
        for index, belief in enumerate(candidates)
    ]
    return request(prompts.render("decay.md"), data, DECAY_SCHEMA, prompts, config)


def parse_proposals(content: str, candidates: Sequence[BeliefState]) -> dict[str, str] | None:
    """``belief_id -> proposed verdict`` (lower case) from an answer; ``None`` when it cannot be
    read (the caller retains all). A candidate judged twice keeps its first verdict."""
    try:
        fields = parse_json_object(content, DECAY_SCHEMA.schema, schema_name=DECAY_SCHEMA.name)
    except LLMError:
        return None
    proposals: dict[str, str] = {}
    for item in fields["decisions"]:
        index = int(item["belief"])
        if index >= len(candidates):
            return None
        proposals.setdefault(candidates[index].belief_id, str(item["verdict"]).lower())
    return proposals


def is_protected(belief: BeliefState, policy: ReflectionPolicy) -> bool:
    """A safety constraint: a protected memory type, or a statement naming a protected term."""
    if belief.memory_type in policy.protected_memory_types:
        return True
    statement = belief.statement.lower()
    return any(term.lower() in statement for term in policy.protected_terms)


def in_open_review(belief_id: str, state: ConversationState) -> bool:
    return any(belief_id in key for key in state.review_items)


def overruling_rule(belief: BeliefState, proposed: str, state: ConversationState, policy: ReflectionPolicy) -> str:
    """The first rule that overrules ``proposed`` for ``belief`` ("" when none does)."""
    if proposed == RETAIN:
        return ""
    if is_protected(belief, policy):
        return PROTECTED
    if proposed != FORGET:
        return ""
    if belief.confidence >= policy.strong_confidence:
        return STRONG
    recalled = belief.last_recalled_turn
    if recalled is not None and current_turn(state) - recalled < policy.recent_recall_turns:
        return RECENTLY_RECALLED
    if in_open_review(belief.belief_id, state):
        return OPEN_REVIEW
    return ""


def decide(state: ConversationState, candidates: Sequence[BeliefState], proposals: dict[str, str] | None,
           policy: ReflectionPolicy) -> tuple[Decision, ...]:
    """One decision per candidate, in candidate order; ``proposals`` None: retain all."""
    decisions = []
    for belief in candidates:
        proposed = RETAIN if proposals is None else proposals.get(belief.belief_id, RETAIN)
        rule = overruling_rule(belief, proposed, state, policy)
        decisions.append((belief.belief_id, proposed, RETAIN if rule else proposed, rule))
    return tuple(decisions)


__all__ = [
    "DECAY", "DECAY_SCHEMA", "Decision", "FORGET", "OPEN_REVIEW", "PROTECTED", "RECENTLY_RECALLED", "RETAIN",
    "RULES", "STRONG", "VERDICTS", "current_turn", "decay_candidates", "decay_request", "decide", "in_open_review",
    "is_protected", "overruling_rule", "parse_proposals",
]
