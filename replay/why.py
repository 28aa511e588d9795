"""Why: what produced an event, a belief or an edge, read back from a branch's events.

Every step of Mirror's thinking is an event that names what it rests on — a ``turn`` follows the
``recall`` it answered from and names the narrative it saw (``narrative_seq``), a narrative its
monologue (``monologue_seq``), a belief the turn it came from (``source_turn``), a reflection
decides about beliefs by id, a persona turn follows its interpretation, retrieval, appraisal and
plan, and each step's ``causation`` is the last event of the state it thought from. So "why did
it say that?" is a pure function of the events: :func:`why_event`, :func:`why_belief` and
:func:`why_edge` take a branch's events, oldest first, with a forked branch's inherited prefix
(as :meth:`~mirror.replay.History.events` returns them), and answer a :class:`Why`.

Causes come before what they caused (a reader may hand only the events up to the one asked
about), most direct first; each has a ``role`` from :data:`ROLES`:

- ``turn``: ``recall`` (the recall event just before it, same turn), ``narrative`` (the one it
  saw), ``portrait`` (the last accepted reflection in the state it answered from, unless the
  turn's reflection flag is off), and for a persona turn its ``plan``, ``appraisal``,
  ``retrieval`` and ``interpretation``, nearest first;
- ``narrative``: ``monologue`` and ``turn`` (the turn it was thought after); ``monologue``:
  ``turn``; ``recall``: ``belief`` (each belief recalled, as its latest event before the recall
  that asserted it); ``reflection``: ``insight`` (the pending insights it consolidated: the last
  ``insights_used`` insights since the previous reflection, oldest first) and ``turn``;
- a belief event: ``source_turn``, ``memory_step`` (the memory stage's event of the same step,
  which follows it: the one cause a reader must read past the event for) and ``related`` (the
  beliefs a contradiction opposes or a consistency supports); an edge event: ``source_turn`` (its
  envelope turn, for an edge the conversation gave), ``memory_step`` and ``contradiction`` (the
  edge it contradicts);
- insights, memory steps, failures and the persona's background steps (emotion, relationship,
  goal, episode): ``turn`` (their ``for_turn``);
- an event asked about by seq also lists ``causation`` (the event its causation id names)
  unless that event is already a cause.

A belief id or an edge is answered from its newest event (``event``) and its ``history``: every
event that touched it, oldest first (its belief or edge events, the beliefs that opposed or
supported it, the recalls that gave it to the Talker, the reflections that decided about it).
Its causes are those of the event that brought it into the state (its first assertion, or the
first after a reflection forgot it; for an edge its first event, and what it contradicts), plus,
for a belief, ``reflection``: every reflection whose decay decisions named it (decayed, forgot,
or kept it).

Events appear as the HTTP API shows them (:func:`event_json`): the record, its vectors as base64
or, unless asked for, as ``null``. A belief's or an edge's recalls can number in the hundreds, so
:meth:`Why.as_dict` lists them apart from the rest of its history, a page at a time
(:class:`RecallPage`), each as a line (seq, turn, summary) without its event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mirror.events.codec import event_to_record, to_json_ready
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import (
    Belief,
    Edge,
    Insight,
    MemoryStep,
    Monologue,
    Narrative,
    Provenance,
    Recall,
    Reflection,
    Turn,
)

from .errors import UnknownPosition, UnknownSubject

__all__ = ["BELIEF_TOUCHES", "ROLES", "Cause", "RecallPage", "Subject", "Touch", "Why", "event_json", "provenance_json",
           "summarize", "why_belief", "why_edge", "why_event"]

ROLES = ("recall", "narrative", "portrait", "plan", "appraisal", "retrieval", "interpretation", "monologue", "turn",
         "belief", "source_turn", "memory_step", "related", "reflection", "contradiction", "insight", "causation")
"""Every cause's role, in the order a page may list them."""

TEXT_CHARS = 80
"""How much of a reply, narrative or portrait a one-line summary shows."""

_PERSONA_TURN_STEPS = ("interpretation", "retrieval", "appraisal", "plan")
_FOR_TURN_TYPES = ("insight", "memory_step", "thinker_failed", "emotion", "relationship", "goal", "episode")
_ASSERTING = ("assert", "reinforce", "consistent", "contradict")
BELIEF_TOUCHES = ("belief", "recall", "reflection")
"""The event types that can touch a belief (:func:`why_belief`'s history): a reader may hand it
only these, those that name the belief, and the origin's causes (its turn, its memory step)."""

