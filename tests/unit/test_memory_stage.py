"""The memory stage in process: the dedup gate and verdict rules (properties), and what a memory
step marks. Whole steps against the simulator over loopback HTTP are in
``tests/system/test_memory_stage.py``."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.embeddings import pack_vector
from mirror.cognition.memory.extract import Candidate, EdgeCandidate
from mirror.cognition.memory.gate import (
    Embedded,
    Reinforce,
    Survivor,
    belief_payloads,
    contradiction_pairs,
    edge_payloads,
    gate,
)
from mirror.cognition.memory.stage import memory_behind, memory_inputs, same_memory_inputs
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Edge, MemoryStep, Monologue, Narrative, ThinkerFailed, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state
from mirror.sim.content import embedding

KEY = StreamKey("acme", "memory")
DIMENSIONS = 64
EMBED_MODEL = "sim-embed"


# ------------------------------------------------------------------------ the gate, pure

WORDS = ("tea", "coffee", "peanuts", "cats", "rain", "paris", "running", "chess")
VERBS = ("likes", "hates", "needs", "avoids")
statements = st.builds(lambda who, verb, what: f"{who} {verb} {what}", st.sampled_from(("The user", "Ada", "Her sister")),
                       st.sampled_from(VERBS), st.sampled_from(WORDS))


candidates = st.builds(Candidate, statement=statements, memory_type=st.sampled_from(("standard", "operational")),
                       about=st.just("user"), kind=st.sampled_from(("belief", "open_loop")),
                       confidence=st.floats(0.1, 0.9))


def embedded(candidate: Candidate) -> Embedded:
    return Embedded(candidate, pack_vector(embedding(candidate.statement, DIMENSIONS)), EMBED_MODEL, "fp")


def written(state: ConversationState, payloads: list[Belief] | list[Edge]) -> ConversationState:
    events = [make_event(KEY, state.last_seq + 1 + i, payload, turn=0, timestamp=1_700_000_000.0 + i)
              for i, payload in enumerate(payloads)]
    return fold(events, state) if events else state


def gated(state: ConversationState, batch: list[Candidate], verdict: str = "UNRELATED") -> tuple[ConversationState, list]:
    decisions = gate(KEY.conversation, state.beliefs, [embedded(c) for c in batch])
    pairs = contradiction_pairs(state.beliefs, decisions)
    verdicts = {pair.index: verdict for pair in pairs}
    payloads = [payload for _, payload in belief_payloads(decisions, pairs, verdicts, source_turn=0)]  # type: ignore[arg-type]
    return written(state, payloads), decisions


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(candidates, min_size=1, max_size=6))
def test_the_dedup_gate_is_idempotent(batch: list[Candidate]) -> None:
    once, _ = gated(initial_state(KEY), batch)
    twice, decisions = gated(once, batch)
    assert all(isinstance(decision, Reinforce) for decision in decisions)
    assert set(twice.beliefs) == set(once.beliefs)
    # the same candidate twice in one step makes one belief
    doubled, _ = gated(initial_state(KEY), [*batch, *batch])
    assert set(doubled.beliefs) == set(once.beliefs)
    assert len(once.beliefs) <= len({(c.kind, c.statement) for c in batch})


@settings(max_examples=60, deadline=None)
@given(first=st.lists(candidates, min_size=1, max_size=6), second=st.lists(candidates, min_size=1, max_size=6),
       verdicts=st.lists(st.sampled_from(("CONSISTENT", "CONTRADICTS", "UNRELATED")), min_size=30, max_size=30))
def test_a_contradiction_never_deletes_a_belief_and_each_one_opens_one_review(first, second, verdicts) -> None:
    before, _ = gated(initial_state(KEY), first)
    negated = [replace(c, statement=c.statement.replace(" ", " does not ", 1)) for c in second]
    decisions = gate(KEY.conversation, before.beliefs, [embedded(c) for c in negated])
    pairs = contradiction_pairs(before.beliefs, decisions)
    judged = {pair.index: verdicts[pair.index % len(verdicts)] for pair in pairs}
    payloads = [p for _, p in belief_payloads(decisions, pairs, judged, source_turn=1)]
    after = written(before, payloads)
    assert set(before.beliefs) <= set(after.beliefs)
    for belief_id, belief in before.beliefs.items():  # nor weakens one: never last-write-wins
        assert after.beliefs[belief_id].confidence >= belief.confidence
        assert after.beliefs[belief_id].statement == belief.statement
    contradicting = {(decision.belief_id, pair.existing_id) for pair in pairs if judged[pair.index] == "CONTRADICTS"
                     for decision in [decisions[pair.candidate]] if isinstance(decision, Survivor)}
    assert set(after.review_items) - set(before.review_items) == contradicting
    assert len(after.review_items) - len(before.review_items) == len(contradicting)


def test_a_restatement_reinforces_and_a_negation_is_checked_not_merged() -> None:
    fact = Candidate("I am allergic to peanuts.", "operational", "user", "belief", 0.8)
    state, _ = gated(initial_state(KEY), [fact])
    (belief,) = state.beliefs.values()
    state, decisions = gated(state, [fact])
    assert isinstance(decisions[0], Reinforce) and decisions[0].belief_id == belief.belief_id
    assert state.beliefs[belief.belief_id].confidence == pytest.approx(0.85)
    negation = replace(fact, statement="I am not allergic to peanuts.")
    decisions = gate(KEY.conversation, state.beliefs, [embedded(negation)])
    pairs = contradiction_pairs(state.beliefs, decisions)
    assert isinstance(decisions[0], Survivor) and [p.existing_id for p in pairs] == [belief.belief_id]


def test_edges_reinforce_and_opposite_relations_are_flagged_not_merged() -> None:
    state = written(initial_state(KEY), edge_payloads({}, [EdgeCandidate("stress", "causes", "insomnia", "conversation")]))
    again = edge_payloads(state.edges, [EdgeCandidate("stress", "causes", "insomnia", "conversation"),
                                        EdgeCandidate("stress", "prevents", "insomnia", "conversation"),
                                        EdgeCandidate("tea", "causes", "calm", "world")])
    assert [e.operation for e in again] == ["reinforce", "contradict", "assert"]
    assert again[1].contradicts == ("stress", "causes", "insomnia")
    state = written(state, again)
    assert state.edges[("stress", "causes", "insomnia")].flagged and len(state.edges) == 3


def test_memory_step_marks_the_turn_done() -> None:
    turn = make_event(KEY, 1, Turn("hi there you", "hello"), turn=0)
    state = fold([turn])
    assert memory_behind(state)
    done = fold([make_event(KEY, 2, MemoryStep(0), turn=0)], state)
    assert done.memory_turn == 0 and not memory_behind(done)
    assert memory_behind(fold([make_event(KEY, 3, Turn("again", "yes"), turn=1)], done))


def test_gate_runs_without_an_event_loop() -> None:
    # the gate is pure: no loop, no I/O (replay decides with it inside any caller)
    assert asyncio.iscoroutinefunction(gate) is False


def test_a_thinking_step_leaves_what_the_memory_step_reads_as_it_was() -> None:
    """Why the overlap is sound: monologue, narrative and thinking failure events keep every input
    of ``remember`` the same object; a turn, a belief or an edge does not."""
    state = fold([make_event(KEY, 1, Turn("I like tea.", "Noted."), turn=0)])
    thought = fold([make_event(KEY, 2, Monologue("r", "m", "g"), turn=0),
                    make_event(KEY, 3, ThinkerFailed("controller", "Refused", "no", 1, 0), turn=0),
                    make_event(KEY, 4, Narrative("I note that they like tea."), turn=0)], state)
    assert same_memory_inputs(state, thought)
    assert all(a is b for a, b in zip(memory_inputs(state), memory_inputs(thought), strict=True))
    remembered = written(thought, edge_payloads({}, [EdgeCandidate("tea", "causes", "calm", "conversation")]))
    assert not same_memory_inputs(thought, remembered)
    assert not same_memory_inputs(thought, fold([make_event(KEY, 5, Turn("And coffee.", "Noted."), turn=1)], thought))
