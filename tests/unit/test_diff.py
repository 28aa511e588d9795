"""What changed between two states (``replay diff``, the recompute report): every belief, edge and
review item added, removed or changed is listed by id with the fields that changed, in the JSON
and in the readable form; timestamps alone are no change (a branch re-derives its beliefs later)."""

from __future__ import annotations

import dataclasses
import json

from mirror.events.codec import decode
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Edge, EmotionUpdate, Payload, PersonaChosen, Recall, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import diff, state_view
from mirror.replay.diff import diff_lines
from tests.support.golden import read_log

MAIN = StreamKey("acme", "kitchen")
BRANCH = StreamKey("acme", "kitchen", "rc-0123456789ab")


def folded(key: StreamKey, payloads: list[Payload], start: float) -> ConversationState:
    events = [make_event(key, seq, payload, timestamp=start + seq) for seq, payload in enumerate(payloads, start=1)]
    return fold(events, initial_state(key))


def test_a_diff_across_branches_lists_each_item_with_the_fields_that_changed() -> None:
    shared: list[Payload] = [
        Turn("I live in Lisbon and I'm allergic to peanuts.", "Noted."),
        Belief("b-lisbon", "assert", "The user lives in Lisbon", "location", 0.7),
        Belief("b-allergy", "assert", "The user is allergic to peanuts", "standard", 0.8),
        Edge("peanuts", "cause", "allergic reaction"),
    ]
    main = folded(MAIN, [*shared, Belief("b-old", "assert", "The user cooks on Sundays", "standard", 0.6),
                         Edge("tea", "eases", "stress")], start=1000.0)
    # The branch, re-thought a day later: the same beliefs (other timestamps), plus and minus some.
    branch = folded(BRANCH, [*shared, Belief("b-lisbon", "reinforce"), Recall("Lisbon?", belief_ids=("b-lisbon",)),
                             Edge("peanuts", "cause", "allergic reaction", operation="reinforce"),
                             Belief("b-eats", "contradict", "The user eats peanut butter daily", related=("b-allergy",))],
                    start=87_400.0)
    change = diff(main, branch)
    data = json.loads(json.dumps(change.as_dict()))  # JSON-ready, as the API answers it
    assert (data["source"], data["target"]) == ("main@6", "rc-0123456789ab@8")
    assert [b["belief_id"] for b in data["beliefs_added"]] == ["b-eats"]
    assert [b["belief_id"] for b in data["beliefs_removed"]] == ["b-old"]
    (lisbon,) = data["beliefs_changed"]  # b-allergy is the same belief on both sides, made a day apart
    assert lisbon["key"] == "b-lisbon" and lisbon["text"] == "The user lives in Lisbon"
    assert set(lisbon["fields"]) == {"confidence", "recall_count"}
    assert lisbon["fields"]["recall_count"] == {"before": 0, "after": 1}
    assert [e["src"] for e in data["edges_removed"]] == ["tea"] and data["edges_added"] == []
    (edge,) = data["edges_changed"]
    assert edge["key"] == "peanuts/cause/allergic reaction" and set(edge["fields"]) == {"confidence"}
    (review,) = data["reviews_added"]
    assert (review["belief_id"], review["opposed_id"]) == ("b-eats", "b-allergy")
    assert review["statement"] == "The user eats peanut butter daily"
    assert review["opposed_statement"] == "The user is allergic to peanuts"

    lines = diff_lines(data)
    assert lines[0] == "main@6 → rc-0123456789ab@8"
    text = "\n".join(lines)
    assert "  beliefs added (1):\n    + b-eats  The user eats peanut butter daily  (belief, standard, confidence 0.600)" in text
    assert "  beliefs removed (1):\n    - b-old  The user cooks on Sundays" in text
    assert ("  beliefs changed (1):\n    ~ b-lisbon  The user lives in Lisbon  (confidence 0.700 → 0.750, "
            "recall_count 0 → 1)") in text
    assert "    - tea -eases-> stress  (conversation, confidence 0.600)" in text
    assert "    ~ peanuts/cause/allergic reaction  peanuts -cause-> allergic reaction  (confidence 0.600 → 0.650)" in text
    assert (f"  reviews added (1):\n    + {review['review_id']}  b-eats 'The user eats peanut butter daily' "
            "contradicts b-allergy 'The user is allergic to peanuts'") in text
    assert change.summary() == text


