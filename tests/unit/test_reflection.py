"""Reflection's properties (issue 23): the gates, validation, the rules over FORGET, and the
portrait under time travel. Pure: the steps run over the LLM port answered in process (a
scripted model whose answers Hypothesis draws, since "whatever the model answers" is the point).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.cognition.errors import ReflectionPolicyError
from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.pipeline import MirrorConfig, Thinking
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.reflection import (
    DEFAULT_POLICY,
    ReflectionPolicy,
    decay_candidates,
    draw_insight,
    due,
    forced_triggers,
    is_protected,
    reflect,
    refusal,
    unique_ratio,
    validate,
)
from mirror.cognition.reflection.policy import PROTECTED_TERMS, SECONDS_PER_HOUR
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import Belief, Provenance, Recall, Reflection, ThinkerFailed, Turn
from mirror.events.upcasting import upcast
from mirror.projections.conversation import apply, fold
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import History

KEY = StreamKey("acme", "reflecting")
PROMPTS = default_prompt_set()
CONFIG = MirrorConfig(model="scripted", reflection=True)
T0 = 1_700_000_000.0
PROPERTY = settings(max_examples=60, deadline=None)


class AnswerModel:
    """The LLM port answered in process: ``portrait`` for the consolidation, ``decay`` (raw text)
    for the decay call, ``insight`` for the insight call. Records what it was asked."""

    def __init__(self, *, portrait: str = "", decay: str = "", insight: str = "") -> None:
        self.portrait, self.decay, self.insight = portrait, decay, insight
        self.asked: list[str] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        name = request.json_schema.name if request.json_schema is not None else ""
        self.asked.append(name)
        content = {"reflection_portrait": self.portrait, "reflection_decay": self.decay,
                   "reflection_insight": self.insight}[name]
        return ChatResponse(content, Provenance(request.model, request.prompt_set, request.fingerprint(),
                                                {"temperature": 0.7}, 2.0, 10, 5, response=content))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("reflection embeds nothing")


class Log:
    """A log built event by event, folded as it grows (the writer's way, without a bus)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.state = initial_state(KEY)

    def add(self, payload: Any, *, timestamp: float | None = None, provenance: Provenance | None = None) -> Event:
        seq = self.state.last_seq + 1
        when = timestamp if timestamp is not None else (self.state.last_timestamp or T0)
        event = make_event(KEY, seq, payload, turn=max(self.state.turn_count - (0 if isinstance(payload, Turn) else 1), 0),
                           provenance=provenance, timestamp=when)
        self.events.append(event)
        self.state = apply(self.state, event)
        return event

    def turn(self, timestamp: float, message: str = "hello there") -> None:
        self.add(Turn(message, "noted", reflection=True), timestamp=timestamp)

    def step(self, thinking: Thinking) -> list[Event]:
        return [self.add(thought.payload, provenance=thought.provenance) for thought in thinking.thoughts]


def _reflection(triggers: tuple[str, ...], portrait: str = "a portrait that is long enough to pass.",
                accepted: bool = True, decisions: tuple[tuple[str, str, str, str], ...] = ()) -> Reflection:
    return Reflection(portrait=portrait, accepted=accepted, triggers=triggers, decisions=decisions)


# ---------------------------------------------------------------------------------- events


def test_insight_and_reflection_of_version_1_upcast() -> None:
    assert upcast("insight", 1, {"text": "t"}) == {"text": "t", "for_turn": None}
    old = {"snapshot": "a portrait", "accepted": True, "reason": "", "unique_ratio": 0.9, "insights_used": 2}
    assert upcast("reflection", 1, old) == {"portrait": "a portrait", "accepted": True, "reason": "",
                                            "unique_ratio": 0.9, "insights_used": 2}


# ---------------------------------------------------------------------------------- policy


def test_the_policy_holds_the_issues_numbers_and_refuses_bad_ones() -> None:
    policy = ReflectionPolicy()
    assert (policy.every, policy.cooldown, policy.max_per_hour, policy.min_chars, policy.min_length_ratio,
            policy.warn_unique_ratio, policy.max_episodes, policy.strong_confidence) == (20, 10, 6, 30, 0.6, 0.4, 10, 0.85)
    for bad in ({"every": 0}, {"cooldown": -1}, {"max_per_hour": 0}, {"strong_confidence": 1.5},
                {"protected_terms": ("",)}, {"min_chars": 7000}):
        with pytest.raises(ReflectionPolicyError):
            ReflectionPolicy(**bad)


# ---------------------------------------------------------------------------------- gates

policies = st.builds(
    ReflectionPolicy, every=st.integers(1, 25), cooldown=st.integers(0, 12), max_per_hour=st.integers(1, 4),
    review_trigger=st.integers(0, 2), belief_burst=st.integers(0, 3),
)
actions = st.lists(st.one_of(
    st.tuples(st.just("turn"), st.floats(0.0, 1200.0)),  # a turn, this many seconds after the last event
    st.tuples(st.just("belief"), st.integers(0, 3)),
    st.tuples(st.just("contradiction"), st.integers(0, 3)),
    st.tuples(st.just("force"), st.just(0)),
), min_size=1, max_size=120)


@given(policies, actions)
@PROPERTY
def test_reflection_never_fires_inside_the_cooldown_or_above_the_hourly_cap(policy: ReflectionPolicy,
                                                                           script: list[tuple[str, Any]]) -> None:
    log = Log()
    now = T0
    for action, value in script:
        if action == "turn":
            now += value
            log.turn(now)
            triggers = due(log.state, policy)  # what the writer asks after each turn
            if triggers:
                log.add(_reflection(triggers), timestamp=now)
        elif action == "belief":
            log.add(Belief(f"b{log.state.last_seq}", "assert", "a fact", confidence=0.5), timestamp=now)
        elif action == "contradiction":
            log.add(Belief(f"c{log.state.last_seq}", "contradict", "not a fact", related=(f"b{value}",)), timestamp=now)
        elif refusal(log.state, policy) is None:  # a forced reflection passes the same gates
            log.add(_reflection(forced_triggers(log.state, policy)), timestamp=now)
    turns_since, times = 0, list[float]()
    for event in log.events:
        if isinstance(event.payload, Turn):
            turns_since += 1
        elif isinstance(event.payload, Reflection):
            assert turns_since >= policy.cooldown  # never within the cooldown (the start counts as a reflection)
            window = [t for t in times if event.timestamp - SECONDS_PER_HOUR < t <= event.timestamp]
            assert len(window) < policy.max_per_hour  # never above the hourly cap
            turns_since, times = 0, [*times, event.timestamp]


def test_a_refusal_names_the_turns_left_or_the_next_slot() -> None:
    log = Log()
    assert refusal(log.state, DEFAULT_POLICY).reason == "no_turns"  # type: ignore[union-attr]
    for index in range(4):
        log.turn(T0 + index)
    cooling = refusal(log.state, DEFAULT_POLICY)
    assert cooling is not None and (cooling.reason, cooling.turns_left) == ("cooldown", 6)
    # None ran yet: the cooldown counts from the start, and the refusal says so (not "after the last reflection").
    assert cooling.detail == "within the cooldown of 10 turns from the start (no reflection ran yet): 6 more turn(s) first"
    policy = ReflectionPolicy(cooldown=1, max_per_hour=2)
    log.add(_reflection(("forced",)), timestamp=T0 + 10)
    after = refusal(log.state, ReflectionPolicy(cooldown=3))
    assert after is not None and after.detail == "within the cooldown of 3 turns after the last reflection: 3 more turn(s) first"
    log.turn(T0 + 20)
    log.add(_reflection(("forced",)), timestamp=T0 + 30)
    log.turn(T0 + 40)
    capped = refusal(log.state, policy)
    assert capped is not None and capped.reason == "hourly_cap" and capped.next_slot == T0 + 10 + SECONDS_PER_HOUR
    log.turn(T0 + 11 + SECONDS_PER_HOUR)  # the first has left the hour: a slot is free
    assert refusal(log.state, policy) is None


# ---------------------------------------------------------------------------------- validation


async def _reflected(state: ConversationState, model: AnswerModel, policy: ReflectionPolicy = DEFAULT_POLICY) -> Thinking:
    return await reflect(state, model, PROMPTS, CONFIG, policy, triggers=("forced",))


@given(st.none() | st.text(max_size=200), st.text(max_size=200))
@PROPERTY
async def test_validation_rejects_short_or_shrunken_portraits_and_keeps_the_old_one_byte_for_byte(
        old: str | None, answer: str) -> None:
    log = Log()
    log.turn(T0)
    if old is not None:
        log.add(_reflection(("forced",), portrait=old, accepted=True))
    before = log.state
    thinking = await _reflected(before, AnswerModel(portrait=json.dumps({"portrait": answer})))
    after = fold([thinking.events(KEY, before.last_seq + 1)[0]], before)
    new = answer.strip()
    (thought,) = thinking.thoughts
    if not new:  # nothing usable came back: a failure, never half a reflection
        assert isinstance(thought.payload, ThinkerFailed) and thought.payload.stage == "reflection"
        assert after.portrait == before.portrait
        return
    payload = thought.payload
    assert isinstance(payload, Reflection)
    expected = len(new) >= 30 and len(new) >= 0.6 * len(old or "") and len(new) <= DEFAULT_POLICY.max_chars
    assert payload.accepted == expected and payload.accepted == (payload.reason == "")
    assert after.portrait == (new if expected else before.portrait)  # the old one, byte for byte
    assert after.pending_insights == () and after.counters.turns_since_reflection == 0


def test_validation_and_health_name_what_failed() -> None:
    assert validate(None, "x" * 29, DEFAULT_POLICY) == (False, "too short: 29 characters, the minimum is 30")
    assert validate("y" * 100, "x" * 59, DEFAULT_POLICY)[0] is False
    assert validate("y" * 100, "x" * 60, DEFAULT_POLICY) == (True, "")
    assert unique_ratio("the the the the cat") == 0.4 and unique_ratio("") == 1.0


# ---------------------------------------------------------------------------------- decay rules

statements = st.one_of(
    st.text(max_size=40),
    st.builds(lambda term, text: f"{text} {term} {text}", st.sampled_from(PROTECTED_TERMS), st.text(max_size=10)),
)
beliefs = st.lists(st.tuples(statements, st.floats(0.0, 1.0), st.sampled_from(("standard", "emotional", "operational"))),
                   min_size=1, max_size=8)
answers = st.one_of(
    st.text(max_size=60),  # anything at all: unreadable answers retain every candidate
    st.lists(st.fixed_dictionaries({"belief": st.integers(0, 9), "verdict": st.sampled_from(("RETAIN", "DECAY", "FORGET"))}),
             max_size=10).map(lambda items: json.dumps({"decisions": items})),
)


@given(beliefs, answers, st.booleans())
@PROPERTY
async def test_a_protected_or_strong_belief_is_never_forgotten_whatever_the_model_answers(
        made: list[tuple[str, float, str]], answer: str, recall_some: bool) -> None:
    log = Log()
    for index, (statement, confidence, memory_type) in enumerate(made):
        log.add(Belief(f"b{index}", "assert", statement, memory_type, confidence))  # type: ignore[arg-type]
    for index in range(25):
        log.turn(T0 + index)
        if recall_some and index == 20:
            log.add(Recall("q", belief_ids=("b0",)))
    before = log.state
    candidates = decay_candidates(before, DEFAULT_POLICY)
    assert {b.belief_id for b in candidates} == set(before.beliefs)  # all untouched for 25 turns
    thinking = await _reflected(before, AnswerModel(portrait=json.dumps({"portrait": "p" * 40}), decay=answer))
    (thought,) = thinking.thoughts
    payload = thought.payload
    assert isinstance(payload, Reflection) and payload.decay_answer == answer
    after = fold(thinking.events(KEY, before.last_seq + 1), before)
    for belief_id, proposed, applied, rule in payload.decisions:
        belief = before.beliefs[belief_id]
        if is_protected(belief, DEFAULT_POLICY):
            assert applied == "retain" and after.beliefs[belief_id].confidence == belief.confidence
        if belief.confidence >= DEFAULT_POLICY.strong_confidence or (recall_some and belief_id == "b0"):
            assert applied != "forget" and belief_id in after.beliefs
        assert (rule != "") == (applied != proposed)  # every overruling is recorded, and only those
        assert (belief_id in after.beliefs) == (applied != "forget")


@given(st.lists(st.text(max_size=20), min_size=1, max_size=6), st.data())
@PROPERTY
async def test_forget_never_removes_an_event_and_time_travel_still_shows_the_belief(texts: list[str], data: Any) -> None:
    log = Log()
    for index, text in enumerate(texts):
        log.add(Belief(f"b{index}", "assert", text or "x", confidence=0.1))
    for index in range(21):
        log.turn(T0 + index)
    verdicts = data.draw(st.lists(st.sampled_from(("RETAIN", "DECAY", "FORGET")), min_size=len(texts), max_size=len(texts)))
    answer = json.dumps({"decisions": [{"belief": i, "verdict": v} for i, v in enumerate(verdicts)]})
    before_events = list(log.events)
    log.step(await _reflected(log.state, AnswerModel(portrait=json.dumps({"portrait": "q" * 40}), decay=answer)))
    store = InMemoryEventLog()
    store.add(log.events)
    history = History(store, materialize=False)
    assert (await store.read(KEY))[: len(before_events)] == before_events  # nothing left the log
    reflection = log.events[-1]
    then = await history.state_at(KEY, reflection.seq - 1)
    now = await history.state_at(KEY)
    assert set(then.beliefs) == {f"b{i}" for i in range(len(texts))}
    assert set(now.beliefs) == {f"b{i}" for i, verdict in enumerate(verdicts) if verdict != "FORGET"}


# ---------------------------------------------------------------------------------- time travel

@given(st.lists(st.tuples(st.booleans(), st.text(min_size=0, max_size=80)), min_size=1, max_size=12),
       st.integers(1, 7))
@PROPERTY
async def test_the_portrait_at_any_seq_equals_what_time_travel_shows(reflections: list[tuple[bool, str]],
                                                                   snapshot_every: int) -> None:
    log = Log()
    for index, (accepted, portrait) in enumerate(reflections):
        log.turn(T0 + index)
        log.add(_reflection(("periodic",), portrait=portrait, accepted=accepted))
    store = InMemoryEventLog()
    store.add(log.events)
    history = History(store, snapshots=store, snapshot_every=snapshot_every, materialize=True)
    expected: str | None = None
    for event in log.events:
        if isinstance(event.payload, Reflection) and event.payload.accepted:
            expected = event.payload.portrait  # the last accepted one, nothing else
        assert (await history.state_at(KEY, event.seq)).portrait == expected
        assert fold(log.events[: event.seq]).portrait == expected


# ---------------------------------------------------------------------------------- insight

async def test_an_insight_names_its_turn_and_an_unusable_one_fails_on_its_own() -> None:
    log = Log()
    log.turn(T0, "I moved to Porto last spring.")
    good = await draw_insight(log.state, AnswerModel(insight=json.dumps({"insight": " They like  Porto. "})), PROMPTS,
                              CONFIG)
    (thought,) = good.thoughts
    assert thought.payload.text == "They like Porto." and thought.payload.for_turn == 0  # type: ignore[attr-defined]
    assert thought.provenance is not None and thought.provenance.response is None  # one copy: the payload gives it back
    bad = await draw_insight(log.state, AnswerModel(insight=json.dumps({"insight": "   "})), PROMPTS, CONFIG, attempt=2)
    (failure,) = bad.thoughts
    assert isinstance(failure.payload, ThinkerFailed) and (failure.payload.stage, failure.payload.attempt) == ("insight", 2)
    assert fold(good.events(KEY, 2), log.state).insight_turn == 0


def test_a_refusal_and_a_failure_cross_processes_with_their_fields() -> None:
    import pickle

    from mirror.cognition.errors import ReflectionFailed, ReflectionRefused

    refused = pickle.loads(pickle.dumps(ReflectionRefused("acme/c/main", "cooldown", "3 more turn(s) first", turns_left=3)))
    assert isinstance(refused, ReflectionRefused) and (refused.reason, refused.turns_left, refused.next_slot) == (
        "cooldown", 3, None) and "3 more turn(s) first" in str(refused)
    failed = pickle.loads(pickle.dumps(ReflectionFailed("acme/c/main", 41, "LLMUnavailable", "down")))
    assert isinstance(failed, ReflectionFailed) and (failed.seq, failed.error_type) == (41, "LLMUnavailable")


def test_the_talker_reads_the_portrait_bounded_and_nothing_without_one() -> None:
    from dataclasses import replace

    from mirror.cognition.pipeline import PORTRAIT_MAX_CHARS, talker_request

    log = Log()
    log.turn(T0, "I moved to Porto.")
    plain = talker_request(log.state, "Hello?", PROMPTS, CONFIG).messages[0].content
    assert "How I have come to see this person" not in plain
    long_portrait = "They love the sea. " * 200
    shown = talker_request(replace(log.state, portrait=long_portrait), "Hello?", PROMPTS, CONFIG).messages[0].content
    assert "How I have come to see this person" in shown and "They love the sea." in shown
    assert len(shown) - len(plain) < PORTRAIT_MAX_CHARS + 200  # bounded, whatever the portrait's length
