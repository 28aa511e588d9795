"""``replay.why`` on real event sequences: the golden logs (tests/golden/), which the real
pipeline wrote against the simulator. No golden log holds a ``recall`` (they predate it or keep
memory off), so the recall cases append one to the memory log exactly as the writer appends a
turn with memory (:meth:`~mirror.cognition.writer.ConversationWriter.append_turn`: the recall,
then the turn, same turn number, the recall's causation the state's last event)."""

from __future__ import annotations

import dataclasses

import pytest

from mirror.events.codec import decode
from mirror.events.envelope import Event, make_event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import Belief, Edge, Fork, Insight, Recall, Reflection, Turn
from mirror.events.vectors import vector_to_bytes
from mirror.replay import History
from mirror.replay.errors import UnknownPosition, UnknownSubject
from mirror.replay.why import RecallPage, event_json, why_belief, why_edge, why_event
from mirror.replay.why_reads import read_why_belief
from tests.support.golden import read_log

PROVENANCE_KEYS = {"model", "prompt_set", "latency_ms", "prompt_tokens", "completion_tokens", "request_fingerprint",
                   "parameters"}


def branch(name: str, branch_name: str = MAIN_BRANCH) -> tuple[StreamKey, list[Event]]:
    """A golden log's branch as :meth:`History.events` reads it: a fork's inherited prefix first."""
    events = [decode(record) for record in read_log(name)]
    own = [event for event in events if event.branch == branch_name]
    if branch_name != MAIN_BRANCH:
        fork = own[0].payload
        assert isinstance(fork, Fork)
        own = [event for event in events if event.branch == fork.parent_branch and event.seq <= fork.fork_seq] + own
    return StreamKey(own[0].tenant, own[0].conversation, branch_name), own


def roles(answer: object) -> list[tuple[str, int]]:
    return [(cause.role, cause.event.seq) for cause in answer.causes]  # type: ignore[attr-defined]


def with_recall(events: list[Event], belief_ids: tuple[str, ...]) -> list[Event]:
    """``events`` and a turn with memory after them: its ``recall``, then the ``turn``."""
    last, key = events[-1], events[-1].key
    number = max(event.turn for event in events if isinstance(event.payload, Turn)) + 1
    narrative = max(event.seq for event in events if event.type == "narrative")
    recall = make_event(key, last.seq + 1, Recall("what about peanuts?", belief_ids=belief_ids), turn=number,
                        causation=last.id, timestamp=last.timestamp + 1)
    turn = make_event(key, last.seq + 2, Turn("what about peanuts?", "You told me.", narrative_seq=narrative),
                      turn=number, timestamp=last.timestamp + 1)
    return [*events, recall, turn]


# ------------------------------------------------------------------------------------------ turns


def test_a_turn_with_memory_answered_from_the_recall_just_before_it() -> None:
    key, events = branch("memory")
    events = with_recall(events, ("b-544d4a47be47e221", "b-9b30c4eb58d421b4"))
    turn = events[-1]
    answer = why_event(key, events, turn.seq)
    assert roles(answer)[:2] == [("recall", turn.seq - 1), ("narrative", 16)]
    assert answer.event == turn and answer.subject.text == "You told me."
    # The recall names what it gave the Talker: each belief as its latest asserting event before it.
    recall = why_event(key, events, turn.seq - 1)
    assert roles(recall) == [("belief", 17), ("belief", 12), ("causation", 18)]


def test_a_turn_without_a_recall_before_it_has_none() -> None:
    key, events = branch("memory")
    answer = why_event(key, events, 9)
    assert roles(answer) == [("narrative", 3)]  # a turn's Talker saw the narrative it names
    assert answer.as_dict()["provenance"]["model"] == events[8].provenance.model  # type: ignore[union-attr]