def test_the_same_state_made_at_another_time_is_no_change() -> None:
    payloads: list[Payload] = [Turn("Hi.", "Hello."), Belief("b-tea", "assert", "The user likes tea")]
    change = diff(folded(MAIN, payloads, start=1000.0), folded(BRANCH, payloads, start=9000.0))
    assert not change.changed
    assert diff_lines(change.as_dict()) == ["main@2 → rc-0123456789ab@2: no change"]


def test_a_long_narrative_diff_is_cut_where_asked_and_says_so() -> None:
    data = {"source": "main@3", "target": "rc-x@3", "changed": True, "narrative_changed": True,
            "narrative_diff": [f"+line {n}" for n in range(10)]}
    lines = diff_lines(data, narrative_lines=4)
    assert lines[2:6] == [f"    +line {n}" for n in range(4)]
    assert lines[-1] == "    … 6 more line(s) (`mirror replay diff` shows them all)"


def test_a_persona_conversation_shows_its_character_in_the_state_and_the_diff() -> None:
    events = [decode(record) for record in read_log("persona")]
    chosen = next(index for index, event in enumerate(events) if isinstance(event.payload, PersonaChosen))
    first_emotion = next(index for index, event in enumerate(events) if isinstance(event.payload, EmotionUpdate))
    start = fold(events[: chosen + 1], initial_state(events[0].key))
    then = fold(events[: first_emotion + 1], initial_state(events[0].key))
    end = fold(events, initial_state(events[0].key))
    view = json.loads(json.dumps(state_view(then)))
    assert view["persona"]["emotions"] == events[first_emotion].payload.intensities  # type: ignore[attr-defined]  # an EmotionUpdate
    assert view["persona"]["active_hard_goal"] == start.persona.hard_goals[0]  # type: ignore[union-attr]  # a persona conversation
    assert view["persona"]["appraisal"]["for_turn"] == 0 and view["persona"]["episodes"] == []
    assert state_view(initial_state(MAIN))["persona"] is None
    change = diff(start, end)
    assert {"interpretation", "plan", "appraisal", "episodes"} <= set(change.persona_changed)
    episodes = change.persona_changed["episodes"]
    assert (episodes["before"], episodes["after"], episodes["removed"]) == (0, 3, [])
    assert [episode["text"] for episode in episodes["added"]] == [e.text for e in end.persona.episodes]  # type: ignore[union-attr]  # a persona conversation
    lines = diff_lines(json.loads(json.dumps(change.as_dict())))
    assert f"  persona ({len(change.persona_changed)}):" in lines
    assert any(line.startswith("    ~ appraisal  none → ") for line in lines)
    assert not diff(end, end).changed and diff(end, end).persona_changed == {}
    assert diff(initial_state(MAIN), start).persona_changed == {"persona": {"before": None, "after": "Wren Halloway"}}


def test_episodes_rewritten_with_the_same_count_say_what_changed() -> None:
    """A re-thought episode leaves the count as it was: the diff names the episode that went and the
    one that came, and the report shows them (not a bare "episodes 3 → 3")."""
    events = [decode(record) for record in read_log("persona")]
    end = fold(events, initial_state(events[0].key))
    assert end.persona is not None and len(end.persona.episodes) == 3
    first = end.persona.episodes[0]
    rewritten = dataclasses.replace(end.persona, episodes=(dataclasses.replace(first, text="Another memory."),
                                                           *end.persona.episodes[1:]))
    change = diff(end, dataclasses.replace(end, persona=rewritten)).persona_changed
    assert change == {"episodes": {
        "before": 3, "after": 3, "removed": [{"turn": first.turn, "text": first.text, "importance": first.importance}],
        "added": [{"turn": first.turn, "text": "Another memory.", "importance": first.importance}]}}
    lines = diff_lines(json.loads(json.dumps(diff(end, dataclasses.replace(end, persona=rewritten)).as_dict())))
    at = lines.index("    ~ episodes  3 → 3")
    assert lines[at + 1].startswith(f"      - turn {first.turn + 1} (importance ") and lines[at + 1].endswith(first.text)
    assert lines[at + 2].endswith("  Another memory.") and lines[at + 2].startswith("      + turn ")
