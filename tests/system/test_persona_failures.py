"""A persona whose background steps fail now and then: each failure is a ``thinker_failed`` of
its stage, the previous emotion / goals stay in force, the step is tried again on its own, and
the other steps go on (no error chaining). In-memory infrastructure, the simulator over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.persona import EXAMPLES, read_persona
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import EmotionUpdate, Episode, GoalUpdate, RelationshipUpdate, ThinkerFailed, Turn
from mirror.projections.conversation import apply
from mirror.projections.state import initial_state
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.sim import SIM_MODEL

KEY = StreamKey("acme", "shaky-wren")
ATTEMPTS = 3
TURNS = 8
FAILING = ("persona_emotion", "persona_goal")


@pytest.fixture
def faulty_sim() -> Iterator[SimLLMServer]:
    with SimLLMServer(SimSettings(fault_rates=(("500", 0.5),), fault_schemas=FAILING, seed=11)) as server:
        yield server


@pytest.fixture
async def stack(faulty_sim: SimLLMServer) -> AsyncIterator[tuple[LocalPlacement, InMemoryInfrastructure]]:
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=faulty_sim.base_url, model=SIM_MODEL, max_retries=0,
                                                           backoff_initial_s=0.01),
                               thinking_attempts=ATTEMPTS, reflection=False)
    local = LocalPlacement(settings)
    try:
        yield local, infrastructure
    finally:
        await local.close()


async def test_a_failed_background_step_keeps_the_previous_state_and_the_others_go_on(
    stack: tuple[LocalPlacement, InMemoryInfrastructure],
) -> None:
    local, infrastructure = stack
    conversation = local.handle(KEY)
    wren = MindChoice("persona", read_persona(EXAMPLES / "wren.json"))
    for index in range(TURNS):
        await conversation.turn(TurnRequest(f"Message {index}: the lighthouse keeper is worried.", sync=True, mind=wren if index == 0 else None))
    assert await conversation.wait_idle(timeout=60)
    events = await infrastructure.event_log.read(KEY)
    failures = [e.payload for e in events if isinstance(e.payload, ThinkerFailed)]
    assert failures and {f.stage for f in failures} <= {"emotion", "goal"}  # only the failing schemas' steps
    state = initial_state(KEY)
    for event in events:
        after = apply(state, event)
        if isinstance(event.payload, ThinkerFailed):
            assert after.persona is not None and state.persona is not None
            assert after.persona.emotions == state.persona.emotions  # the previous emotions stay in force
            assert (after.persona.hard_met, after.persona.soft_goals) == (state.persona.hard_met, state.persona.soft_goals)
        state = after
    # Every turn got its relationship and episode whatever happened to emotion and goal.
    for done_kind in (RelationshipUpdate, Episode):
        assert sorted(e.payload.for_turn for e in events if isinstance(e.payload, done_kind)) == list(range(TURNS))
    updates: tuple[tuple[type, str], ...] = ((EmotionUpdate, "emotion"), (GoalUpdate, "goal"))
    for kind, stage in updates:
        for turn in range(TURNS):
            done = any(isinstance(e.payload, kind) and getattr(e.payload, "for_turn", None) == turn for e in events)
            tries = [f for f in failures if f.stage == stage and f.for_turn == turn]
            # Tried again on its own until it worked, or given up for that turn after ATTEMPTS failures.
            assert done or len(tries) == ATTEMPTS, (stage, turn, tries)
            assert [f.attempt for f in tries] == list(range(1, len(tries) + 1))
    assert sum(isinstance(e.payload, Turn) for e in events) == TURNS
