"""What changed between two states: the narrative and the portrait as text diffs; beliefs, edges and
review items as sets, each added, removed or changed item listed with the fields that changed;
the reflections that ran in between, with how many beliefs they decayed and forgot; for a persona
conversation, the character's emotions, relationship, goals (the active hard goal), latest
interpretation, plan and appraisal, and its episodes (:func:`persona_diff`, :func:`persona_view`).

``diff(a, b)`` works across seqs and across branches alike (a branch's state at the fork point
equals its parent's). Confidences are compared as stored by the projection; a change smaller
than ``CONFIDENCE_EPSILON`` is not a change. Timestamps are not compared (``BELIEF_FIELDS``,
``EDGE_FIELDS``, ``REVIEW_FIELDS`` say what is): a recompute branch re-derives its beliefs later
than main did, and that alone is no change. :func:`diff_lines` renders a diff for people — the
CLI's ``replay diff`` and the recompute report print it.

Across a reflection on one branch, the portrait's diff (by sentence:
:func:`~mirror.replay.reflections.portrait_diff`) shows what it rewrote, ``beliefs_removed`` are
the beliefs it forgot (nothing else removes one) and the confidence changes in
``beliefs_changed`` include those it decayed; ``reflections``, ``beliefs_decayed`` and
``beliefs_forgotten`` count them (the projection's counters, after minus before).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from mirror.events.vectors import dimensions
from mirror.projections.beliefs import BeliefState, ReviewItem, strength
from mirror.projections.persona import PersonaState
from mirror.projections.state import ConversationState

from .reflections import portrait_diff

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
        "beliefs": [{**belief_view(belief), "strength": round(strength(belief, state.last_timestamp or belief.last_reinforced), 4)}
                    for belief in state.beliefs.values()],
        "review_items": [review_view(item) for item in state.review_items.values()],
        "edges": [_edge_view(edge) for edge in state.edges.values()],
        "memory": state.memory,
        "reflection": state.reflection,
        "portrait": state.portrait,
        "portrait_seq": state.portrait_seq,
        "pending_insights": [insight.text for insight in state.pending_insights],
        "last_reflection": None if state.last_reflection is None else asdict(state.last_reflection),
        "reflections": state.counters.reflections,
        "last_failure": None if state.last_failure is None else asdict(state.last_failure),
        "fork": None if state.fork is None else asdict(state.fork),
        "events_by_type": dict(state.counters.events_by_type),
        "persona": persona_view(state.persona),
        "instructions": state.instructions,
        "instructions_seq": state.instructions_seq,
    }


def persona_view(persona: PersonaState | None) -> dict[str, Any] | None:
    """A persona conversation's character as it stands (``None`` for the MIRROR mind): its emotions,
    relationship and goals (the active hard goal named), the last interpretation, plan and appraisal,
    and its episodes (the vector's size, not its float32s)."""
    if persona is None:
        return None
    return {
        "name": persona.name, "version": persona.version, "order": persona.order, "seq": persona.seq,
        "emotions": dict(persona.emotions), "emotion_turn": persona.emotion_turn, "emotion_reason": persona.emotion_reason,
        "relationship": dict(persona.relationship), "relationship_turn": persona.relationship_turn,
        "relationship_reason": persona.relationship_reason,
        "hard_goals": list(persona.hard_goals), "hard_met": persona.hard_met, "hard_met_turns": list(persona.hard_met_turns),
        "active_hard_goal": persona.active_hard_goal, "soft_goals": dict(persona.soft_goals),
        "goal_turn": persona.goal_turn, "goal_reason": persona.goal_reason,
        "interpretation": None if persona.interpretation is None else asdict(persona.interpretation),
        "plan": None if persona.plan is None else asdict(persona.plan),
        "appraisal": None if persona.appraisal is None else asdict(persona.appraisal),
        "episodes": [{"seq": episode.seq, "turn": episode.turn, "text": episode.text, "importance": episode.importance,
                      "embedding_dimensions": dimensions(episode.embedding)} for episode in persona.episodes],
        "episode_turn": persona.episode_turn,
        "biography": list(persona.biography),
    }


PERSONA_STEPS = ("interpretation", "plan", "appraisal")
"""The turn path's steps whose latest text a persona diff compares."""


def persona_diff(a: PersonaState | None, b: PersonaState | None) -> dict[str, dict[str, Any]]:
    """What changed in the character from ``a`` to ``b``, by dotted name (``emotions.joy``,
    ``relationship.trust``, ``soft_goals.<goal>``, ``active_hard_goal``, ``appraisal``, ``episodes``…),
    each as ``{"before": …, "after": …}``; a persona chosen (or gone) is ``persona``. ``episodes``
    holds the counts as ``before``/``after`` and the episodes themselves (``{"turn", "text",
    "importance"}``) in ``added`` and ``removed``: equal counts with other episodes still say what changed."""
    if a is None or b is None:
        if a is b:
            return {}
        return {"persona": {"before": None if a is None else a.name, "after": None if b is None else b.name}}
    changed: dict[str, dict[str, Any]] = {}
    if (a.name, a.version) != (b.name, b.version):
        changed["persona"] = {"before": f"{a.name} ({a.version[:12]})", "after": f"{b.name} ({b.version[:12]})"}
    for group in ("emotions", "relationship", "soft_goals"):
        before, after = getattr(a, group), getattr(b, group)
        for name in dict.fromkeys([*before, *after]):
            old, new = before.get(name), after.get(name)
            if old is None or new is None or abs(old - new) > CONFIDENCE_EPSILON:
                changed[f"{group}.{name}"] = {"before": old, "after": new}
    if a.active_hard_goal != b.active_hard_goal:
        changed["active_hard_goal"] = {"before": a.active_hard_goal, "after": b.active_hard_goal}
    for step in PERSONA_STEPS:
        old_step, new_step = getattr(a, step), getattr(b, step)
        old_text, new_text = (None if old_step is None else old_step.text), (None if new_step is None else new_step.text)
        if old_text != new_text:
            changed[step] = {"before": old_text, "after": new_text}
    episodes_a = [_episode(episode) for episode in a.episodes]
    episodes_b = [_episode(episode) for episode in b.episodes]
    if episodes_a != episodes_b:
        # the counts alone can be equal (the oldest dropped as one is added, or re-thought text):
        # the episodes added and removed say what changed
        changed["episodes"] = {"before": len(episodes_a), "after": len(episodes_b),
                               "added": [episode for episode in episodes_b if episode not in episodes_a],
                               "removed": [episode for episode in episodes_a if episode not in episodes_b]}
    return changed


def _episode(episode: Any) -> dict[str, Any]:
    """An episode as a persona diff compares and shows it (its vector left out)."""
    return {"turn": episode.turn, "text": episode.text, "importance": episode.importance}


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


BELIEF_FIELDS = ("statement", "memory_type", "kind", "about", "confidence", "recall_count", "source_turn",
                 "embedding_model")
"""What a belief's change is made of. Timestamps are left out: a branch re-thought later holds the
same belief with other times, and that is no change of what is believed."""
EDGE_FIELDS = ("origin", "confidence", "contradicted_by")
"""What an edge's change is made of (its timestamps left out, as for beliefs)."""
REVIEW_FIELDS = ("kind", "seq")
"""What a review item's change is made of (the pair it opposes is its identity)."""


@dataclass(frozen=True)
class Change:
    """An item in both states whose fields differ: ``key`` names it (a belief id, ``src/relation/dst``
    or a review id), ``text`` says it for a reader (the statement, the edge), ``fields`` holds each
    field that changed as ``{"before": …, "after": …}``; ``before``/``after`` are its confidence
    (0 for a review item, which has none)."""

    key: str
    before: float
    after: float
    text: str = ""
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)


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
    reviews_added: tuple[dict[str, Any], ...] = ()
    reviews_removed: tuple[dict[str, Any], ...] = ()
    reviews_changed: tuple[Change, ...] = ()
    portrait_changed: bool = False
    portrait_diff: tuple[str, ...] = ()
    reflections: int = 0
    """Reflections that ran from the source to the target (after minus before: negative across
    branches when the source's branch reflected more)."""
    beliefs_decayed: int = 0
    beliefs_forgotten: int = 0
    persona_changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The persona's changes (:func:`persona_diff`); empty for the MIRROR mind or no change."""
    replies_removed: tuple[dict[str, Any], ...] = ()
    """Exchanges among the source's recent turns that the target does not hold (a regenerated or
    edited turn's earlier reply, across branches): ``{"seq", "user_message", "reply"}``."""
    replies_added: tuple[dict[str, Any], ...] = ()
    """Exchanges among the target's recent turns that the source does not hold."""
    instructions_changed: dict[str, Any] | None = None
    """The client's instructions, ``{"before", "after"}``, when they differ."""
    narratives: tuple[str | None, str | None] = field(default=(None, None), repr=False)
    portraits: tuple[str | None, str | None] = field(default=(None, None), repr=False)

    @property
    def changed(self) -> bool:
        return any((self.narrative_changed, self.portrait_changed, self.reflections, self.threads_changed,
                    self.turns_added, self.beliefs_added,
                    self.beliefs_removed, self.beliefs_changed, self.edges_added, self.edges_removed,
                    self.edges_changed, self.reviews_added, self.reviews_removed, self.reviews_changed,
                    self.persona_changed, self.replies_added, self.replies_removed, self.instructions_changed))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["narrative_before"], data["narrative_after"] = data.pop("narratives")
        data["portrait_before"], data["portrait_after"] = data.pop("portraits")
        data["changed"] = self.changed
        return data

    def summary(self) -> str:
        """A readable account, for people and for the CLI (:func:`diff_lines` of :meth:`as_dict`)."""
        return "\n".join(diff_lines(self.as_dict()))


