"""Golden event logs: what they hold, how they are read, and the script that writes them.

A golden log is a msgpack array of event records, each exactly the bytes the codec wrote
(``mirror.events.codec.encode``). ``tests/golden/expected.json`` holds, per log and branch, the
state the projections fold it to (as plain JSON, :func:`summary`) and what ``replay verify``
counts over it.

Regenerate ONLY when a schema version is deliberately added (a new event type or version, a
new projection field): the point of these files is that code written later must keep reading
what earlier code wrote, so they are not refreshed to make a failing test pass. Then run

    .venv/bin/python -m tests.support.golden

after renaming the current logs (``conversation.msgpack`` to ``conversation-v1.msgpack``, say)
and adding their names to ``LOGS``: the old logs are the past versions and stay checked; the
script writes new ``conversation``, ``prototype`` and ``divergent`` logs and the expected
results of every log in ``LOGS``.
The script drives the real MIRROR pipeline against the simulator, so every LLM-produced event
carries the provenance ``replay verify`` re-runs it by.

A log for a new event type alone is added with ``python -m tests.support.golden NAME`` (see
:func:`add_log`; the other logs stay as they are). When the projection computes something new
from the same events (``PROJECTION_VERSION``), the logs stay and only their expected states are
folded again: ``python -m tests.support.golden --expected`` (:func:`refresh_expected`). Issue 23
did both: the logs of turn schema 3 stayed, their expected states gained the reflection fields,
and ``reflection`` (turn v4, insight v2, reflection v2) was added. Issue 25 added ``persona``
(the persona mind's nine event types). Issue 35 added ``greeting`` (``persona`` v2 with the
user's name, the ``greeting`` event), with SillyTavern's own card; the ``persona`` log stays as
the persona events' version 1, and ``instructions`` (the client's system text, and a branch a
regenerated reply forked).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack

from mirror.cognition.embeddings import Embedder, OpenAIEmbedder
from mirror.cognition.llm import LLM
from mirror.cognition.memory import remember
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.persona import EXAMPLES, read_persona
from mirror.cognition.persona.background import PERSONA_STAGES, persona_step
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.persona.turn_path import choose_persona, opening, persona_turn
from mirror.cognition.pipeline import MirrorConfig, Thinking, talk, think
from mirror.cognition.prompts import PromptSet, default_prompt_set
from mirror.cognition.reflection import DEFAULT_POLICY, draw_insight, due, reflect
from mirror.events.codec import decode, encode
from mirror.events.envelope import Event, make_event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import (
    Belief,
    Edge,
    Fork,
    Insight,
    Instructions,
    Narrative,
    Payload,
    Provenance,
    Reflection,
    Retrieval,
)
from mirror.projections._frozen import FrozenMap
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import History, VerifyReport, recorded_fork
from mirror.replay.verify_log import verify_branch
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.sim import SIM_MODEL, sim_client

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
EXPECTED = GOLDEN / "expected.json"
LOGS = ("conversation", "prototype", "memory", "recompute", "reflection", "persona", "greeting", "instructions")
"""Logs that must fold to their expected states and verify with no divergence."""
DIVERGENT = "divergent"
"""A log whose recorded narrative was edited after the fact: verify must find it."""
START = 1_700_000_000.0
"""Event ``seq`` of every golden log happened at ``START + seq``."""


# --------------------------------------------------------------------------------- reading


def read_log(name: str) -> list[bytes]:
    return list(msgpack.unpackb((GOLDEN / f"{name}.msgpack").read_bytes(), raw=False))


def write_log(name: str, events: Iterable[Event]) -> None:
    write_records(name, [encode(event) for event in events])


def write_records(name: str, records: Sequence[bytes]) -> None:
    (GOLDEN / f"{name}.msgpack").write_bytes(msgpack.packb(list(records), use_bin_type=True))


def keys_of(events: Iterable[Event]) -> list[StreamKey]:
    """Every branch of the log, main first."""
    return sorted({event.key for event in events}, key=lambda key: (key.branch != MAIN_BRANCH, key))


def plain(value: Any) -> Any:
    """A state as JSON values: dataclasses as objects, maps with text keys, floats to 9 places."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: plain(getattr(value, item.name)) for item in dataclasses.fields(value)
                if item.name != "limits"}
    if isinstance(value, (FrozenMap, Mapping)):
        return {("|".join(map(str, key)) if isinstance(key, tuple) else str(key)): plain(item)
                for key, item in sorted(value.items(), key=lambda pair: str(pair[0]))}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, bytes):  # a packed vector: hex keeps it JSON and exact
        return value.hex()
    return value