def test_a_persona_turn_lists_its_four_steps_nearest_first() -> None:
    key, events = branch("persona")
    turns = [event for event in events if isinstance(event.payload, Turn)]
    assert len(turns) == 3
    for turn in turns:
        answer = why_event(key, events, turn.seq)
        steps = [cause for cause in answer.causes if cause.role != "causation"]
        assert [cause.role for cause in steps] == ["plan", "appraisal", "retrieval", "interpretation"]
        assert [cause.event.seq for cause in steps] == [turn.seq - 1, turn.seq - 2, turn.seq - 3, turn.seq - 4]
        assert all(cause.event.payload.for_turn == turn.turn for cause in steps)  # type: ignore[attr-defined]
        assert [cause.event.type for cause in steps] == [cause.role for cause in steps]
    # A background step answers the turn it followed.
    emotion = next(event for event in events if event.type == "emotion" and event.turn == 1)
    assert roles(why_event(key, events, emotion.seq))[0] == ("turn", turns[1].seq)


def test_a_turn_after_an_accepted_reflection_read_its_portrait() -> None:
    key, events = branch("reflection")
    reflection = next(event for event in events if isinstance(event.payload, Reflection))
    after = next(event for event in events if isinstance(event.payload, Turn) and event.seq > reflection.seq)
    before = [event for event in events if isinstance(event.payload, Turn) and event.seq < reflection.seq]
    assert ("portrait", reflection.seq) in roles(why_event(key, events, after.seq))
    assert all(not any(role == "portrait" for role, _ in roles(why_event(key, events, turn.seq))) for turn in before)


# ------------------------------------------------------------------------------- thinking, reflection


def test_a_narrative_names_its_monologue_and_its_turn() -> None:
    key, events = branch("memory")
    assert roles(why_event(key, events, 11)) == [("monologue", 10), ("turn", 9)]
    assert roles(why_event(key, events, 10)) == [("turn", 9)]


def test_a_reflection_lists_the_insights_it_consolidated() -> None:
    key, events = branch("reflection")
    reflection = next(event for event in events if isinstance(event.payload, Reflection))
    insights = [event.seq for event in events if isinstance(event.payload, Insight) and event.seq < reflection.seq]
    assert isinstance(reflection.payload, Reflection) and reflection.payload.insights_used == len(insights) == 22
    answer = why_event(key, events, reflection.seq)
    assert [seq for role, seq in roles(answer) if role == "insight"] == insights
    assert answer.as_dict()["provenance"]["prompt_tokens"] == reflection.provenance.prompt_tokens  # type: ignore[union-attr]


def test_a_failed_step_is_thought_from_the_event_its_causation_names() -> None:
    key, events = branch("persona")
    emotion = next(event for event in events if event.type == "emotion" and event.turn == 1)
    answer = why_event(key, events, emotion.seq)
    failed = next(event for event in events if event.type == "thinker_failed")
    assert ("causation", failed.seq) in roles(answer) and emotion.causation == failed.id


# ------------------------------------------------------------------------------------------ beliefs


def test_every_belief_event_rests_on_its_source_turn_and_memory_step() -> None:
    key, events = branch("memory")
    beliefs = [event for event in events if isinstance(event.payload, Belief)]
    assert len(beliefs) == 4
    for belief in beliefs:
        assert isinstance(belief.payload, Belief)
        causes = {cause.role: cause.event for cause in why_event(key, events, belief.seq).causes}
        assert causes["source_turn"].type == "turn" and causes["source_turn"].turn == belief.payload.source_turn
        step = causes["memory_step"]
        assert step.type == "memory_step" and step.seq > belief.seq and step.payload.for_turn == belief.payload.source_turn  # type: ignore[attr-defined]
    contradiction = why_event(key, events, 17)
    assert roles(contradiction) == [("source_turn", 14), ("memory_step", 18), ("related", 12), ("causation", 16)]


