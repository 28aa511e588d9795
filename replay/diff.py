"""What changed between two states: the narrative as a text diff, beliefs and edges as sets.

``diff(a, b)`` works across seqs and across branches alike (a branch's state at the fork point
equals its parent's). Confidences are compared as stored by the projection; a change smaller
than ``CONFIDENCE_EPSILON`` is not a change.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from typing import Any

from mirror.events.vectors import dimensions
from mirror.projections.beliefs import BeliefState, ReviewItem
from mirror.projections.state import ConversationState

CONFIDENCE_EPSILON = 1e-9


def state_view(state: ConversationState) -> dict[str, Any]:
    """The state as JSON-ready data: what a person looking back needs to see."""
    return {
        "tenant": state.key.tenant,
        "conversation": state.key.conversation,
        "branch": state.key.branch,
        "seq": state.last_seq,
        "timestamp": state.last_timestamp,
        "turns": state.turn_count,
        "mode": state.mode,
        "thought_turn": state.thought_turn,
        "memory_turn": state.memory_turn,
        "narrative": state.narrative,
        "narrative_seq": state.narrative_seq,
        "threads": None if state.threads is None else asdict(state.threads),
        "threads_seq": state.threads_seq,
        "recent_turns": [asdict(turn) for turn in state.recent_turns],
        "beliefs": [belief_view(belief) for belief in state.beliefs.values()],
        "review_items": [review_view(item) for item in state.review_items.values()],
        "edges": [_edge_view(edge) for edge in state.edges.values()],
        "reflection": state.reflection_snapshot,
        "last_failure": None if state.last_failure is None else asdict(state.last_failure),
        "fork": None if state.fork is None else asdict(state.fork),
        "events_by_type": dict(state.counters.events_by_type),
    }


def belief_view(belief: BeliefState) -> dict[str, Any]:
    """A belief as JSON-ready data: the vector's size and model, not its 1.5 KB of float32s."""
    view = asdict(belief)
    view["embedding_dimensions"] = dimensions(view.pop("embedding"))
    return view


def review_view(item: ReviewItem) -> dict[str, Any]:
    """An open review item with its stable ``review_id`` (what a ``recall`` event names)."""
    return {"review_id": item.review_id, **asdict(item)}


def _edge_view(edge: Any) -> dict[str, Any]:
    view = asdict(edge)
    view["contradicted_by"] = [list(key) for key in edge.contradicted_by]
    return view


@dataclass(frozen=True)
class Change:
    key: str
    before: float
    after: float
    text: str = ""


@dataclass(frozen=True)
class StateDiff:
    source: str
    target: str
    narrative_changed: bool
    narrative_diff: tuple[str, ...]
    threads_changed: bool
    turns_added: int
    beliefs_added: tuple[dict[str, Any], ...] = ()
    beliefs_removed: tuple[dict[str, Any], ...] = ()
    beliefs_changed: tuple[Change, ...] = ()
    edges_added: tuple[dict[str, Any], ...] = ()
    edges_removed: tuple[dict[str, Any], ...] = ()
    edges_changed: tuple[Change, ...] = ()
    narratives: tuple[str | None, str | None] = field(default=(None, None), repr=False)

    @property
    def changed(self) -> bool:
        return any((self.narrative_changed, self.threads_changed, self.turns_added, self.beliefs_added,
                    self.beliefs_removed, self.beliefs_changed, self.edges_added, self.edges_removed,
                    self.edges_changed))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["narrative_before"], data["narrative_after"] = data.pop("narratives")
        data["changed"] = self.changed
        return data

    def summary(self) -> str:
        """A readable account, for people and for the CLI."""
        if not self.changed:
            return f"{self.source} → {self.target}: no change"
        lines = [f"{self.source} → {self.target}"]
        if self.turns_added:
            lines.append(f"  turns: {self.turns_added:+d}")
        if self.narrative_changed:
            lines.append("  narrative:")
            lines.extend(f"    {line}" for line in self.narrative_diff)
        if self.threads_changed:
            lines.append("  threads changed")
        for label, items in (("belief +", self.beliefs_added), ("belief -", self.beliefs_removed)):
            lines.extend(f"  {label} {item['belief_id']}: {item['statement']}" for item in items)
        lines.extend(f"  belief ~ {c.key}: {c.before:.3f} → {c.after:.3f} {c.text}" for c in self.beliefs_changed)
        for label, items in (("edge +", self.edges_added), ("edge -", self.edges_removed)):
            lines.extend(f"  {label} {item['src']} -{item['relation']}-> {item['dst']}" for item in items)
        lines.extend(f"  edge ~ {c.key}: {c.before:.3f} → {c.after:.3f}" for c in self.edges_changed)
        return "\n".join(lines)


def _label(state: ConversationState) -> str:
    return f"{state.key.branch}@{state.last_seq}"


def diff(a: ConversationState, b: ConversationState) -> StateDiff:
    """What changed from ``a`` to ``b``."""
    before, after = a.narrative or "", b.narrative or ""
    narrative_diff = tuple(
        line.rstrip("\n") for line in difflib.unified_diff(
            before.splitlines(), after.splitlines(), _label(a), _label(b), lineterm="", n=1
        )
    )
    beliefs_a, beliefs_b = a.beliefs, b.beliefs
    edges_a, edges_b = a.edges, b.edges
    return StateDiff(
        source=_label(a),
        target=_label(b),
        narrative_changed=a.narrative != b.narrative,
        narrative_diff=narrative_diff,
        threads_changed=a.threads != b.threads,
        turns_added=b.turn_count - a.turn_count,
        beliefs_added=tuple(belief_view(beliefs_b[k]) for k in beliefs_b if k not in beliefs_a),
        beliefs_removed=tuple(belief_view(beliefs_a[k]) for k in beliefs_a if k not in beliefs_b),
        beliefs_changed=tuple(
            Change(k, beliefs_a[k].confidence, beliefs_b[k].confidence, beliefs_b[k].statement)
            for k in beliefs_a
            if k in beliefs_b and abs(beliefs_a[k].confidence - beliefs_b[k].confidence) > CONFIDENCE_EPSILON
        ),
        edges_added=tuple(_edge_view(edges_b[k]) for k in edges_b if k not in edges_a),
        edges_removed=tuple(_edge_view(edges_a[k]) for k in edges_a if k not in edges_b),
        edges_changed=tuple(
            Change("/".join(k), edges_a[k].confidence, edges_b[k].confidence)
            for k in edges_a
            if k in edges_b and abs(edges_a[k].confidence - edges_b[k].confidence) > CONFIDENCE_EPSILON
        ),
        narratives=(a.narrative, b.narrative),
    )


__all__ = ["Change", "StateDiff", "belief_view", "diff", "review_view", "state_view"]