def summary(state: ConversationState) -> dict[str, Any]:
    return plain(state)


def verify_counts(report: VerifyReport) -> dict[str, int]:
    return {"events": report.events, "steps": report.steps, "unverifiable": report.unverifiable,
            "recorded_answers": report.recorded_answers, "model_calls": report.model_calls}


async def fold_and_verify(events: Sequence[Event], log: Any = None) -> dict[str, dict[str, Any]]:
    """Per branch: its folded state and ``replay verify``'s report, as ``replay verify`` runs it
    (a forked branch verified from its parent's state at the fork, with the prompt set its fork
    recorded). ``log``: a log port that
    already holds ``events`` (default: an in-memory log of them)."""
    log = log if log is not None else _log_of(events)
    history = History(log, materialize=False)
    out: dict[str, dict[str, Any]] = {}
    for key in keys_of(events):  # each branch with the prompt set its fork recorded, else the built-in one
        report = await verify_branch(history, key)
        out[key.branch] = {"state": summary(await history.state_at(key)), "report": report}
    return out


# --------------------------------------------------------------------------------- writing


def _steady(provenance: Provenance | None) -> Provenance | None:
    """A measured latency fixed at 1 ms, so a rerun changes no more bytes than it must (a call
    that got no answer measured nothing and keeps its 0)."""
    if provenance is None or provenance.latency_ms == 0:
        return provenance
    return dataclasses.replace(provenance, latency_ms=1.0)


class _Writer:
    """Appends events to one branch the way the conversation actor does."""

    def __init__(self, key: StreamKey, llm: LLM, state: ConversationState | None = None) -> None:
        self.key = key
        self.llm = llm
        self.state = state or initial_state(key)
        self.events: list[Event] = []
        self.config = MirrorConfig(model=SIM_MODEL, mode="full", seed=11)
        self.prompts = default_prompt_set()

    def append(self, payload: Payload, *, provenance: Provenance | None = None, causation: str | None = None) -> Event:
        seq = self.state.last_seq + 1
        event = make_event(self.key, seq, payload, turn=max(self.state.turn_count - 1, 0), provenance=provenance,
                           causation=causation, timestamp=START + seq)
        return self._apply(event)

    def _apply(self, event: Event) -> Event:
        self.state = apply(self.state, event)
        self.events.append(event)
        return event

    async def turn(self, message: str, instructions: str | None = None) -> None:
        if instructions is not None and instructions != self.state.instructions:  # as the live turn records them
            seq = self.state.last_seq + 1
            self._apply(make_event(self.key, seq, Instructions(instructions), turn=self.state.turn_count,
                                   timestamp=START + seq))
        said = await talk(self.state, message, self.llm, self.prompts, self.config)
        seq = self.state.last_seq + 1
        self._apply(make_event(self.key, seq, said.turn, turn=self.state.turn_count, provenance=_steady(said.provenance),
                               timestamp=START + seq))

    async def think(self, attempt: int = 1) -> bool:
        return self._step(await think(self.state, self.llm, self.prompts, self.config, attempt=attempt))

    async def insight(self, attempt: int = 1) -> bool:
        return self._step(await draw_insight(self.state, self.llm, self.prompts, self.config, attempt=attempt))

    async def reflect(self, triggers: tuple[str, ...], attempt: int = 1) -> bool:
        return self._step(await reflect(self.state, self.llm, self.prompts, self.config, DEFAULT_POLICY,
                                        triggers=triggers, attempt=attempt))

    async def remember(self, embedder: Embedder, attempt: int = 1) -> bool:
        return self._step(await remember(self.state, self.llm, embedder, self.prompts, self.config, attempt=attempt))

    def _step(self, thinking: Thinking) -> bool:
        seen = self.events[-1].id if self.events else None
        for event in thinking.events(self.key, self.state.last_seq + 1, causation=seen):
            payload = event.payload
            if isinstance(payload, Reflection) and payload.decay_ms:  # the decay call's latency, as _steady's
                payload = dataclasses.replace(payload, decay_ms=1.0)
            self._apply(dataclasses.replace(event, payload=payload, timestamp=START + event.seq,
                                            provenance=_steady(event.provenance)))
        return thinking.ok


