"""Reading reflections back from the log (``replay/reflections.py``): for each one, its triggers,
validation, the portrait's before, after and diff, the decay decisions with the overruled ones, the
beliefs decayed and forgotten with their statements from the state before, and its cost; and the
portrait at any seq equals the one time travel shows."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.log import Snapshot
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import Belief, Fork, Insight, Payload, Provenance, Reflection, ThinkerFailed, Turn
from mirror.projections.conversation import fold
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes
from mirror.replay import History, UnknownPosition, UnknownReflection
from mirror.replay.reflections import (
    portrait_diff,
    portrait_lines,
    read_reflection,
    read_reflections,
    reflection_history,
)
from tests.support.strategies import (
    BELIEF_POOL,
    belief_payloads,
    event_sequences,
    insight_payloads,
    recall_payloads,
    reflection_payloads,
    short_texts,
    thinker_failed_payloads,
    turn_payloads,
)

KEY = StreamKey("acme", "kitchen")
T0 = 1_763_000_000.0

FIRST = "I am talking with someone who cooks for friends. They are allergic to peanuts."
SECOND = ("I am talking with someone who cooks for friends. They are allergic to peanuts. "
          "They host dinners on Saturdays and care about their guests.")
SHORT = "Too short."


def consolidation(latency_ms: float = 850.0, prompt: int = 1200, completion: int = 180) -> Provenance:
    return Provenance(model="mirror-sim", prompt_set="v1", request_fingerprint="f00d", latency_ms=latency_ms,
                      prompt_tokens=prompt, completion_tokens=completion)


def payloads() -> list[tuple[int, Payload, Provenance | None]]:
    """(turn, payload, provenance): two reflections (the second with decisions, one overruled) and a
    rejected third, a failed attempt between them."""
    return [
        (0, Turn("I'm allergic to peanuts.", "Noted."), None),
        (0, Belief("b-allergy", "assert", "The user is allergic to peanuts", "standard", 0.9), None),
        (0, Belief("b-tea", "assert", "The user likes green tea", "standard", 0.5), None),
        (0, Belief("b-jazz", "assert", "The user listens to jazz", "emotional", 0.4), None),
        (0, Insight("They told me about an allergy first.", for_turn=0), None),
        (0, Reflection(FIRST, accepted=True, for_turn=0, triggers=("forced",), insights_used=1, episodes_used=1,
                       unique_ratio=0.9), consolidation()),  # seq 6: the first portrait, no decay call
        (1, Turn("Saturday dinner for six.", "Lovely."), None),
        (1, ThinkerFailed("reflection", "LLMTimeout", "no answer in 30 s", for_turn=1), None),  # seq 8
        (1, Reflection(SECOND, accepted=True, for_turn=1, triggers=("periodic", "belief_burst"), insights_used=0,
                       episodes_used=2, unique_ratio=0.55, warning="",
                       decisions=(("b-allergy", "forget", "retain", "protected"),
                                  ("b-tea", "decay", "decay", ""),
                                  ("b-jazz", "forget", "forget", ""),
                                  ("b-gone", "forget", "forget", "")),
                       decay_fingerprint="beef", decay_answer='{"b-tea": "decay"}', decay_tokens=300, decay_ms=120.5),
         consolidation(900.0, 1500, 220)),  # seq 9
        (2, Turn("Music?", "Jazz, maybe."), None),
        (2, Reflection(SHORT, accepted=False, reason="10 characters: fewer than 30", for_turn=2,
                       triggers=("review",), unique_ratio=0.3, warning="unique-word ratio 0.30 below 0.4"),
         None),  # seq 11: rejected, no provenance (a hand-made event)
    ]


def events(key: StreamKey = KEY) -> list[Event]:
    return [make_event(key, seq, payload, turn=turn, provenance=provenance, timestamp=T0 + seq)
            for seq, (turn, payload, provenance) in enumerate(payloads(), start=1)]


def test_each_reflection_says_what_it_changed_and_what_it_cost() -> None:
    found = reflection_history(events())
    assert [view.number for view in found.reflections] == [1, 2, 3]
    assert [view.seq for view in found.reflections] == [6, 9, 11]
    first, second, third = found.reflections

    assert (first.portrait_before, first.portrait_after, first.triggers) == (None, FIRST, ("forced",))
    assert first.diff[:2] == ("--- main@5", "+++ main@6") and "+They are allergic to peanuts." in first.diff
    assert first.decisions == () and first.cost.tokens == 1380 and first.cost.ms == 850.0

    assert (second.portrait_before, second.portrait_after, second.turn, second.for_turn) == (FIRST, SECOND, 1, 1)
    assert [line for line in second.diff if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        "+They host dinners on Saturdays and care about their guests."]  # one sentence added: one line
    decisions = {decision.belief_id: decision for decision in second.decisions}
    assert decisions["b-allergy"].overruled and decisions["b-allergy"].rule == "protected"
    assert decisions["b-allergy"].statement == "The user is allergic to peanuts"
    assert [decision.belief_id for decision in second.overruled] == ["b-allergy"]
    assert decisions["b-gone"].statement == "" and decisions["b-gone"].confidence is None  # never held
    (tea,) = second.decayed
    assert (tea.belief_id, tea.statement, tea.before) == ("b-tea", "The user likes green tea", 0.5)
    assert tea.after == pytest.approx(0.25)
    (jazz,) = second.forgotten  # from the state before: the state after no longer holds it
    assert (jazz.belief_id, jazz.statement, jazz.memory_type, jazz.after) == (
        "b-jazz", "The user listens to jazz", "emotional", None)
    assert "b-jazz" not in found.state.beliefs
    cost = second.cost
    assert (cost.model, cost.consolidation_prompt_tokens, cost.consolidation_completion_tokens) == ("mirror-sim", 1500, 220)
    assert (cost.decay_tokens, cost.tokens, cost.ms) == (300, 2020, 1020.5)

    assert not third.accepted and third.reason.startswith("10 characters")
    assert third.portrait_before == third.portrait_after == SECOND and third.proposed == SHORT
    assert third.diff == () and third.warning.startswith("unique-word ratio")
    assert (third.cost.model, third.cost.tokens, third.cost.ms) == ("", 0, 0.0)

    (failure,) = found.failures
    assert (failure.seq, failure.error_type, failure.for_turn) == (8, "LLMTimeout", 1)
    assert found.number(2) is second
    with pytest.raises(UnknownReflection, match="has no reflection 4: it has had 3"):
        found.number(4)
    with pytest.raises(UnknownReflection, match="not reflected yet"):
        reflection_history(events()[:5]).number(1)


def test_as_dict_is_json_ready_with_the_overruled_decisions_and_the_totals() -> None:
    second = reflection_history(events()).number(2)
    data = json.loads(json.dumps(second.as_dict()))
    assert data["number"] == 2 and data["triggers"] == ["periodic", "belief_burst"]
    assert data["overruled"] == 1
    assert [d["belief_id"] for d in data["decisions"] if d["overruled"]] == ["b-allergy"]
    assert data["cost"]["tokens"] == 2020 and data["cost"]["ms"] == 1020.5
    assert [f["belief_id"] for f in data["forgotten"]] == ["b-jazz"]
    assert data["portrait_before"] == FIRST and data["portrait_after"] == SECOND


def test_portrait_lines_cut_sentences_and_the_diff_is_empty_when_nothing_changed() -> None:
    assert portrait_lines("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert portrait_lines(None) == [] and portrait_diff("same.", "same.") == ()
    assert portrait_diff(None, "New.")[-1] == "+New."
    assert portrait_diff("Same.", "Same. ")[-2:] == ("-'Same.'", "+'Same. '")  # spacing alone is a change too


async def test_read_reflections_reads_a_branch_with_what_it_inherited() -> None:
    main = events()
    branch_key = replace(KEY, branch="rc-1")
    own = [make_event(branch_key, 10, Fork("main", 9), turn=1, timestamp=T0 + 100),
           make_event(branch_key, 11, Reflection(SECOND + " Also jazz.", accepted=True, triggers=("periodic",)),
                      turn=1, timestamp=T0 + 101)]
    log = InMemoryEventLog()
    log.add([*main, *own])
    history = History(log)

    on_main = await read_reflections(history, KEY)
    assert [view.seq for view in on_main.reflections] == [6, 9, 11] and on_main.state == fold(main)
    assert [view.seq for view in (await read_reflections(history, KEY, 8)).reflections] == [6]

    on_branch = await read_reflections(history, branch_key)
    assert [(view.number, view.seq) for view in on_branch.reflections] == [(1, 6), (2, 9), (3, 11)]
    assert on_branch.number(3).portrait_before == SECOND and on_branch.number(3).diff[-1] == "+Also jazz."
    assert on_branch.state == await history.state_at(branch_key)
    inherited_only = await read_reflections(history, branch_key, 7)
    assert inherited_only.state.key == branch_key and len(inherited_only.reflections) == 1

    assert (await read_reflections(history, KEY, 0)).reflections == ()
    with pytest.raises(UnknownPosition):
        await read_reflections(history, KEY, 12)


portraits = st.sampled_from([FIRST, SECOND, SHORT, "One. Two.", "One.  Two.", ""]) | short_texts
reflecting_sequences = event_sequences(KEY, min_size=1, max_size=25, payload=st.one_of(
    turn_payloads(short_texts),
    belief_payloads(ids=st.sampled_from(BELIEF_POOL), confidence=st.floats(0.0, 1.0), text=short_texts),
    insight_payloads(short_texts),
    reflection_payloads(portraits, ids=st.sampled_from(BELIEF_POOL)),
    reflection_payloads(portraits, ids=st.sampled_from(BELIEF_POOL)),
    thinker_failed_payloads(short_texts),
    recall_payloads(ids=st.sampled_from(BELIEF_POOL), text=short_texts),
))
"""Logs the codec stores (finite confidences) in which reflections are common."""


@settings(max_examples=80, deadline=None)
@given(log=reflecting_sequences, snapshot_seqs=st.sets(st.integers(1, 25), max_size=3))
async def test_the_portrait_at_any_seq_equals_the_one_time_travel_shows(log: list[Event], snapshot_seqs: set[int]) -> None:
    stored = InMemoryEventLog()
    stored.add(log)
    for seq in snapshot_seqs & set(range(1, len(log) + 1)):  # time travel from snapshots, too
        stored.put_snapshot(Snapshot(KEY, seq, PROJECTION_VERSION, snapshot_bytes(fold(log[:seq]))))
    history = History(stored, snapshots=stored, materialize=False)
    found = reflection_history(log)
    for seq in range(0, len(log) + 1):
        state = await history.state_at(KEY, seq)
        assert found.portrait_at(seq) == state.portrait, seq
    for view in found.reflections:
        before, after = fold(log[: view.seq - 1]) if view.seq > 1 else None, fold(log[: view.seq])
        assert view.portrait_before == (None if before is None else before.portrait)
        assert view.portrait_after == after.portrait and view.number == after.counters.reflections
        assert all(change.belief_id not in after.beliefs for change in view.forgotten)
        assert all(before is not None and change.belief_id in before.beliefs for change in (*view.forgotten, *view.decayed))
        assert (view.diff == ()) == ((view.portrait_before or "") == (view.portrait_after or ""))


def test_a_diff_across_a_reflection_shows_the_portrait_and_the_beliefs_decayed_and_forgotten() -> None:
    from mirror.replay import diff
    from mirror.replay.diff import diff_lines, state_view

    log = events()
    change = diff(fold(log[:7]), fold(log[:9]))  # across reflection 2 (and the failure before it)
    data = json.loads(json.dumps(change.as_dict()))
    assert data["portrait_changed"] and data["reflections"] == 1
    assert (data["beliefs_decayed"], data["beliefs_forgotten"]) == (1, 1)
    assert data["portrait_before"] == FIRST and data["portrait_after"] == SECOND
    assert [belief["belief_id"] for belief in data["beliefs_removed"]] == ["b-jazz"]
    assert [(c["key"], c["before"], c["after"]) for c in data["beliefs_changed"]] == [("b-tea", 0.5, pytest.approx(0.25))]
    text = "\n".join(diff_lines(data))
    assert "  reflections: +1 (+1 belief(s) decayed, +1 forgotten)" in text
    assert "  portrait:\n    --- main@7\n    +++ main@9" in text
    assert "    +They host dinners on Saturdays and care about their guests." in text
    assert "- b-jazz  The user listens to jazz" in text and "~ b-tea  The user likes green tea" in text
    rejected = diff(fold(log[:10]), fold(log[:11])).as_dict()  # the rejected third: it ran, changed nothing else
    assert rejected["reflections"] == 1 and not rejected["portrait_changed"] and rejected["changed"]
    view = state_view(fold(log))
    assert view["portrait"] == SECOND and view["portrait_seq"] == 9 and view["reflections"] == 3
    assert view["last_reflection"]["seq"] == 11 and view["pending_insights"] == []


async def test_one_reflection_read_from_the_snapshot_before_it_is_the_one_the_whole_fold_reads() -> None:
    main = events()
    branch_key = replace(KEY, branch="rc-1")
    own = [make_event(branch_key, 10, Fork("main", 9), turn=1, timestamp=T0 + 100),
           make_event(branch_key, 11, Reflection(SECOND + " Also jazz.", accepted=True), turn=1, timestamp=T0 + 101)]
    log = InMemoryEventLog()
    log.add([*main, *own])
    log.put_snapshot(Snapshot(KEY, 7, PROJECTION_VERSION, snapshot_bytes(fold(main[:7]))))
    history = History(log, snapshots=log, materialize=False)
    for key, count in ((KEY, 3), (branch_key, 3)):
        whole = await read_reflections(history, key)
        for number in range(1, count + 1):
            view, last = await read_reflection(history, key, number)
            assert view == whole.number(number), (key, number)
            assert last.seq == whole.state.last_seq
        with pytest.raises(UnknownReflection):
            await read_reflection(history, key, count + 1)