def test_a_belief_a_reflection_forgot_has_it_in_its_history_and_causes() -> None:
    key, events = branch("reflection")
    forgotten = why_belief(key, events, "b-336554f975d3435f")
    assert [(touch.event.seq, touch.summary) for touch in forgotten.history] == [
        (3, "assert: Can you suggest a snack?"), (52, "reflection: forget")]
    assert roles(forgotten) == [("source_turn", 1), ("memory_step", 4), ("reflection", 52)]
    assert forgotten.event is not None and forgotten.event.seq == 52 and forgotten.subject.text == "Can you suggest a snack?"
    kept = why_belief(key, events, "b-fe8006511639fbc7")  # the model proposed forget; a rule kept it
    assert kept.history[-1].summary == "reflection: retain (the model proposed forget; rule protected)"


def test_a_belief_asserted_again_after_it_was_forgotten_comes_from_the_new_assertion() -> None:
    key, events = branch("reflection")
    last = events[-1]  # turn 22, after the reflection that forgot the open loop
    again = make_event(key, last.seq + 1, Belief("b-336554f975d3435f", "assert", "Can you suggest a snack?",
                                                 source_turn=last.turn), turn=last.turn, timestamp=last.timestamp + 1)
    answer = why_belief(key, [*events, again], "b-336554f975d3435f")
    assert roles(answer) == [("source_turn", last.seq), ("reflection", 52)]
    assert [touch.event.seq for touch in answer.history] == [3, 52, again.seq]


def test_a_belief_contradicted_later_shows_the_contradiction_in_its_history() -> None:
    key, events = branch("memory")
    answer = why_belief(key, events, "b-9b30c4eb58d421b4")
    assert [(touch.event.seq, touch.event.type) for touch in answer.history] == [(5, "belief"), (12, "belief"), (17, "belief")]
    assert answer.history[2].summary.startswith("opposed by b-544d4a47be47e221")
    assert roles(answer) == [("source_turn", 1), ("memory_step", 8)]  # where it came from: its first assertion
    recalled = why_belief(key, with_recall(events, ("b-9b30c4eb58d421b4",)), "b-9b30c4eb58d421b4")
    assert [touch.event.type for touch in recalled.history][-1] == "recall"


# -------------------------------------------------------------------------------------------- edges


def test_an_edge_comes_from_its_turn_and_memory_step() -> None:
    key, events = branch("memory")
    answer = why_edge(key, events, ("stress", "causes", "insomnia"))
    assert roles(answer) == [("source_turn", 1), ("memory_step", 8)]
    assert [touch.event.seq for touch in answer.history] == [7]
    assert answer.as_dict()["subject"] == {"kind": "edge", "seq": None, "belief_id": None,
                                           "edge": ["stress", "causes", "insomnia"], "text": "stress causes insomnia"}


def test_an_edge_contradicting_another_names_it() -> None:
    key, events = branch("memory")
    last = events[-1]
    opposing = make_event(key, last.seq + 1, Edge("stress", "prevents", "insomnia", operation="contradict",
                                                contradicts=("stress", "causes", "insomnia")),
                          turn=last.turn, timestamp=last.timestamp + 1)
    events = [*events, opposing]
    assert ("contradiction", 7) in roles(why_event(key, events, opposing.seq))
    assert [touch.event.seq for touch in why_edge(key, events, ("stress", "causes", "insomnia")).history] == [7, opposing.seq]


# -------------------------------------------------------------------------------- branches, errors


def test_a_fork_answers_from_its_own_and_its_inherited_events() -> None:
    key, events = branch("conversation", "alt")
    turn = next(event for event in events if event.branch == "alt" and isinstance(event.payload, Turn))
    answer = why_event(key, events, turn.seq)
    assert roles(answer) == [("narrative", 12)] and answer.causes[0].event.branch == "alt"
    assert answer.as_dict()["branch"] == "alt"
    narrative = why_event(key, events, 9)  # inherited from main
    assert roles(narrative) == [("monologue", 8), ("turn", 6), ("causation", 7)]
    assert narrative.causes[1].event.branch == MAIN_BRANCH