async def _conversation(sim: SimLLMServer) -> list[Event]:
    """Main: three turns thought through (one thinking step fails once and is retried), with
    beliefs, edges and an insight; ``alt``: forked after the second turn's thinking, re-thought,
    and one more turn of its own."""
    main = StreamKey("golden", "conversation")
    async with sim_client(sim) as llm:
        writer = _Writer(main, llm)
        await writer.turn("I am allergic to peanuts.")
        await writer.think()
        writer.append(Belief("allergy", "assert", "The user is allergic to peanuts.", "operational", 0.9))
        writer.append(Edge("peanuts", "causes", "allergic reaction"))
        await writer.turn("What should I cook tonight?")
        sim.script("500")
        assert not await writer.think(), "the scripted 500 must fail the monologue"
        assert await writer.think(attempt=2)
        fork_seq = writer.state.last_seq
        writer.append(Belief("allergy", "reinforce"))
        writer.append(Insight("The user plans meals around an allergy."))
        await writer.turn("Something quick, please.")
        await writer.think()
        writer.append(Edge("cooking", "needs", "time", origin="user_confirmed"))

        history = History(_log_of(writer.events), materialize=False)
        alt = StreamKey(main.tenant, main.conversation, "alt")
        branch = _Writer(alt, llm, _rekey(await history.state_at(main, fork_seq), alt))
        branch.append(Fork(MAIN_BRANCH, fork_seq, "default", "golden fork"))
        await branch.think()
        await branch.turn("Actually, I can eat peanuts now.")
        await branch.think()
        branch.append(Belief("no-allergy", "contradict", "The user can eat peanuts.", related=("allergy",)))
    return writer.events + branch.events


MEMORY_DIMENSIONS = 32
"""Small vectors (128 bytes) keep the golden memory log small; the simulator embeds at any size."""


async def _memory(sim: SimLLMServer) -> list[Event]:
    """The memory stage (record format 2, ``belief`` v2, ``memory_step``): a fact and a causal
    edge, a failed extraction retried, the fact restated (reinforce) and negated (contradict,
    one review item)."""
    key = StreamKey("golden", "memory")
    embedder = OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", max_retries=0),
                              dimensions=MEMORY_DIMENSIONS)
    async with sim_client(sim) as llm:
        writer = _Writer(key, llm)
        await writer.turn("I am allergic to peanuts. Stress causes insomnia.")
        await writer.think()
        sim.script("malformed")
        assert not await writer.remember(embedder), "the scripted malformed answer must fail the extraction"
        assert await writer.remember(embedder, attempt=2)
        for message in ("I am allergic to peanuts.", "I am not allergic to peanuts."):
            await writer.turn(message)
            await writer.think()
            assert await writer.remember(embedder)
    await embedder.aclose()
    operations = [e.payload.operation for e in writer.events if isinstance(e.payload, Belief)]
    assert operations == ["assert", "assert", "reinforce", "contradict"], operations
    return writer.events


async def _instructions(sim: SimLLMServer) -> list[Event]:
    """``instructions`` (issue 35): main's first turn came with a system prompt, its second with
    the same one (nothing recorded), its third with another; ``regen-golden`` was forked before the
    third turn (a regenerated reply, as a transcript forks it) and answered it again, with the
    first instructions."""
    main = StreamKey("golden", "instructions")
    card = "Answer as a ship's cook, in two sentences at most."
    async with sim_client(sim) as llm:
        writer = _Writer(main, llm)
        await writer.turn("What is for dinner?", card)
        await writer.think()
        await writer.turn("Anything without fish?", card)
        await writer.think()
        fork_seq = writer.state.last_seq
        await writer.turn("And for dessert?", "Answer as a pastry chef.")
        await writer.think()

        history = History(_log_of(writer.events), materialize=False)
        key = StreamKey(main.tenant, main.conversation, "regen-golden")
        branch = _Writer(key, llm, _rekey(await history.state_at(main, fork_seq), key))
        branch.append(recorded_fork(MAIN_BRANCH, fork_seq, branch.prompts, reason="regenerated by the client"))
        await branch.turn("And for dessert?", card)
        await branch.think()
    assert sum(isinstance(event.payload, Instructions) for event in writer.events) == 2
    return writer.events + branch.events