def _label(state: ConversationState) -> str:
    return f"{state.key.branch}@{state.last_seq}"


def _same(name: str, before: Any, after: Any) -> bool:
    if name == "confidence":
        return abs(before - after) <= CONFIDENCE_EPSILON
    return bool(before == after)


def _fields(before: Any, after: Any, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The fields of ``names`` that differ from ``before`` to ``after`` (JSON-ready values)."""
    changed = {}
    for name in names:
        old, new = getattr(before, name), getattr(after, name)
        if not _same(name, old, new):
            changed[name] = {"before": _plain(old), "after": _plain(new)}
    return changed


def _plain(value: Any) -> Any:
    """Tuples (an edge's ``contradicted_by`` keys) as lists: what the JSON answer holds."""
    return [_plain(item) for item in value] if isinstance(value, tuple) else value


def _edge_text(src: str, relation: str, dst: str) -> str:
    return f"{src} -{relation}-> {dst}"


def _review_entry(item: ReviewItem, state: ConversationState) -> dict[str, Any]:
    """A review item with both statements, as the reviews API shows it."""
    def statement(belief_id: str) -> str:
        belief = state.beliefs.get(belief_id)
        return belief.statement if belief is not None else ""

    return {**review_view(item), "statement": statement(item.belief_id), "opposed_statement": statement(item.opposed_id)}


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
    reviews_a, reviews_b = a.review_items, b.review_items
    beliefs_changed = []
    for belief_id in beliefs_a:
        if belief_id in beliefs_b and (fields := _fields(beliefs_a[belief_id], beliefs_b[belief_id], BELIEF_FIELDS)):
            beliefs_changed.append(Change(belief_id, beliefs_a[belief_id].confidence, beliefs_b[belief_id].confidence,
                                          beliefs_b[belief_id].statement, fields))
    edges_changed = []
    for edge in edges_a:
        if edge in edges_b and (fields := _fields(edges_a[edge], edges_b[edge], EDGE_FIELDS)):
            edges_changed.append(Change("/".join(edge), edges_a[edge].confidence, edges_b[edge].confidence,
                                        _edge_text(*edge), fields))
    reviews_changed = []
    for pair in reviews_a:
        if pair in reviews_b and (fields := _fields(reviews_a[pair], reviews_b[pair], REVIEW_FIELDS)):
            entry = _review_entry(reviews_b[pair], b)
            reviews_changed.append(Change(reviews_b[pair].review_id, 0.0, 0.0,
                                          f"{entry['statement']} / {entry['opposed_statement']}", fields))
    return StateDiff(
        source=_label(a),
        target=_label(b),
        narrative_changed=a.narrative != b.narrative,
        narrative_diff=narrative_diff,
        threads_changed=a.threads != b.threads,
        turns_added=b.turn_count - a.turn_count,
        beliefs_added=tuple(belief_view(beliefs_b[k]) for k in beliefs_b if k not in beliefs_a),
        beliefs_removed=tuple(belief_view(beliefs_a[k]) for k in beliefs_a if k not in beliefs_b),
        beliefs_changed=tuple(beliefs_changed),
        edges_added=tuple(_edge_view(edges_b[k]) for k in edges_b if k not in edges_a),
        edges_removed=tuple(_edge_view(edges_a[k]) for k in edges_a if k not in edges_b),
        edges_changed=tuple(edges_changed),
        reviews_added=tuple(_review_entry(reviews_b[k], b) for k in reviews_b if k not in reviews_a),
        reviews_removed=tuple(_review_entry(reviews_a[k], a) for k in reviews_a if k not in reviews_b),
        reviews_changed=tuple(reviews_changed),
        narratives=(a.narrative, b.narrative),
        portrait_changed=a.portrait != b.portrait,
        portrait_diff=portrait_diff(a.portrait, b.portrait, labels=(_label(a), _label(b))),
        reflections=b.counters.reflections - a.counters.reflections,
        beliefs_decayed=b.counters.beliefs_decayed - a.counters.beliefs_decayed,
        beliefs_forgotten=b.counters.beliefs_forgotten - a.counters.beliefs_forgotten,
        portraits=(a.portrait, b.portrait),
        persona_changed=persona_diff(a.persona, b.persona),
        replies_removed=_replies_only_in(a, b),
        replies_added=_replies_only_in(b, a),
        instructions_changed=None if a.instructions == b.instructions else {"before": a.instructions,
                                                                            "after": b.instructions},
    )


def _replies_only_in(a: ConversationState, b: ConversationState) -> tuple[dict[str, Any], ...]:
    """The exchanges of ``a``'s recent turns that ``b``'s do not hold (by what was said, not by seq)."""
    held = {(turn.user_message, turn.reply) for turn in b.recent_turns}
    return tuple({"seq": turn.seq, "user_message": turn.user_message, "reply": turn.reply}
                 for turn in a.recent_turns if (turn.user_message, turn.reply) not in held)


# ---------------------------------------------------------------------------------- reading


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None or value == "":
        return "none"
    if isinstance(value, list):
        return "[" + ", ".join("/".join(map(str, item)) if isinstance(item, list) else str(item) for item in value) + "]"
    return str(value)


def _field_changes(fields: dict[str, Any]) -> str:
    return ", ".join(f"{name} {_value(change['before'])} → {_value(change['after'])}" for name, change in fields.items())


def _belief_line(sign: str, belief: dict[str, Any]) -> str:
    return (f"{sign} {belief['belief_id']}  {belief.get('statement', '')}  ({belief.get('kind', 'belief')}, "
            f"{belief.get('memory_type', 'standard')}, confidence {_value(float(belief.get('confidence', 0)))})")


def _edge_line(sign: str, edge: dict[str, Any]) -> str:
    return (f"{sign} {_edge_text(edge['src'], edge['relation'], edge['dst'])}  ({edge.get('origin', 'conversation')}, "
            f"confidence {_value(float(edge.get('confidence', 0)))})")


def _review_line(sign: str, review: dict[str, Any]) -> str:
    statement = f" {review['statement']!r}" if review.get("statement") else ""
    opposed = f" {review['opposed_statement']!r}" if review.get("opposed_statement") else ""
    return f"{sign} {review['review_id']}  {review['belief_id']}{statement} contradicts {review['opposed_id']}{opposed}"


def _episode_line(sign: str, episode: dict[str, Any]) -> str:
    """An episode a persona diff added or removed; its turn counted from 1, as people count turns."""
    return f"      {sign} turn {episode['turn'] + 1} (importance {_value(float(episode['importance']))})  {episode['text']}"


def _change_line(change: dict[str, Any]) -> str:
    fields = change.get("fields") or {"confidence": {"before": change["before"], "after": change["after"]}}
    text = f"  {change['text']}" if change.get("text") else ""
    return f"~ {change['key']}{text}  ({_field_changes(fields)})"


def diff_lines(data: Mapping[str, Any], *, narrative_lines: int | None = None) -> list[str]:
    """A diff (:meth:`StateDiff.as_dict`, or the diff API's answer) as a person reads it: the two
    states, then each section that changed, listing the reflections that ran, the portrait's diff
    and every belief, edge and review item added, removed or changed (its id, statement or edge,
    and the fields that changed). The narrative's and the portrait's unified diffs are cut after
    ``narrative_lines`` lines when given. Ids are never shortened."""
    header = f"{data['source']} → {data['target']}"
    if not data.get("changed"):
        return [f"{header}: no change"]
    lines = [header]
    if data.get("turns_added"):
        lines.append(f"  turns: {data['turns_added']:+d}")
    instructions = data.get("instructions_changed")
    if instructions:
        lines.append(f"  instructions: {_value(instructions['before'])!r} → {_value(instructions['after'])!r}")
    for sign, key in (("-", "replies_removed"), ("+", "replies_added")):
        replies = data.get(key) or ()
        if replies:
            lines.append(f"  replies {key.split('_')[1]} ({len(replies)}):")
            lines.extend(f"    {sign} seq {reply['seq']}: {reply['user_message']!r} → {reply['reply']!r}" for reply in replies)
    if data.get("narrative_changed"):
        narrative = list(data.get("narrative_diff") or ())
        shown = narrative if narrative_lines is None else narrative[:narrative_lines]
        lines += ["  narrative:", *(f"    {line}" for line in shown)]
        if len(shown) < len(narrative):
            lines.append(f"    … {len(narrative) - len(shown)} more line(s) (`mirror replay diff` shows them all)")
    if data.get("threads_changed"):
        lines.append("  threads: changed")
    if data.get("reflections"):
        lines.append(f"  reflections: {data['reflections']:+d} ({data.get('beliefs_decayed', 0):+d} belief(s) decayed, "
                     f"{data.get('beliefs_forgotten', 0):+d} forgotten)")
    if data.get("portrait_changed"):
        portrait = list(data.get("portrait_diff") or ())
        shown = portrait if narrative_lines is None else portrait[:narrative_lines]
        lines += ["  portrait:", *(f"    {line}" for line in shown)]
        if len(shown) < len(portrait):
            lines.append(f"    … {len(portrait) - len(shown)} more line(s) (`mirror replay diff` shows them all)")
    persona = data.get("persona_changed") or {}
    if persona:
        lines.append(f"  persona ({len(persona)}):")
        for name, change in persona.items():
            lines.append(f"    ~ {name}  {_value(change['before'])} → {_value(change['after'])}")
            lines.extend(_episode_line(sign, episode) for sign, key in (("-", "removed"), ("+", "added"))
                         for episode in change.get(key) or ())
    sections: tuple[tuple[str, str, Any], ...] = (
        ("beliefs", "added", lambda item: _belief_line("+", item)),
        ("beliefs", "removed", lambda item: _belief_line("-", item)),
        ("beliefs", "changed", _change_line),
        ("edges", "added", lambda item: _edge_line("+", item)),
        ("edges", "removed", lambda item: _edge_line("-", item)),
        ("edges", "changed", _change_line),
        ("reviews", "added", lambda item: _review_line("+", item)),
        ("reviews", "removed", lambda item: _review_line("-", item)),
        ("reviews", "changed", _change_line),
    )
    for what, how, line in sections:
        items = data.get(f"{what}_{how}") or ()
        if items:
            lines.append(f"  {what} {how} ({len(items)}):")
            lines.extend(f"    {line(item)}" for item in items)
    return lines


__all__ = [
    "BELIEF_FIELDS", "Change", "EDGE_FIELDS", "PERSONA_STEPS", "REVIEW_FIELDS", "StateDiff", "belief_view", "diff",
    "diff_lines", "persona_diff", "persona_view", "review_view", "state_view",
]
