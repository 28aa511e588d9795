"""Reflection over a long conversation (issue 23): 100+ turns on the in-memory infrastructure with
the real simulator over loopback HTTP failing a quarter of reflection's calls (insight, decay,
portrait): reflections land where the policy says, failures are retried and never leave half a
reflection, ``replay verify`` re-runs all of it with zero model and embedding calls, and a
recompute with a changed ``reflect.md`` gives a branch whose portraits differ and whose turns do not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from mirror.actors.clients import memory_embedder
from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import ReflectionRefused
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.prompts import PromptSet, default_prompt_set
from mirror.cognition.reflection import DEFAULT_POLICY, due
from mirror.cognition.turn import TurnRequest
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Reflection, ThinkerFailed, Turn
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import History, RecomputePlan, recompute_conversation
from mirror.replay.verify_log import verify_branch
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.sim import SIM_MODEL

KEY = StreamKey("acme", "reflective")
TURNS = 105
REFLECTION_SCHEMAS = ("reflection_insight", "reflection_decay", "reflection_portrait")
MESSAGES = (
    "I am allergic to peanuts and carry an epipen.", "I live in Lisbon with my sister.",
    "I love hiking in the mountains on weekends.", "Do you know a good trail near Sintra?",
    "My job is stressful because of deadlines.", "I do not like coffee.", "I like coffee a lot now.",
    "My sister is called Ines.", "I started learning the cello.", "Tell me a joke about cellos.",
)
ATTEMPTS = 3


@pytest.fixture
def faulty_sim() -> Iterator[SimLLMServer]:
    """A simulator that fails a quarter of reflection's calls (and none of the others)."""
    with SimLLMServer(SimSettings(fault_rates=(("500", 0.25),), fault_schemas=REFLECTION_SCHEMAS, seed=5)) as server:
        yield server


@pytest.fixture
async def stack(faulty_sim: SimLLMServer) -> AsyncIterator[tuple[LocalPlacement, InMemoryInfrastructure, RuntimeSettings]]:
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=faulty_sim.base_url, model=SIM_MODEL, max_retries=0,
                                                           backoff_initial_s=0.01),
                               thinking_attempts=ATTEMPTS, reflection=True)
    local = LocalPlacement(settings)
    try:
        yield local, infrastructure, settings
    finally:
        await local.close()


def _settled_states(events: list[Event]) -> list[tuple[int, ConversationState]]:
    """The state just before each turn after the first (the previous turn's stages all done: the
    turns were sync), with that previous turn's number."""
    state, settled = initial_state(KEY), []
    for event in events:
        if isinstance(event.payload, Turn) and state.turn_count:
            settled.append((state.turn_count - 1, state))
        state = apply(state, event)
    return [*settled, (state.turn_count - 1, state)]


async def test_a_hundred_turns_reflect_where_due_replay_without_calls_and_recompute_other_portraits(
    faulty_sim: SimLLMServer, stack: tuple[LocalPlacement, InMemoryInfrastructure, RuntimeSettings],
) -> None:
    local, infrastructure, settings = stack
    conversation = local.handle(KEY)
    refused: list[ReflectionRefused] = []
    forced_at: list[int] = []
    for index in range(TURNS):
        await conversation.turn(TurnRequest(f"{MESSAGES[index % len(MESSAGES)]} (turn {index})", sync=True))
        if index in (4, 57, 83):  # a user forcing reflections: one in the cooldown, the others when allowed
            assert await conversation.wait_idle(timeout=60)
            try:
                result = await conversation.reflect()
                forced_at.append(index)
                assert result.triggers[0] == "forced" and result.for_turn == index
            except ReflectionRefused as refusal:
                refused.append(refusal)
    assert await conversation.wait_idle(timeout=60)
    assert [(r.reason, r.turns_left) for r in refused][:1] == [("cooldown", 5)]  # turn 4: five more turns first

    events = await infrastructure.event_log.read(KEY)
    reflections = [e for e in events if isinstance(e.payload, Reflection)]
    outcomes = [e.payload for e in reflections if isinstance(e.payload, Reflection)]  # typed, for what follows
    failures = [e.payload for e in events if isinstance(e.payload, ThinkerFailed)]
    assert {f.stage for f in failures} <= {"insight", "reflection"}  # the faults hit reflection's calls only
    assert any(f.stage == "reflection" for f in failures) and any(f.stage == "insight" for f in failures)
    assert len(reflections) >= 5 and forced_at

    # Where the policy says: every reflection was due (or forced) from the state it started from, and
    # after each turn's stages nothing was left due, unless that turn's reflection was given up.
    by_turn: dict[int, int] = {}
    for failure in failures:
        if failure.stage == "reflection":
            by_turn[failure.for_turn or 0] = by_turn.get(failure.for_turn or 0, 0) + 1
    for turn, state in _settled_states(events):
        assert not due(state, DEFAULT_POLICY) or by_turn.get(turn, 0) >= ATTEMPTS, f"a reflection due after turn {turn}"
    turns_since = 0
    for event in events:
        if isinstance(event.payload, Turn):
            turns_since += 1
        elif isinstance(event.payload, Reflection):
            assert turns_since >= DEFAULT_POLICY.cooldown
            turns_since = 0
    portrait = [payload.portrait for payload in outcomes if payload.accepted][-1]
    assert "They told me: I am allergic to peanuts" in portrait  # it mentions what the user said

    # replay verify: every insight and reflection re-run, no divergence, no call to the model or the embedder.
    before = faulty_sim.stats()
    report = await verify_branch(History(infrastructure.event_log, materialize=False), KEY)
    assert report.ok, [d.as_dict() for d in report.divergences[:3]]
    assert report.model_calls == 0 and report.embedding_calls == 0 and faulty_sim.stats()["calls"] == before["calls"]
    assert report.steps >= TURNS * 3

    # recompute with a reflect.md asking for a twelve-word portrait: other portraits, the same turns.
    default = default_prompt_set()
    changed = default.templates["reflect.md"].replace("at most $max_words words", "at most 12 words")
    assert changed != default.templates["reflect.md"]
    prompts = PromptSet("brief", {**default.templates, "reflect.md": changed})
    llm, embedder = OpenAIChatClient(settings.llm), memory_embedder(settings)
    try:
        recomputed = await recompute_conversation(KEY, RecomputePlan(prompts, branch="brief"),
                                              history=History(infrastructure.event_log, materialize=False),
                                              bus=infrastructure.bus, live=llm, embedder=embedder)
    finally:
        await llm.aclose()
        if embedder is not None:
            await embedder.aclose()
    assert recomputed.error is None
    branch = await infrastructure.event_log.read(StreamKey(KEY.tenant, KEY.conversation, "brief"))
    parent_turns = [(e.payload.user_message, e.payload.reply) for e in events if isinstance(e.payload, Turn)]
    branch_turns = [(e.payload.user_message, e.payload.reply) for e in branch if isinstance(e.payload, Turn)]
    assert branch_turns == parent_turns  # recorded replies are kept
    branch_portraits = [e.payload.portrait for e in branch if isinstance(e.payload, Reflection)]
    assert branch_portraits and all(len(p.split()) <= 12 for p in branch_portraits)
    assert branch_portraits != [payload.portrait for payload in outcomes]