RECOMPUTE_BRANCH = "rc-golden"
RECOMPUTE_CONTROLLER_LINE = "I keep my narrative to three sentences."


def recompute_prompts() -> PromptSet:
    """The built-in set with one changed template, as ``POST /v1/recompute`` makes it."""
    default = default_prompt_set()
    controller = default.templates["controller.md"] + "\n" + RECOMPUTE_CONTROLLER_LINE + "\n"
    return PromptSet("custom", {**default.templates, "controller.md": controller})


async def _recompute(sim: SimLLMServer) -> list[Event]:
    """``fork`` v2: main, two turns thought through with the built-in prompt set; branch
    ``rc-golden`` forked after the first turn's thinking and re-thought with one changed
    controller template, which its fork records (that template's text, every template's digest),
    so verify finds the branch's prompt set without being given it."""
    main = StreamKey("golden", "recompute")
    async with sim_client(sim) as llm:
        writer = _Writer(main, llm)
        await writer.turn("I am allergic to peanuts.")
        await writer.think()
        fork_seq = writer.state.last_seq
        await writer.turn("What should I cook tonight?")
        await writer.think()

        history = History(_log_of(writer.events), materialize=False)
        key = StreamKey(main.tenant, main.conversation, RECOMPUTE_BRANCH)
        branch = _Writer(key, llm, _rekey(await history.state_at(main, fork_seq), key))
        branch.prompts = recompute_prompts()
        branch.append(recorded_fork(MAIN_BRANCH, fork_seq, branch.prompts, reason="recompute"))
        await branch.turn("What should I cook tonight?")
        await branch.think()
    return writer.events + branch.events


async def _reflection(sim: SimLLMServer) -> list[Event]:
    """Reflection (``turn`` v4, ``insight`` v2, ``reflection`` v2): two turns remembered (an
    allergy, a hobby, an open question), then twenty with an insight each (one insight fails once
    and is retried); at the 22nd turn a periodic reflection is due: its decay call answers, its
    consolidation fails once (a ``thinker_failed`` carrying the decay call's answer), then the
    whole reflection runs — the careless simulator proposes FORGET for all three old beliefs, the
    ``protected`` rule keeps the allergy — and a last turn's Talker reads the portrait."""
    key = StreamKey("golden", "reflection")
    embedder = OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", max_retries=0),
                              dimensions=MEMORY_DIMENSIONS)
    async with sim_client(sim) as llm:
        writer = _Writer(key, llm)
        writer.config = dataclasses.replace(writer.config, mode="baseline", reflection=True)
        for message in ("I am allergic to peanuts. Can you suggest a snack?", "I play chess on weekends."):
            await writer.turn(message)
            assert await writer.remember(embedder)
            assert await writer.insight()
        for index in range(20):
            await writer.turn(f"Tell me something new, number {index}.")
            if index == 3:
                sim.script("malformed")
                assert not await writer.insight(), "the scripted malformed answer must fail the insight"
                assert await writer.insight(attempt=2)
            else:
                assert await writer.insight()
        triggers = due(writer.state, DEFAULT_POLICY)
        assert triggers == ("periodic",), triggers
        sim.script("ok", "500")
        assert not await writer.reflect(triggers), "the scripted 500 must fail the consolidation"
        assert await writer.reflect(due(writer.state, DEFAULT_POLICY), attempt=2)
        await writer.turn("What do you know about me?")
    await embedder.aclose()
    reflection = next(e.payload for e in writer.events if isinstance(e.payload, Reflection))
    assert reflection.accepted and reflection.decay_fingerprint, reflection
    assert [(d[1], d[2], d[3]) for d in reflection.decisions].count(("forget", "retain", "protected")) == 1, reflection
    return writer.events


PERSONA_MESSAGES = ("Hello, who are you?", "Tell me about the lighthouse.", "Do you ever get lonely out there?")


