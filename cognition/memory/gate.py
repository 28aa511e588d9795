"""The dedup gate and the contradiction decisions: pure functions from state and vectors to events.

Why pure: the gate decides which events the memory stage writes, and replay must decide the
same from the same log. Everything it reads is in the state (the beliefs with their vectors)
or recorded on the events it writes (each candidate's vector and embedding fingerprint), so
``replay verify`` re-decides with zero embedding calls.

Rules (the numbers are the design's, in :mod:`mirror.projections.constants`):

- **Dedup**: a candidate whose cosine to an existing belief *of the same kind* reaches
  ``DEDUP_COSINE[kind]`` reinforces the nearest such belief instead of becoming a new one; the
  candidates of one step are gated in order, each against the beliefs before it *and* the
  survivors before it, so the same candidate twice in one step, or in two steps, never makes
  two beliefs. A belief without a vector (older logs) or of another vector size is matched by
  its exact statement instead.
- **Contradiction pairs**: each survivor against its ``CONTRADICTION_NEIGHBOURS`` nearest
  beliefs (from before the step) at or above ``CONTRADICTION_FLOOR``; no pairs, no call.
- **Verdicts**: a survivor with any ``CONTRADICTS`` verdict is written as one ``contradict``
  event that creates it and names every belief it opposes (the projection opens one review
  item per pair and touches neither side's confidence); otherwise any ``CONSISTENT`` verdict
  makes it one ``consistent`` event that creates it and boosts the beliefs it agrees with;
  otherwise an ``assert``. One event per survivor, because the projection's ``contradict`` and
  ``consistent`` create the belief themselves: an ``assert`` before them would count as a
  reinforcement of a belief seen once. A survivor that both contradicts and agrees keeps the
  review and forgoes the boost: the open question matters more than a 0.02 nudge.
- **Edges**: an existing ``(src, relation, dst)`` is reinforced; one whose opposite relation
  (:data:`OPPOSITE_RELATIONS`) already links the same pair is written as ``contradict`` naming
  that edge — flagged on both sides, never merged; anything else is asserted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mirror.cognition.embeddings.port import FLOAT32_LE, unpack_vector
from mirror.events.payloads import Belief, BeliefOperation, Edge
from mirror.projections.beliefs import BeliefState
from mirror.projections.constants import DEDUP_COSINE
from mirror.projections.edges import EdgeKey, EdgeState

from .extract import Candidate, EdgeCandidate, Pair, Verdict

CONTRADICTION_FLOOR = 0.4
"""Beliefs less similar than this to a survivor are not worth asking about. Low on purpose: a
negation shares most words but not all ("I do not like tea" / "I like tea" is ~0.5 with the
simulator's 64-dimension bag of words), and a pair asked about costs a few tokens, not a call."""
CONTRADICTION_NEIGHBOURS = 5
"""At most this many existing beliefs are checked against each survivor. Nearest first, so a
belief's opposite can be crowded out by more similar siblings ("I do not like X" for many X):
the limit bounds the call, at that price."""

_OPPOSITES = (
    ("causes", "prevents"),
    ("increases", "decreases"),
    ("enables", "blocks"),
    ("helps", "hurts"),
    ("improves", "worsens"),
    ("raises", "lowers"),
    ("supports", "undermines"),
)
OPPOSITE_RELATIONS: Mapping[str, str] = {**dict(_OPPOSITES), **{b: a for a, b in _OPPOSITES}}
"""Relations that cannot both hold between the same ``src`` and ``dst``."""


@dataclass(frozen=True, slots=True)
class Embedded:
    """A candidate with its vector (packed float32) and where the vector came from."""

    candidate: Candidate
    vector: bytes
    model: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Reinforce:
    """The candidate is a belief already held: reinforce ``belief_id``."""

    embedded: Embedded
    belief_id: str
    similarity: float


@dataclass(frozen=True, slots=True)
class Survivor:
    """The candidate is new: it becomes ``belief_id``, after the contradiction check."""

    embedded: Embedded
    belief_id: str


Decision = Reinforce | Survivor


def belief_id(conversation: str, kind: str, statement: str) -> str:
    """A stable id from what the belief says: replay, recompute and other branches agree on it.

    The statement (not the seq it was written at) is hashed, so the same belief found by a
    recompute on another branch keeps its id and ``replay diff`` lines it up with its parent's.
    """
    digest = hashlib.blake2b(f"{conversation}\x00{kind}\x00{statement}".encode(), digest_size=8).hexdigest()
    return f"b-{digest}"


class _Index:
    """The beliefs a step compares against, as one float64 matrix: a candidate is one product
    against all of them, not a Python loop per belief (a conversation may hold thousands).

    Rows are unit vectors, sorted by belief id (ties resolve the same way on every replay);
    survivors of the step are appended as they are decided. A belief without a vector of the
    candidates' size (older logs, another embedding model) has no row and matches only by its
    exact statement.
    """

    def __init__(self, beliefs: Mapping[str, BeliefState], dimensions: int) -> None:
        ordered = sorted(beliefs.values(), key=lambda belief: belief.belief_id)
        size = dimensions * FLOAT32_LE.itemsize
        blank = bytes(size)
        self.dimensions = dimensions
        self.ids = [belief.belief_id for belief in ordered]
        self.statements = [belief.statement for belief in ordered]
        self.kinds = np.array([belief.kind for belief in ordered], dtype=object)
        packed = b"".join(b.embedding if len(b.embedding) == size else blank for b in ordered)
        matrix = np.frombuffer(packed, dtype=FLOAT32_LE).astype(np.float64).reshape(len(ordered), dimensions)
        norms = np.linalg.norm(matrix, axis=1)
        self.has_vector = norms > 0
        self.matrix = np.divide(matrix, norms[:, None], out=np.zeros_like(matrix), where=self.has_vector[:, None])

    def _row(self, vector: np.ndarray) -> np.ndarray | None:
        if vector.shape != (self.dimensions,):
            return None
        norm = float(np.linalg.norm(vector.astype(np.float64)))
        return vector.astype(np.float64) / norm if norm else None

    def add(self, belief: str, statement: str, kind: str, vector: np.ndarray) -> None:
        row = self._row(vector)
        self.ids.append(belief)
        self.statements.append(statement)
        self.kinds = np.append(self.kinds, np.array([kind], dtype=object))
        self.has_vector = np.append(self.has_vector, row is not None)
        self.matrix = np.vstack([self.matrix, np.zeros(self.dimensions) if row is None else row])

    def similarities(self, vector: np.ndarray, statement: str) -> np.ndarray:
        """Cosine to every indexed belief (1.0 / 0.0 by exact statement where there is no row)."""
        row = self._row(vector)
        scores = self.matrix @ row if row is not None else np.zeros(len(self.ids))
        by_text = np.flatnonzero(~self.has_vector) if row is not None else np.arange(len(self.ids))
        for i in by_text:  # usually none: beliefs from before vectors were stored
            scores[i] = 1.0 if self.statements[i] == statement else 0.0
        return scores


def _dimensions(embedded: Sequence[Embedded]) -> int:
    return len(unpack_vector(embedded[0].vector)) if embedded else 0


def gate(conversation: str, beliefs: Mapping[str, BeliefState], embedded: Sequence[Embedded]) -> list[Decision]:
    """One decision per candidate, in order (see the module docstring for the rules)."""
    index = _Index(beliefs, _dimensions(embedded))
    decisions: list[Decision] = []
    for item in embedded:
        candidate = item.candidate
        vector = unpack_vector(item.vector)
        similarities = index.similarities(vector, candidate.statement)
        eligible = np.where(index.kinds == candidate.kind, similarities, -np.inf)
        if eligible.size and eligible.max() >= DEDUP_COSINE[candidate.kind]:
            nearest = int(np.argmax(eligible))  # the first of equals: the smallest id, or the earliest survivor
            decisions.append(Reinforce(item, index.ids[nearest], float(eligible[nearest])))
            continue
        new_id = belief_id(conversation, candidate.kind, candidate.statement)
        decisions.append(Survivor(item, new_id))
        index.add(new_id, candidate.statement, candidate.kind, vector)
    return decisions


def contradiction_pairs(beliefs: Mapping[str, BeliefState], decisions: Sequence[Decision]) -> list[Pair]:
    """For each survivor, its nearest beliefs from before the step at or above the floor."""
    index = _Index(beliefs, _dimensions([decision.embedded for decision in decisions]))
    pairs: list[Pair] = []
    for position, decision in enumerate(decisions):
        if not isinstance(decision, Survivor):
            continue
        statement = decision.embedded.candidate.statement
        similarities = index.similarities(unpack_vector(decision.embedded.vector), statement)
        others = [i for i in np.argsort(-similarities, kind="stable") if index.ids[i] != decision.belief_id]
        for i in others[:CONTRADICTION_NEIGHBOURS]:
            if similarities[i] < CONTRADICTION_FLOOR:
                break
            pairs.append(Pair(len(pairs), position, statement, index.ids[i], index.statements[i]))
    return pairs


def belief_payloads(decisions: Sequence[Decision], pairs: Sequence[Pair], verdicts: Mapping[int, Verdict],
                    *, source_turn: int) -> list[tuple[int, Belief]]:
    """``(candidate position, payload)`` for every decision, in candidate order."""
    by_candidate: dict[int, list[Pair]] = {}
    for pair in pairs:
        by_candidate.setdefault(pair.candidate, []).append(pair)
    written: list[tuple[int, Belief]] = []
    for position, decision in enumerate(decisions):
        if isinstance(decision, Reinforce):
            written.append((position, _belief(decision, "reinforce", (), source_turn)))
            continue
        judged = by_candidate.get(position, [])
        opposed = tuple(p.existing_id for p in judged if verdicts[p.index] == "CONTRADICTS")
        agreed = tuple(p.existing_id for p in judged if verdicts[p.index] == "CONSISTENT")
        if opposed:
            written.append((position, _belief(decision, "contradict", opposed, source_turn)))
        elif agreed:
            written.append((position, _belief(decision, "consistent", agreed, source_turn)))
        else:
            written.append((position, _belief(decision, "assert", (), source_turn)))
    return written


def _belief(decision: Decision, operation: BeliefOperation, related: tuple[str, ...], source_turn: int) -> Belief:
    """The event for ``decision``: every one carries the candidate's vector and its fingerprint,
    a reinforce too, so replay re-decides with zero embedding calls."""
    item = decision.embedded
    candidate = item.candidate
    return Belief(
        decision.belief_id, operation, statement=candidate.statement, memory_type=candidate.memory_type,
        confidence=candidate.confidence, related=related, about=candidate.about, kind=candidate.kind,
        source_turn=source_turn, embedding=item.vector, embedding_model=item.model,
        embedding_fingerprint=item.fingerprint,
    )


def edge_payloads(edges: Mapping[EdgeKey, EdgeState], candidates: Sequence[EdgeCandidate]) -> list[Edge]:
    """One edge event per distinct candidate: reinforce, flag a contradiction, or assert."""
    known = set(edges)
    written: list[Edge] = []
    for candidate in candidates:
        key = (candidate.src, candidate.relation, candidate.dst)
        opposite = OPPOSITE_RELATIONS.get(candidate.relation)
        opposed_key = None if opposite is None else (candidate.src, opposite, candidate.dst)
        if key in known:
            written.append(Edge(*key, operation="reinforce", origin=candidate.origin))
        elif opposed_key is not None and opposed_key in known:
            written.append(Edge(*key, operation="contradict", origin=candidate.origin, contradicts=opposed_key))
        else:
            written.append(Edge(*key, operation="assert", origin=candidate.origin))
        known.add(key)
    return written


__all__ = [
    "CONTRADICTION_FLOOR",
    "CONTRADICTION_NEIGHBOURS",
    "Decision",
    "Embedded",
    "OPPOSITE_RELATIONS",
    "Reinforce",
    "Survivor",
    "belief_id",
    "belief_payloads",
    "contradiction_pairs",
    "edge_payloads",
    "gate",
]
