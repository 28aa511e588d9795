"""Golden logs (tests/golden/): event logs written by earlier code, which every later change must
keep reading, folding to the same states and replaying without a model call. In process: each
log through every log adapter, the NATS client's included, is part of the log port's contract
(``tests/contract/test_log.py``).

See tests/support/golden.py for what each log holds and when (rarely) to regenerate them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import msgpack
import pytest

from mirror.cognition.prompts import PromptSet, default_prompt_set
from mirror.events.codec import RECORD_FORMAT, decode, encode
from mirror.events.envelope import Event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import (
    Appraisal,
    Belief,
    EmotionUpdate,
    Fork,
    Insight,
    Narrative,
    PersonaChosen,
    Reflection,
    ThinkerFailed,
    Turn,
)
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay import History
from mirror.replay.errors import NonDeterminism
from mirror.replay.verify import RECORDING_MISS, thinking_steps, verify_events
from mirror.replay.verify_log import verify_branch
from tests.support.golden import (
    DIVERGENT,
    EXPECTED,
    LOGS,
    RECOMPUTE_BRANCH,
    fold_and_verify,
    read_log,
    recompute_prompts,
    summary,
)

EXPECTED_RESULTS = json.loads(EXPECTED.read_text())


def golden_events(name: str) -> list[Event]:
    return [decode(record) for record in read_log(name)]


@pytest.mark.parametrize("name", [*LOGS, DIVERGENT])
def test_every_golden_record_decodes_and_current_ones_encode_back_to_their_bytes(name: str) -> None:
    records = read_log(name)
    events = [decode(record) for record in records]
    assert len(events) == len(records) > 0
    for record, event in zip(records, events, strict=True):
        raw = msgpack.unpackb(record, raw=False)
        if raw["schema"] == event.schema_version and raw["f"] == RECORD_FORMAT:  # older formats are upcast
            assert encode(event) == record, f"{name} seq {event.seq} encodes differently today"
    for key in {event.key for event in events}:
        seqs = [event.seq for event in events if event.key == key]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{key} has gaps or doubles"


def test_prototype_turns_are_upcast_to_the_current_schema() -> None:
    records = [msgpack.unpackb(record, raw=False) for record in read_log("prototype")]
    assert [(record["type"], record["schema"]) for record in records] == [
        ("belief", 1), ("turn", 1), ("turn", 1), ("edge", 1)]
    turns = [event.payload for event in golden_events("prototype") if isinstance(event.payload, Turn)]
    # Neither version recorded whether memory (or reflection) was on: unknown, not guessed.
    assert turns == [Turn("Hello.", "Hello! How are you?", narrative_seq=None, mode="full", memory=None, reflection=None),
                     Turn("I like tea.", "Noted: tea.", narrative_seq=None, mode="full", memory=None, reflection=None)]


@pytest.mark.parametrize("name", LOGS)
def test_a_plain_fold_of_main_matches_the_expected_state(name: str) -> None:
    main = [event for event in golden_events(name) if event.branch == MAIN_BRANCH]
    state = fold(main, initial_state(main[0].key))
    assert summary(state) == EXPECTED_RESULTS[name][MAIN_BRANCH]["state"]


def test_the_conversation_log_covers_what_it_promises() -> None:
    events = golden_events("conversation")
    types = {(event.branch, event.type) for event in events}
    for branch in ("main", "alt"):
        assert {(branch, kind) for kind in ("turn", "monologue", "narrative", "belief")} <= types
    assert {("main", "thinker_failed"), ("main", "edge"), ("main", "insight"), ("alt", "fork")} <= types
    llm_made = [event for event in events if event.type in ("turn", "monologue", "narrative", "thinker_failed")]
    assert all(event.provenance is not None for event in llm_made)


async def test_the_divergent_log_is_reported_as_non_determinism() -> None:
    events = golden_events(DIVERGENT)
    report = (await fold_and_verify(events))[MAIN_BRANCH]["report"]
    assert [divergence.seq for divergence in report.divergences] == EXPECTED_RESULTS[DIVERGENT]["main"]["diverges_at"]
    divergence = report.divergences[0]
    assert divergence.reason == "narrative differs in payload.text"
    assert isinstance(events[divergence.seq - 1].payload, Narrative)
    assert divergence.recorded["payload"]["text"] == "I was told something else entirely."
    assert divergence.replayed["payload"]["text"] == events[divergence.seq - 1].provenance.response
    assert report.model_calls == 0
    with pytest.raises(NonDeterminism) as caught:
        report.raise_for_divergence()
    assert caught.value.key == StreamKey("golden", "conversation")
    assert caught.value.divergences == report.divergences
    assert "diverges at seq 3" in str(caught.value)


async def test_the_reflection_log_covers_insights_and_a_reflection_and_replays_them_without_a_call() -> None:
    events = golden_events("reflection")
    assert {event.schema_version for event in events if isinstance(event.payload, Turn)} == {Turn.VERSION}
    assert sum(isinstance(event.payload, Insight) for event in events) == 22
    failures = [event.payload for event in events if isinstance(event.payload, ThinkerFailed)]
    assert [(failure.stage, failure.attempt) for failure in failures] == [("insight", 1), ("reflection", 1)]
    (reflection,) = [event for event in events if isinstance(event.payload, Reflection)]
    payload = reflection.payload
    assert isinstance(payload, Reflection) and payload.accepted and payload.triggers == ("periodic",)
    assert payload.decay_fingerprint and payload.decay_answer  # the decay call, answered from here on replay
    rules = {(applied, rule) for _, _, applied, rule in payload.decisions}
    assert ("retain", "protected") in rules and ("forget", "") in rules
    before, after = fold(events[: reflection.seq - 1]), fold(events[: reflection.seq])
    assert after.portrait == payload.portrait and before.portrait is None and not after.pending_insights
    forgotten = {belief_id for belief_id, _, applied, _ in payload.decisions if applied == "forget"}
    assert forgotten <= set(before.beliefs) and not forgotten & set(after.beliefs)  # dropped from the state...
    assert all(any(isinstance(e.payload, Belief) and e.payload.belief_id == b for e in events) for b in forgotten)
    last = events[-1]  # ...never from the log; and the next turn's Talker read the portrait
    assert isinstance(last.payload, Turn) and last.provenance is not None
    report = (await fold_and_verify(events))[MAIN_BRANCH]["report"]
    assert report.ok and report.model_calls == 0 and report.embedding_calls == 0


async def test_the_memory_log_covers_the_memory_stage_and_replays_it_without_embedding() -> None:
    events = golden_events("memory")
    beliefs = [event.payload for event in events if isinstance(event.payload, Belief)]
    assert [belief.operation for belief in beliefs] == ["assert", "assert", "reinforce", "contradict"]
    assert all(belief.embedding and belief.embedding_fingerprint for belief in beliefs)
    assert {"edge", "memory_step"} <= {event.type for event in events}
    failures = [event.payload for event in events if isinstance(event.payload, ThinkerFailed)]
    assert [(failure.stage, failure.attempt) for failure in failures] == [("memory", 1)]
    report = (await fold_and_verify(events))[MAIN_BRANCH]["report"]
    assert report.ok and report.model_calls == 0 and report.embedding_calls == 0
    assert len(fold(events).review_items) == 1


async def test_the_recompute_log_records_its_prompt_set_with_the_branch_and_verifies_by_it() -> None:
    events = golden_events("recompute")
    fork = next(event for event in events if event.type == "fork")
    assert isinstance(fork.payload, Fork) and fork.schema_version == 2
    # The set as it was: the templates the fork recorded (the built-in set has gained some since).
    current = recompute_prompts()
    prompts = PromptSet("custom", {name: text for name, text in current.templates.items()
                                   if name in fork.payload.template_digests})
    assert fork.payload.prompt_set == prompts.version
    assert fork.payload.changed_templates == {"controller.md": prompts.templates["controller.md"]}
    results = await fold_and_verify(events)  # the branch's prompt set found from its fork, none given
    branch = results[RECOMPUTE_BRANCH]["report"]
    assert branch.ok and branch.model_calls == 0 and branch.prompt_set == prompts.version
    # The same branch verified with the built-in set: the controller's requests were never answered.
    history = History(_in_memory(events), materialize=False)
    wrong = await verify_branch(history, fork.key, default_prompt_set())
    assert wrong.divergences and {(d.kind, d.stage) for d in wrong.divergences} == {(RECORDING_MISS, "controller")}
    assert "controller.md changed since the recording" in wrong.divergences[0].reason


def _in_memory(events: list[Event]) -> InMemoryEventLog:
    log = InMemoryEventLog()
    log.add(events)
    return log


async def test_the_persona_log_verifies_each_step_of_the_cycle_and_notices_edits() -> None:
    """The persona log: every step (the ``persona`` event, each turn path, each background step and
    the failed emotion step, which is no MIRROR thinking step) is re-run; an edited appraisal, an
    edited emotion intensity and an edited card each diverge, with no model call."""
    events = golden_events("persona")
    key = events[0].key

    async def verified(changed: list[Event]) -> Any:
        return await verify_events(key, initial_state(key), changed, default_prompt_set())

    report = await verified(events)
    failures = [e for e in events if isinstance(e.payload, ThinkerFailed)]
    assert [failure.payload.stage for failure in failures] == ["emotion"]  # type: ignore[attr-defined]  # ThinkerFailed
    assert report.ok and report.model_calls == 0 and report.embedding_calls == 0
    assert report.steps == 1 + 3 * 5 + len(failures) and not thinking_steps(events)

    def edited(kind: type, **change: Any) -> tuple[list[Event], int]:
        seq = next(event.seq for event in events if isinstance(event.payload, kind))
        return [dataclasses.replace(e, payload=dataclasses.replace(e.payload, **change)) if e.seq == seq else e
                for e in events], seq

    for changed, seq, field in (
        (*edited(Appraisal, text="Nothing stirs in me."), "the event was edited"),
        (*edited(EmotionUpdate, intensities={"joy": 1.0}), "payload.intensities"),
        (*edited(PersonaChosen, card="{}"), "payload.version"),
    ):
        report = await verified(changed)
        assert report.model_calls == 0 and report.divergences[0].seq == seq, report.divergences
        assert field in report.divergences[0].reason