EdgeKey = tuple[str, str, str]


def event_json(event: Event, *, vectors: bool = True) -> dict[str, Any]:
    """``event`` as ``GET /v1/conversations/{id}/events`` shows it: the JSON-ready record
    (:func:`~mirror.events.codec.to_json_ready`: vectors as base64), tuples as lists. Without
    ``vectors``, each field that holds vectors is ``null`` (a vector is ~2 KB of base64 that no
    page shows: a recall's, a memory step's, a persona's biography); an empty one stays ``""``
    (a keyword-only recall recorded none), so a reader still tells the two apart."""
    if vectors:
        record = to_json_ready(event)
    else:
        record = event_to_record(event)
        record["payload"] = {name: "" if value == b"" else None if _holds_bytes(value) else value
                             for name, value in record["payload"].items()}
        record["id"] = event.id
    value: dict[str, Any] = json.loads(json.dumps(record, default=str))
    return value


def _holds_bytes(value: Any) -> bool:
    return type(value) is bytes or (type(value) in (tuple, list) and any(type(item) is bytes for item in value))


def provenance_json(provenance: Provenance | None) -> dict[str, Any] | None:
    """The model call behind an event, as the page shows it (None when no model produced it)."""
    if provenance is None:
        return None
    return {"model": provenance.model, "prompt_set": provenance.prompt_set, "latency_ms": provenance.latency_ms,
            "prompt_tokens": provenance.prompt_tokens, "completion_tokens": provenance.completion_tokens,
            "request_fingerprint": provenance.request_fingerprint, "parameters": dict(provenance.parameters)}


@dataclass(frozen=True, slots=True)
class Subject:
    """What was asked about: an event (``seq``), a belief (``belief_id``) or an edge."""

    kind: str
    seq: int | None
    belief_id: str | None
    edge: EdgeKey | None
    text: str


@dataclass(frozen=True, slots=True)
class Cause:
    role: str
    label: str
    event: Event


@dataclass(frozen=True, slots=True)
class Touch:
    """One event that touched a belief or an edge, with what it did to it in words."""

    event: Event
    summary: str


@dataclass(frozen=True, slots=True)
class RecallPage:
    """Which of a belief's or an edge's recalls an answer lists: those after seq ``after``, at most ``limit``."""

    after: int = 0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class Why:
    key: StreamKey
    subject: Subject
    event: Event | None
    causes: tuple[Cause, ...]
    history: tuple[Touch, ...] = ()
    origin: Event | None = None
    """The event that brought a belief or an edge into the state (its causes are this one's)."""

    def as_dict(self, *, recalls: RecallPage = RecallPage(), vectors: bool = True) -> dict[str, Any]:
        """The answer as JSON; a belief's or an edge's recalls apart from the rest of its history
        (``history``), under ``recalls``: their ``total``, the page asked for (``items``: seq, turn,
        summary) and ``next_after`` (the ``after`` of the next page; null on the last)."""
        subject = self.subject
        recalled = [touch for touch in self.history if isinstance(touch.event.payload, Recall)]
        page = [touch for touch in recalled if touch.event.seq > recalls.after]
        shown = page if recalls.limit is None else page[: recalls.limit]
        answer = {
            "conversation": self.key.conversation, "branch": self.key.branch,
            "subject": {"kind": subject.kind, "seq": subject.seq, "belief_id": subject.belief_id,
                        "edge": None if subject.edge is None else list(subject.edge), "text": subject.text},
            "event": None if self.event is None else event_json(self.event, vectors=vectors),
            "provenance": None if self.event is None else provenance_json(self.event.provenance),
            "causes": [{"role": cause.role, "label": cause.label, "event": event_json(cause.event, vectors=vectors),
                        "provenance": provenance_json(cause.event.provenance)} for cause in self.causes],
            "history": [{"seq": touch.event.seq, "type": touch.event.type, "turn": touch.event.turn,
                         "summary": touch.summary, "event": event_json(touch.event, vectors=vectors)}
                        for touch in self.history if not isinstance(touch.event.payload, Recall)],
        }
        if subject.kind != "event":
            answer["recalls"] = {
                "total": len(recalled), "after": recalls.after,
                "items": [{"seq": touch.event.seq, "turn": touch.event.turn, "summary": touch.summary} for touch in shown],
                "next_after": shown[-1].event.seq if len(shown) < len(page) else None,
            }
        return answer