async def _persona(sim: SimLLMServer) -> list[Event]:
    """The persona mind (``persona``, ``interpretation``, ``retrieval``, ``appraisal``, ``plan``,
    ``emotion``, ``relationship``, ``goal``, ``episode``, each v1): Wren chosen, her biography
    embedded; three turns, each through the turn path (appended together, with the causation of
    the state it ran from) and then the four background steps; the second turn's emotion step
    gets a malformed answer once (a ``thinker_failed`` of stage ``emotion``) and is retried."""
    key = StreamKey("golden", "persona")
    embedder = OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", max_retries=0),
                              dimensions=MEMORY_DIMENSIONS)
    prompts = default_persona_prompts()
    async with sim_client(sim) as llm:
        writer = _Writer(key, llm)
        config = dataclasses.replace(writer.config, mode="baseline", memory=False, reflection=False)
        writer.append(await choose_persona(read_persona(EXAMPLES / "wren.json"), embedder))
        for index, message in enumerate(PERSONA_MESSAGES):
            basis = writer.state
            said = await persona_turn(basis, message, llm, embedder, prompts, config)
            for event in said.events(key, basis.last_seq + 1, basis.turn_count, writer.events[-1].id, START):
                writer._apply(dataclasses.replace(event, timestamp=START + event.seq, provenance=_steady(event.provenance)))
            for stage in PERSONA_STAGES:
                if index == 1 and stage == "emotion":
                    sim.script("malformed")
                    failed = await persona_step(writer.state, stage, llm, embedder, prompts, config)
                    assert not writer._step(failed), "the scripted malformed answer must fail the emotion step"
                    assert writer._step(await persona_step(writer.state, stage, llm, embedder, prompts, config, attempt=2))
                else:
                    assert writer._step(await persona_step(writer.state, stage, llm, embedder, prompts, config))
    await embedder.aclose()
    persona = writer.state.persona
    assert persona is not None and len(persona.episodes) == len(PERSONA_MESSAGES), persona
    assert all(isinstance(e.payload, Retrieval) and e.payload.query_embedding for e in writer.events
               if e.type == "retrieval"), "every retrieval has the query's vector"
    return writer.events


SERAPHINA = Path(__file__).resolve().parent.parent / "cards" / "default_Seraphina.png"
"""SillyTavern's default card (tests/cards/README.md): its text and lorebook say ``{{user}}`` and ``{{char}}``."""
GREETING_MESSAGES = ("Where am I? What happened to me?", "Tell me about Eldoria and the Shadowfangs.")


async def _greeting(sim: SimLLMServer) -> list[Event]:
    """Cards as front ends write them (``persona`` v2 with its ``user_name``, ``greeting`` v1):
    Seraphina chosen for a user called Ada — her lorebook recorded with the macros substituted,
    her greeting (``first_mes``) the conversation's first assistant message — and two turns
    through the turn path, each with its background steps."""
    key = StreamKey("golden", "greeting")
    prompts = default_persona_prompts()
    async with sim_client(sim) as llm:
        writer = _Writer(key, llm)
        config = dataclasses.replace(writer.config, mode="baseline", memory=False, reflection=False)
        for payload in opening(await choose_persona(read_persona(SERAPHINA), None, user_name="Ada")):
            writer.append(payload)
        for message in GREETING_MESSAGES:
            basis = writer.state
            said = await persona_turn(basis, message, llm, None, prompts, config)
            for event in said.events(key, basis.last_seq + 1, basis.turn_count, writer.events[-1].id, START):
                writer._apply(dataclasses.replace(event, timestamp=START + event.seq, provenance=_steady(event.provenance)))
            for stage in PERSONA_STAGES:
                assert writer._step(await persona_step(writer.state, stage, llm, None, prompts, config))
    state = writer.state
    assert state.greeting and "Seraphina" in state.greeting and "{{" not in state.greeting, state.greeting
    assert state.persona is not None and not any("{{" in entry for entry in state.persona.biography)
    return writer.events


def _log_of(events: Iterable[Event]) -> InMemoryEventLog:
    log = InMemoryEventLog()
    log.add(events)
    return log


def _rekey(state: ConversationState, key: StreamKey) -> ConversationState:
    return dataclasses.replace(state, key=key)


