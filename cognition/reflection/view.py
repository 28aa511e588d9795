"""The portrait and the reflections as plain JSON data, for the API and the CLI.

Pure: :func:`portrait_view` reads a state (the live one, or time travel's at any seq:
``History.state_at(key, seq)``), :func:`reflection_changes` reads one ``reflection`` event and
the state just before it (``History.state_at(key, event.seq - 1)``) and says what that
reflection changed: the portrait's diff, the beliefs decayed, forgotten or saved by a rule,
and what it cost. The same answer for the same log, whenever it is asked.
"""

from __future__ import annotations

import difflib
from typing import Any

from mirror.events.envelope import Event
from mirror.events.payloads import Reflection
from mirror.projections.state import ConversationState


def portrait_view(state: ConversationState) -> dict[str, Any]:
    """The portrait at ``state`` (``None`` before the first accepted reflection) and its context."""
    last = state.last_reflection
    counters = state.counters
    return {
        "seq": state.last_seq,
        "portrait": state.portrait,
        "portrait_seq": state.portrait_seq,
        "pending_insights": len(state.pending_insights),
        "turns_since_reflection": counters.turns_since_reflection,
        "reflections": counters.reflections,
        "rejected": counters.reflections_rejected,
        "beliefs_decayed": counters.beliefs_decayed,
        "beliefs_forgotten": counters.beliefs_forgotten,
        "last_reflection": None if last is None else {
            "seq": last.seq, "accepted": last.accepted, "reason": last.reason, "for_turn": last.for_turn,
            "triggers": list(last.triggers), "warning": last.warning, "unique_ratio": last.unique_ratio,
        },
    }


def portrait_diff(before: str, after: str) -> list[str]:
    """A unified diff of two portraits, sentence by sentence (no lines when equal)."""
    def sentences(text: str) -> list[str]:
        return [part.strip() for part in text.replace("\n", " ").split(". ") if part.strip()]

    return list(difflib.unified_diff(sentences(before), sentences(after), "before", "after", lineterm="", n=1))


def reflection_changes(before: ConversationState, event: Event) -> dict[str, Any]:
    """What the reflection ``event`` changed, given the state just before it."""
    payload = event.payload
    if not isinstance(payload, Reflection):
        raise ValueError(f"seq {event.seq} is a {event.type} event, not a reflection")
    old = before.portrait or ""
    new = payload.portrait if payload.accepted else old
    statements = {belief_id: belief.statement for belief_id, belief in before.beliefs.items()}

    def decisions(applied: str | None = None, overruled: bool = False) -> list[dict[str, Any]]:
        return [
            {"belief_id": belief_id, "statement": statements.get(belief_id), "proposed": proposed,
             "applied": verdict, "rule": rule}
            for belief_id, proposed, verdict, rule in payload.decisions
            if (applied is None or verdict == applied) and (not overruled or rule)
        ]

    provenance = event.provenance
    tokens = payload.decay_tokens + (0 if provenance is None else provenance.prompt_tokens + provenance.completion_tokens)
    latency = payload.decay_ms + (0.0 if provenance is None else provenance.latency_ms)
    return {
        "seq": event.seq, "turn": event.turn, "for_turn": payload.for_turn, "timestamp": event.timestamp,
        "triggers": list(payload.triggers), "accepted": payload.accepted, "reason": payload.reason,
        "warning": payload.warning, "unique_ratio": payload.unique_ratio,
        "insights_used": payload.insights_used, "episodes_used": payload.episodes_used,
        "portrait_before": before.portrait, "portrait_after": payload.portrait if payload.accepted else before.portrait,
        "proposed_portrait": payload.portrait, "diff": portrait_diff(old, new),
        "decisions": decisions(), "decayed": decisions("decay"), "forgotten": decisions("forget"),
        "overruled": decisions(overruled=True),
        "cost": {"tokens": tokens, "ms": round(latency, 3), "decay_tokens": payload.decay_tokens,
                 "decay_ms": round(payload.decay_ms, 3), "model_calls": 1 + (1 if payload.decay_fingerprint else 0)},
    }


__all__ = ["portrait_diff", "portrait_view", "reflection_changes"]
