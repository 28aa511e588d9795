"""What `mirror portrait`, `mirror reflections` and `mirror reflect` print, at 80 columns, from the
API's JSON (made here by the same read model and views the gateway answers with): the portrait and
where it came from, a table of reflections with ids whole, and one reflection in full."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console

from mirror.cli.reflection import follow_up, portrait_text, reflection_detail, reflections_table
from mirror.gateway.routes.reflection import portrait_view
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState
from mirror.replay.reflections import reflection_history
from tests.unit.test_cli_width import LONGEST_ID, WIDTH, rendered, whole
from tests.unit.test_reflection_view import FIRST, SECOND, SHORT, events


def where(state: ConversationState) -> dict[str, Any]:
    return {"conversation": state.key.conversation, "branch": state.key.branch, "seq": state.last_seq,
            "timestamp": state.last_timestamp}


def api(value: Any) -> Any:
    return json.loads(json.dumps(value))


def portrait_answer(until: int) -> dict[str, Any]:
    state = fold(events()[:until])
    return api({**where(state), **portrait_view(state)})


def reflection_answers() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    found = reflection_history(events())
    return api(where(found.state)), [api(view.as_dict()) for view in found.reflections]


def test_the_portrait_says_where_it_came_from_and_what_the_last_reflection_did() -> None:
    text = rendered(portrait_text(portrait_answer(11)))
    assert "kitchen (main) at seq 11: the portrait of seq 9 (3 reflection(s), 1 rejected)" in text
    assert " ".join(text.split()).count(SECOND) == 1  # wrapped, whole
    assert "last reflection: seq 11, review: rejected: 10 characters: fewer than 30; unique-word ratio 0.30" in \
           " ".join(text.split())
    before = rendered(portrait_text(portrait_answer(4)))
    assert "kitchen (main) at seq 4: no portrait yet (0 reflection(s), 0 rejected; 1 turn(s)" in " ".join(before.split())
    assert "insight" not in before
    pending = rendered(portrait_text(portrait_answer(5)))
    assert "1 insight(s) pending for the next reflection" in pending


def test_the_reflections_table_fits_80_columns_with_every_figure_that_fits() -> None:
    _, views = reflection_answers()
    text = rendered(reflections_table(Console(width=WIDTH), views))
    assert "reflections (3)" in text and "belief_burst" in text and whole("periodic", text)
    assert "accepted" in text and "rejected: 10" in text
    assert re.search(r"│\s+2\s+│", text) and "2,020 tok" in text and "1,020 ms" in text  # reflection 2
    for what in ("1 decayed", "1 forgotten", "1 overruled"):
        assert what in text, text
    assert "turn: left out to fit 80 columns" in text  # the least needed column goes first


def test_a_reflection_in_full_shows_the_portrait_diff_the_decisions_and_the_beliefs() -> None:
    header, views = reflection_answers()
    text = rendered(reflection_detail(Console(width=WIDTH), {**header, **views[1]}))
    flat = " ".join(text.split())
    assert "reflection 2 of kitchen (main) · seq 9 · turn 1 · periodic, belief_burst" in flat
    assert "cost: 2,020 tokens (consolidation 1,500 + 220, decay 300), 1,020 ms" in flat
    assert "+They host dinners on Saturdays and care about their guests." in text
    assert "decay decisions (4, 1 overruled)" in text and whole("protected", text)
    assert whole("b-allergy", text) and "(not held)" in text  # b-gone: a decision on a belief never held
    assert "decayed b-tea The user likes green tea (confidence 0.50 → 0.25)" in flat
    assert "forgot b-jazz The user listens to jazz (emotional, confidence 0.40; still in the log)" in flat
    rejected = " ".join(rendered(reflection_detail(Console(width=WIDTH), {**header, **views[2]})).split())
    assert f"portrait unchanged; the rejected one read: {SHORT!r}" in rejected
    first = rendered(reflection_detail(Console(width=WIDTH), {**header, **views[0]}))
    assert "+They are allergic to peanuts." in first and "decay decisions" not in first and FIRST[:20] in first


def test_long_belief_ids_stay_whole_in_the_decisions() -> None:
    header, views = reflection_answers()
    view = views[1]
    view["decisions"] = [{**decision, "belief_id": LONGEST_ID} for decision in view["decisions"]]
    text = rendered(reflection_detail(Console(width=WIDTH), {**header, **view}))
    assert whole(LONGEST_ID, text), text


def test_the_follow_up_command_stays_on_the_branch_listed() -> None:
    """`mirror reflections C --branch B` suggests a command that reads B too; on main, no --branch."""
    assert follow_up({"conversation": "kitchen", "branch": "rc-1"}) == "mirror reflections kitchen N --branch rc-1"
    assert follow_up({"conversation": "kitchen", "branch": "main"}) == "mirror reflections kitchen N"