def _prototype() -> list[bytes]:
    """Turns as the prototype wrote them (``turn`` schema 1: ``user``/``assistant``, no
    provenance), then a belief and an edge: records the codec must upcast, forever."""
    key = StreamKey("golden", "prototype")
    events = [
        make_event(key, 1, Belief("tea", "assert", "The user likes tea."), timestamp=START + 1),
    ]
    records = []
    for seq, (user, assistant) in enumerate([("Hello.", "Hello! How are you?"), ("I like tea.", "Noted: tea.")], 2):
        record = msgpack.unpackb(encode(make_event(key, seq, Narrative("placeholder"), turn=seq - 2,
                                                   timestamp=START + seq)), raw=False)
        record.update(type="turn", schema=1, payload={"user": user, "assistant": assistant})
        records.append(msgpack.packb(record, use_bin_type=True))
    tail = [make_event(key, 4, Edge("tea", "eases", "stress"), turn=1, timestamp=START + 4)]
    return [encode(events[0]), *records, *(encode(event) for event in tail)]


def _divergent(conversation: list[Event]) -> list[Event]:
    """The main branch up to its first narrative, whose text was edited after the fact (the recorded
    answer in its provenance left as the model gave it): a replay must notice."""
    main = [event for event in conversation if event.branch == MAIN_BRANCH]
    first = next(index for index, event in enumerate(main) if isinstance(event.payload, Narrative))
    main = main[: first + 1]
    narrative = main[first].payload
    assert isinstance(narrative, Narrative)
    edited = dataclasses.replace(narrative, text="I was told something else entirely.")
    main[first] = dataclasses.replace(main[first], payload=edited)
    return main


async def add_log(name: str) -> None:
    """Write one new golden log and add its expected results, leaving every other log and its
    results as they are (what a new event type needs: the old logs are the past)."""
    with SimLLMServer(SimSettings()) as sim:
        events = {"memory": _memory, "recompute": _recompute, "reflection": _reflection, "persona": _persona,
                  "greeting": _greeting, "instructions": _instructions}[name]
        write_log(name, await events(sim))
    expected = json.loads(EXPECTED.read_text())
    for branch, result in (await fold_and_verify([decode(record) for record in read_log(name)])).items():
        report: VerifyReport = result["report"]
        assert report.ok and report.model_calls == 0, f"{name}/{branch} does not verify: {report.as_dict()}"
        expected.setdefault(name, {})[branch] = {"state": result["state"], "verify": verify_counts(report)}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


async def refresh_expected() -> None:
    """Fold every log in ``LOGS`` again and write its expected results, the logs untouched (for a
    change of what the projection computes from the same events)."""
    expected = json.loads(EXPECTED.read_text())
    for name in LOGS:
        for branch, result in (await fold_and_verify([decode(record) for record in read_log(name)])).items():
            report: VerifyReport = result["report"]
            assert report.ok and report.model_calls == 0, f"{name}/{branch} does not verify: {report.as_dict()}"
            expected.setdefault(name, {})[branch] = {"state": result["state"], "verify": verify_counts(report)}
    divergent = (await fold_and_verify([decode(record) for record in read_log(DIVERGENT)]))[MAIN_BRANCH]["report"]
    assert not divergent.ok
    expected[DIVERGENT] = {MAIN_BRANCH: {"diverges_at": [d.seq for d in divergent.divergences]}}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


async def regenerate() -> None:
    GOLDEN.mkdir(exist_ok=True)
    with SimLLMServer(SimSettings()) as sim:
        conversation = await _conversation(sim)
        memory = await _memory(sim)
        recompute = await _recompute(sim)
    write_log("conversation", conversation)
    write_log("memory", memory)
    write_log("recompute", recompute)
    write_records("prototype", _prototype())
    write_log(DIVERGENT, _divergent(conversation))
    expected: dict[str, Any] = {}
    for name in LOGS:
        folded = await fold_and_verify([decode(record) for record in read_log(name)])
        for branch, result in folded.items():
            report: VerifyReport = result["report"]
            assert report.ok and report.model_calls == 0, f"{name}/{branch} does not verify: {report.as_dict()}"
            expected.setdefault(name, {})[branch] = {"state": result["state"], "verify": verify_counts(report)}
    divergent = (await fold_and_verify([decode(record) for record in read_log(DIVERGENT)]))[MAIN_BRANCH]["report"]
    assert not divergent.ok
    expected[DIVERGENT] = {MAIN_BRANCH: {"diverges_at": [d.seq for d in divergent.divergences]}}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--expected"]:
        asyncio.run(refresh_expected())
    else:
        asyncio.run(add_log(sys.argv[1]) if len(sys.argv) > 1 else regenerate())
