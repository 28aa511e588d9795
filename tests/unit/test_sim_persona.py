"""The simulator's answers to the persona mind, in process: read from the request the cycle really
builds (Wren's card, folded state, the built-in prompts), parsed by the cycle's own parsers, and
legible: emotions named in the exchange rise, the others decay; a message naming the active
hard goal meets it; the order judge reads the appraisal's emotion in the reply."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from mirror.cognition.persona import EXAMPLES, read_persona
from mirror.cognition.persona.background import parse_update, update_request
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.persona.turn_path import choose_persona
from mirror.cognition.pipeline import MirrorConfig
from mirror.events.payloads import Appraisal, EmotionUpdate, GoalUpdate, Interpretation, RelationshipUpdate, Turn
from mirror.projections import ConversationState, fold
from mirror.sim import content, persona
from tests.support.event_log import log_of


def state_after(message: str, appraisal: str, *updates: Any) -> ConversationState:
    chosen = asyncio.run(choose_persona(read_persona(EXAMPLES / "wren.json"), None))
    return fold(log_of(chosen, *updates, Interpretation("They said it.", for_turn=0), Appraisal(appraisal, for_turn=0),
                       Turn(message, "Hm.", narrative_seq=None, mode="baseline", memory=False, reflection=False)))


def ask(stage: str, state: ConversationState) -> dict[str, Any]:
    chat, schema = update_request(stage, state, default_persona_prompts(), MirrorConfig(model="m"))
    body = {"model": "m", "messages": [{"role": m.role, "content": m.content} for m in chat.messages],
            "response_format": {"type": "json_schema", "json_schema": {"name": schema.name, "schema": schema.schema}}}
    answer = content.chat_completion(body, content.request_digest(body), "m")
    return json.loads(answer["choices"][0]["message"]["content"])


def test_emotions_named_in_the_exchange_rise_and_the_rest_decay() -> None:
    before = EmotionUpdate(0, {"joy": 0.5, "sadness": 0.0, "anger": 0.0, "fear": 0.0, "surprise": 0.0,
                               "nostalgia": 0.4}, "start")
    state = state_after("The storm scared me half to death.", "I feel fear at this.", before)
    assert state.persona is not None and state.persona.emotions["joy"] == 0.5
    intensities = ask("emotion", state)["intensities"]
    assert intensities["fear"] >= 0.3 and intensities["sadness"] >= 0.3  # "storm", "scared", "fear"; "death"
    assert intensities["joy"] == 0.35 and intensities["nostalgia"] == 0.28 and intensities["anger"] == 0.0


def test_the_active_hard_goal_is_met_only_by_a_message_holding_its_words() -> None:
    assert ask("goal", state_after("Nice weather.", "I feel joy."))["active_goal_met"] is False
    answer = ask("goal", state_after("I got this pocket watch from my grandfather.", "I feel surprise."))
    assert answer["active_goal_met"] is True and len(answer["soft_progress"]) == 2


def test_warm_words_draw_the_relationship_closer_and_importance_grows_with_weight() -> None:
    state = state_after("Thank you, my friend. I trust you with this!", "I feel trust.",
                        RelationshipUpdate(0, {"closeness": 0.1, "trust": 0.3, "curiosity": 0.6}, "start"))
    dimensions = ask("relationship", state)["dimensions"]
    assert dimensions["closeness"] > 0.1 and dimensions["trust"] > 0.3
    light = ask("importance", state_after("ok", "I feel joy."))["importance"]
    heavy = ask("importance", state_after("My brother died in the storm, and I never told anyone! Why now?",
                                          "I feel sadness."))["importance"]
    assert 1 <= light < heavy <= 10


def test_the_answers_are_what_the_cycle_parses() -> None:
    state = state_after("The pocket watch stopped in the storm.", "I feel fear.")
    assert state.persona is not None
    for stage, kind in (("emotion", EmotionUpdate), ("relationship", RelationshipUpdate), ("goal", GoalUpdate)):
        assert isinstance(parse_update(stage, json.dumps(ask(stage, state)), state.persona, 0), kind)


@pytest.mark.parametrize("appraisal, reply, expressed", [
    ("I feel fear at this. It lands hard.", "I will not hide it: I feel fear. Go on.", True),
    ("I feel fear at this.", "I am scared, to be honest.", True),
    ("I feel fear at this.", "Let me see the watch.", False),
    ("Nothing much.", "Let me see the watch.", False),
])
def test_the_order_judge_reads_the_appraised_emotion_in_the_reply(appraisal: str, reply: str, expressed: bool) -> None:
    assert persona.verdict(appraisal, reply)["expressed"] is expressed


def test_plan_first_formulations_say_the_feeling_less_often() -> None:
    instructions = "How I feel right now (0 to 1): joy 0.00, fear 0.00\nThe one I pursue now: Find the watch\n"
    said = {True: 0, False: 0}
    for index in range(40):
        rng = random.Random(index)
        appraisal = persona.prose("appraisal", instructions + persona.MARKERS["appraisal"], "The storm!", rng)
        assert appraisal.startswith("I feel fear")
        for appraisal_first in (True, False):
            gut = f"My gut reaction (never said aloud): {appraisal}\n" if appraisal_first else ""
            plan = persona.prose("plan", instructions + gut + persona.MARKERS["plan"], "The storm!", rng)
            reply = persona.prose("formulation", instructions + f"My gut reaction (never said aloud): {appraisal}\n"
                                  f"My plan for this reply: {plan}\n" + persona.MARKERS["formulation"], "The storm!", rng)
            said[appraisal_first] += persona.verdict(appraisal, reply)["expressed"]
    assert said[True] == 40 and said[False] < 40