# ----------------------------------------------------------------------------- one-line summaries


def _cut(text: str, limit: int = TEXT_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def summarize(event: Event) -> str:
    """``event`` in one line: a reply's, narrative's or portrait's first words, a belief's
    statement, an edge as ``src relation dst``, else its type and what it was for."""
    payload = event.payload
    if isinstance(payload, Turn):
        return _cut(payload.reply)
    if isinstance(payload, Belief):
        return _cut(payload.statement) if payload.statement else f"{payload.operation} {payload.belief_id}"
    if isinstance(payload, Edge):
        return f"{payload.src} {payload.relation} {payload.dst}"
    if isinstance(payload, Narrative | Insight):
        return _cut(payload.text)
    if isinstance(payload, Monologue):
        return _cut(payload.reasoning)
    if isinstance(payload, Recall):
        return _cut(f"recalled {len(payload.belief_ids)} belief(s) for: {payload.query}")
    if isinstance(payload, Reflection):
        return _cut(("accepted: " if payload.accepted else "rejected: ") + payload.portrait)
    if isinstance(payload, MemoryStep):
        return f"memory of turn {payload.for_turn}: {payload.beliefs} belief(s), {payload.edges} edge(s)"
    text = getattr(payload, "text", None)
    if isinstance(text, str):
        return _cut(f"{event.type}: {text}")
    for_turn = getattr(payload, "for_turn", None)
    return event.type if for_turn is None else f"{event.type} of turn {for_turn}"


# ------------------------------------------------------------------------------------- the index


class _Index:
    """The branch's events, looked up by seq, id and turn number."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.by_seq = {event.seq: event for event in events}
        self.by_id = {event.id: event for event in events}
        self.turns = {event.turn: event for event in events if isinstance(event.payload, Turn)}

    def before(self, seq: int) -> Iterable[Event]:
        """Events before ``seq``, newest first."""
        return (event for event in reversed(self.events) if event.seq < seq)

    def turn(self, number: int | None, before: int) -> Event | None:
        found = None if number is None else self.turns.get(number)
        return found if found is not None and found.seq < before else None

    def asserted(self, belief_id: str, before: int) -> Event | None:
        """The latest event before ``before`` that asserted ``belief_id``."""
        return next((event for event in self.before(before) if isinstance(event.payload, Belief)
                     and event.payload.belief_id == belief_id and event.payload.operation in _ASSERTING), None)

    def memory_step(self, event: Event) -> Event | None:
        """The memory stage's event of ``event``'s step: the first ``memory_step`` after it with its causation."""
        if event.causation is None:
            return None
        return next((later for later in self.events if later.seq > event.seq and later.causation == event.causation
                     and isinstance(later.payload, MemoryStep)), None)


def _for_turn(index: _Index, event: Event) -> list[Cause]:
    for_turn = getattr(event.payload, "for_turn", None)
    turn = index.turn(for_turn, event.seq)
    return [] if turn is None else [Cause("turn", f"turn {for_turn}", turn)]


def _turn_causes(index: _Index, event: Event, payload: Turn) -> list[Cause]:
    causes = []
    basis = event.seq
    previous = index.by_seq.get(event.seq - 1)
    if previous is not None and isinstance(previous.payload, Recall) and previous.turn == event.turn:
        causes.append(Cause("recall", summarize(previous), previous))
        seen = index.by_id.get(previous.causation or "")
        basis = event.seq if seen is None else seen.seq + 1  # the state the recall and the Talker saw
    narrative = index.by_seq.get(payload.narrative_seq) if payload.narrative_seq is not None else None
    if narrative is not None and isinstance(narrative.payload, Narrative):
        causes.append(Cause("narrative", summarize(narrative), narrative))
    if payload.reflection is not False:
        portrait = next((earlier for earlier in index.before(basis) if isinstance(earlier.payload, Reflection)
                         and earlier.payload.accepted), None)
        if portrait is not None:
            causes.append(Cause("portrait", summarize(portrait), portrait))
    for earlier in index.before(event.seq):  # the persona's steps: appended with the turn, just before it
        if earlier.type not in _PERSONA_TURN_STEPS or getattr(earlier.payload, "for_turn", None) != event.turn:
            break
        causes.append(Cause(earlier.type, summarize(earlier), earlier))
    return causes


def _belief_causes(index: _Index, event: Event, payload: Belief) -> list[Cause]:
    causes = []
    turn = index.turn(payload.source_turn, event.seq)
    if turn is not None:
        causes.append(Cause("source_turn", f"turn {payload.source_turn}", turn))
    step = index.memory_step(event)
    if step is not None:
        causes.append(Cause("memory_step", summarize(step), step))
    verb = "opposes" if payload.operation == "contradict" else "supports"
    for other in dict.fromkeys(payload.related):
        related = index.asserted(other, event.seq) if other != payload.belief_id else None
        if related is not None:
            causes.append(Cause("related", f"{verb}: {summarize(related)}", related))
    return causes


def _edge_causes(index: _Index, event: Event, payload: Edge) -> list[Cause]:
    causes = []
    turn = index.turn(event.turn, event.seq)
    if turn is not None and payload.origin in ("conversation", "user_confirmed"):
        causes.append(Cause("source_turn", f"turn {event.turn}", turn))
    step = index.memory_step(event)
    if step is not None:
        causes.append(Cause("memory_step", summarize(step), step))
    if payload.contradicts is not None:
        opposed = next((earlier for earlier in index.before(event.seq) if isinstance(earlier.payload, Edge)
                        and _edge_key(earlier.payload) == tuple(payload.contradicts)), None)
        if opposed is not None:
            causes.append(Cause("contradiction", f"contradicts: {summarize(opposed)}", opposed))
    return causes


def _reflection_causes(index: _Index, event: Event, payload: Reflection) -> list[Cause]:
    insights: list[Event] = []
    for earlier in index.before(event.seq):
        if isinstance(earlier.payload, Reflection):
            break  # a reflection that ran consumed the insights pending before it
        if isinstance(earlier.payload, Insight):
            insights.append(earlier)
    used = list(reversed(insights[: payload.insights_used])) if payload.insights_used else []
    return [Cause("insight", summarize(insight), insight) for insight in used] + _for_turn(index, event)


def _causes(index: _Index, event: Event) -> list[Cause]:
    payload = event.payload
    if isinstance(payload, Turn):
        return _turn_causes(index, event, payload)
    if isinstance(payload, Narrative):
        monologue = index.by_seq.get(payload.monologue_seq) if payload.monologue_seq is not None else None
        causes = [] if monologue is None else [Cause("monologue", summarize(monologue), monologue)]
        turn = index.turn(event.turn, event.seq)
        return causes + ([] if turn is None else [Cause("turn", f"turn {event.turn}", turn)])
    if isinstance(payload, Monologue):
        turn = index.turn(event.turn, event.seq)
        return [] if turn is None else [Cause("turn", f"turn {event.turn}", turn)]
    if isinstance(payload, Recall):
        recalled = ((belief_id, index.asserted(belief_id, event.seq)) for belief_id in dict.fromkeys(payload.belief_ids))
        return [Cause("belief", summarize(found), found) for _, found in recalled if found is not None]
    if isinstance(payload, Belief):
        return _belief_causes(index, event, payload)
    if isinstance(payload, Edge):
        return _edge_causes(index, event, payload)
    if isinstance(payload, Reflection):
        return _reflection_causes(index, event, payload)
    if event.type in _FOR_TURN_TYPES:
        return _for_turn(index, event)
    return []


def _with_causation(index: _Index, event: Event, causes: list[Cause]) -> list[Cause]:
    cause = index.by_id.get(event.causation or "")
    if cause is None or any(listed.event.seq == cause.seq for listed in causes):
        return causes
    return [*causes, Cause("causation", f"thought from the state after seq {cause.seq}: {summarize(cause)}", cause)]


# ------------------------------------------------------------------------------------ the questions


def why_event(key: StreamKey, events: Sequence[Event], seq: int) -> Why:
    """What produced the event at ``seq`` of ``key`` (whose events, oldest first, ``events`` are,
    inherited ones included; those after ``seq`` are not needed). :class:`UnknownPosition` when
    ``events`` hold no such seq."""
    index = _Index(events)
    event = index.by_seq.get(seq) if type(seq) is int else None
    if event is None:
        raise UnknownPosition(key, seq, events[-1].seq if events else 0)
    causes = _with_causation(index, event, _causes(index, event))
    subject = Subject("event", seq, None, None, summarize(event))
    return Why(key, subject, event, tuple(causes))


def why_belief(key: StreamKey, events: Sequence[Event], belief_id: str) -> Why:
    """What produced belief ``belief_id`` and every event that touched it; :class:`UnknownSubject`
    when no event of ``events`` names it."""
    index = _Index(events)
    touches: list[Touch] = []
    origin: Event | None = None
    held = False  # whether the state holds the belief after the events read so far
    statement = ""
    reflections: list[Cause] = []
    for event in events:
        payload = event.payload
        if isinstance(payload, Belief) and payload.belief_id == belief_id:
            if payload.operation in _ASSERTING and not held:
                origin, held = event, True
            statement = payload.statement or statement
            touches.append(Touch(event, f"{payload.operation}" + (f": {_cut(payload.statement)}" if payload.statement else "")))
        elif isinstance(payload, Belief) and belief_id in payload.related:
            verb = "opposed by" if payload.operation == "contradict" else "supported by"
            touches.append(Touch(event, f"{verb} {payload.belief_id}: {_cut(payload.statement)}"))
        elif isinstance(payload, Recall) and belief_id in payload.belief_ids:
            touches.append(Touch(event, f"recalled for turn {event.turn}"))
        elif isinstance(payload, Reflection):
            decision = next((decision for decision in payload.decisions if decision[0] == belief_id), None)
            if decision is None:
                continue
            _, proposed, applied, rule = decision
            said = f"{applied}" + (f" (the model proposed {proposed}; rule {rule})" if rule else "")
            touches.append(Touch(event, f"reflection: {said}"))
            reflections.append(Cause("reflection", f"reflection {said}", event))
            held = held and applied != "forget"
    if not touches:
        raise UnknownSubject(key, "belief", repr(belief_id))
    causes: list[Cause] = []
    if origin is not None:
        assert isinstance(origin.payload, Belief)
        causes = [cause for cause in _belief_causes(index, origin, origin.payload) if cause.role != "related"]
    subject = Subject("belief", None, belief_id, None, statement or belief_id)
    return Why(key, subject, touches[-1].event, (*causes, *reflections), tuple(touches), origin)


def _edge_key(payload: Edge) -> EdgeKey:
    return (payload.src, payload.relation, payload.dst)


def why_edge(key: StreamKey, events: Sequence[Event], edge: EdgeKey) -> Why:
    """What produced the edge ``(src, relation, dst)`` and every event that touched it;
    :class:`UnknownSubject` when no event of ``events`` names it."""
    edge = (edge[0], edge[1], edge[2])
    index = _Index(events)
    touches: list[Touch] = []
    origin: Event | None = None
    for event in events:
        payload = event.payload
        if isinstance(payload, Edge) and _edge_key(payload) == edge:
            origin = origin or event
            touches.append(Touch(event, f"{payload.operation} ({payload.origin})"))
        elif isinstance(payload, Edge) and payload.contradicts is not None and tuple(payload.contradicts) == edge:
            touches.append(Touch(event, f"contradicted by {summarize(event)}"))
        elif isinstance(payload, Recall) and edge in {tuple(walked) for walked in payload.edges}:
            touches.append(Touch(event, f"recalled for turn {event.turn}"))
    if origin is None:
        raise UnknownSubject(key, "edge", " ".join(edge))
    assert isinstance(origin.payload, Edge)
    causes = _edge_causes(index, origin, origin.payload)
    opposing = [event for event in events if isinstance(event.payload, Edge) and _edge_key(event.payload) == edge
                and event.payload.contradicts is not None]
    if opposing and not any(cause.role == "contradiction" for cause in causes):
        last = opposing[-1]
        assert isinstance(last.payload, Edge)
        causes += [cause for cause in _edge_causes(index, last, last.payload) if cause.role == "contradiction"]
    subject = Subject("edge", None, None, edge, " ".join(edge))
    return Why(key, subject, touches[-1].event, tuple(causes), tuple(touches), origin)