def test_unknown_subjects_are_typed_errors() -> None:
    key, events = branch("memory")
    with pytest.raises(UnknownPosition, match="ends at seq 18"):
        why_event(key, events, 19)
    with pytest.raises(UnknownSubject, match="belief 'b-nope'"):
        why_belief(key, events, "b-nope")
    with pytest.raises(UnknownSubject, match="edge stress causes joy"):
        why_edge(key, events, ("stress", "causes", "joy"))


def test_the_answer_is_json_with_events_as_the_events_route_shows_them() -> None:
    key, events = branch("persona")
    answer = why_event(key, events, 6).as_dict()
    assert set(answer) == {"conversation", "branch", "subject", "event", "provenance", "causes", "history"}
    assert answer["event"] == event_json(events[5]) and answer["history"] == []
    assert set(answer["provenance"]) == PROVENANCE_KEYS
    retrieval = next(cause for cause in answer["causes"] if cause["role"] == "retrieval")
    assert retrieval["provenance"] is None  # no model produced it
    assert isinstance(retrieval["event"]["payload"]["query_embedding"], str)  # a vector, as base64
    persona = why_event(key, events, 6).causes[-1].event
    assert persona.type == "persona"
    assert all(isinstance(text, str) and not text.startswith("b'")
               for text in event_json(persona)["payload"]["biography_embeddings"])


# ------------------------------------------------------------------- reading only what a belief needs


@pytest.mark.parametrize("name", ["memory", "reflection"])
async def test_a_belief_read_from_the_events_that_name_it_is_answered_as_from_the_whole_branch(name: str) -> None:
    key, events = branch(name)
    beliefs = sorted({event.payload.belief_id for event in events if isinstance(event.payload, Belief)})
    if name == "memory":  # the reflection log has no narrative for a turn to name
        events = with_recall(events, tuple(beliefs[:2]))
    log = InMemoryEventLog()
    log.add(events)
    history = History(log)
    for belief_id in beliefs:
        whole = why_belief(key, events, belief_id)
        read = await read_why_belief(history, key, belief_id, events[-1].seq)
        assert read.as_dict() == whole.as_dict(), belief_id
    assert beliefs and any(cause.role == "memory_step" for cause in why_belief(key, events, beliefs[0]).causes)


def test_recalls_are_listed_apart_a_page_at_a_time_and_vectors_only_when_asked() -> None:
    key, events = branch("memory")
    belief_id = "b-9b30c4eb58d421b4"
    for _ in range(3):
        events = with_recall(events, (belief_id,))
    answer = why_belief(key, events, belief_id)
    recall_seqs = [touch.event.seq for touch in answer.history if touch.event.type == "recall"]
    whole = answer.as_dict()
    assert [entry["seq"] for entry in whole["history"]] == [5, 12, 17]  # the recalls are not in it
    assert whole["recalls"]["total"] == 3 and [item["seq"] for item in whole["recalls"]["items"]] == recall_seqs
    first = answer.as_dict(recalls=RecallPage(0, 2))["recalls"]
    assert [item["seq"] for item in first["items"]] == recall_seqs[:2] and first["next_after"] == recall_seqs[1]
    rest = answer.as_dict(recalls=RecallPage(first["next_after"], 2))["recalls"]
    assert [item["seq"] for item in rest["items"]] == recall_seqs[2:] and rest["next_after"] is None
    payload = events[-2].payload
    assert isinstance(payload, Recall)
    recall = dataclasses.replace(events[-2], payload=dataclasses.replace(payload, query_embedding=vector_to_bytes([0.5, 0.25])))
    assert event_json(recall)["payload"]["query_embedding"] == "AAAAPwAAgD4="  # base64 of two float32s
    plain = event_json(recall, vectors=False)
    assert plain["payload"]["query_embedding"] is None and plain["payload"]["query"] == "what about peanuts?"
    assert {**event_json(recall)["payload"], "query_embedding": None} == plain["payload"]
    assert "recalls" not in why_event(key, events, recall.seq).as_dict()
