"""Model-based: random conversations through the real runtime, then time travel to every seq.

A Hypothesis state machine drives a live :class:`Conversation` (real NATS, a real ingester
process writing DuckDB, the simulator over HTTP, injected model faults, restarts that rebuild
from the log) and notes the state the conversation held after each event it saw. At the end,
for every seq k, ``History.state_at(k)`` — snapshots every few events plus the tail — must
equal the state the conversation held right after event k (and, for events that landed inside
one append, the fold of the prefix).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import LLMError
from mirror.cognition.turn import TurnRequest
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import History
from tests.support.machines import ConversationMachine
from tests.support.stack import conversation_runtime, nats_of

MESSAGES = ("I never eat peanuts.", "Tell me about rivers.", "What did I say about food?", "Plan a picnic.",
            "Why?", "Thanks, that helps.")


@pytest.fixture(scope="module")
def runtime(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeSettings]:
    directory = tmp_path_factory.mktemp("replay-machine")
    with conversation_runtime(nats_server.url, directory, shard="replaymachine", snapshot_every=4) as settings:
        yield settings


def test_state_at_every_seq_equals_what_the_actor_held(runtime: RuntimeSettings) -> None:
    sim_admin = runtime.llm.base_url.removesuffix("/v1")

    class TimeTravel(ConversationMachine):
        live_runtime = runtime
        tenant = "machine"

        def __init__(self) -> None:
            super().__init__()
            self.held: dict[int, ConversationState] = {}

        def note(self) -> None:
            state = self.conversation.state
            self.held[state.last_seq] = state

        @rule(message=st.sampled_from(MESSAGES), sync=st.booleans())
        def turn(self, message: str, sync: bool) -> None:
            try:
                self.run(self.conversation.turn(TurnRequest(message, sync=sync)))
            except LLMError:
                pass  # a fault met the Talker: the turn is refused and nothing is appended
            self.note()

        @rule()
        def thinking_done(self) -> None:
            assert self.run(self.conversation.wait_idle(60))
            self.note()

        @rule(kind=st.sampled_from(["garbage", "500", "empty"]))
        def model_fault(self, kind: str) -> None:
            # max_retries=1 in these settings: two 500s make one failed call.
            faults = [kind, kind] if kind == "500" else [kind]
            httpx.post(f"{sim_admin}/_sim/script", json={"faults": faults}).raise_for_status()

        @rule()
        def restart(self) -> None:
            before = self.conversation.state
            self.run(self.conversation.stop())
            self.conversation = self.run(Conversation(self.key, runtime).start())
            assert self.conversation.state.last_seq >= before.last_seq
            self.note()

        @invariant()
        def held_states_are_consistent(self) -> None:
            state = self.conversation.state
            assert self.held.get(state.last_seq, state) == state

        def teardown(self) -> None:
            try:
                self.run(self.conversation.wait_idle(60))
                self.note()
                self.run(self.conversation.stop())
                self.run(self.check())
                httpx.post(f"{sim_admin}/_sim/reset", json={}).raise_for_status()
            finally:
                self.loop.close()

        async def check(self) -> None:
            bus = await JetStreamBus.connect(nats_of(runtime).url)
            try:
                log = LogClient(bus.nc, shard=nats_of(runtime).shard)
                assert await log.wait_committed((await bus.head(self.key)).fence, timeout=30)
                events = await log.read(self.key)
                history = History(log, snapshot_every=3)
                for k in range(len(events) + 1):
                    expected = self.held.get(k) or (fold(events[:k]) if k else initial_state(self.key))
                    assert await history.state_at(self.key, k) == expected, f"state_at({k})"
                if events:
                    assert self.held[events[-1].seq] == fold(events)
            finally:
                await bus.close()

    run_state_machine_as_test(
        TimeTravel, settings=settings(max_examples=25, stateful_step_count=10, deadline=None)
    )
