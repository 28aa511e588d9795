"""Live conversations on a real local Ray, with real NATS, an ingester process and the simulator,
in both placements: hosted (many per conversation host) and dedicated (one actor each)."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from mirror.actors.placement import HostedConversation, conversation_handle, placement_of
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.projections.snapshot import state_from_snapshot
from tests.support.stack import PLACEMENTS, conversation_runtime, let_go, retried, run
from tests.support.waits import until_gone

RESTART_S = 120.0
"""How long a call may find its actor restarting after a kill: Ray starts a new worker process,
which takes seconds, and tens of them on a loaded machine."""


@pytest.fixture(params=PLACEMENTS)
def runtime(request: pytest.FixtureRequest, ray_cluster: None, nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="ray", latency="fixed:200",
                              placement=request.param) as settings:
        yield settings


def test_get_or_create_gives_one_actor_per_conversation(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "ray-one")
    conversation = conversation_handle(key, runtime)
    same = conversation_handle(key, runtime)
    assert run(conversation.pid()) == run(same.pid())
    reply = run(conversation.turn(TurnRequest("Hello")))
    assert reply.seq == 1
    assert run(same.wait_idle(timeout=30))
    assert run(same.summary()).turns == 1
    let_go(conversation)


def test_a_killed_actor_is_rebuilt_with_the_state_it_had_plus_finished_thinking(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "ray-crash")
    conversation = conversation_handle(key, runtime)
    run(conversation.turn(TurnRequest("I only eat vegetarian food.")))
    assert run(conversation.wait_idle(timeout=30))
    run(conversation.turn(TurnRequest("Plan lunch.")))  # its thinking is now running (200 ms per call)
    old_pid = run(conversation.pid())
    os.kill(old_pid, signal.SIGKILL)  # the worker process dies mid-thought
    until_gone(old_pid, "the killed conversation's worker")  # so what is asked next reaches its successor
    conversation = conversation_handle(key, runtime)  # restarted by Ray (max_restarts) or re-created
    assert retried(conversation.pid, retry_for_s=RESTART_S) != old_pid  # its successor, once Ray has restarted it
    assert retried(lambda: conversation.wait_idle(timeout=60))  # the unthought turn is thought through after rebuild
    state = state_from_snapshot(retried(conversation.state_bytes))
    assert state.turn_count == 2 and state.thought_turn == 1 and state.narrative
    reply = retried(lambda: conversation.turn(TurnRequest("And dinner?")))
    # the turn follows the state, after the recall the Talker answered from when there was one
    assert reply.seq == (reply.recall_seq or state.last_seq) + 1
    assert reply.recall_seq in (None, state.last_seq + 1)
    let_go(conversation)


def test_a_crashed_host_takes_no_state_and_no_neighbour_with_it(ray_cluster: None, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """Kill -9 one of two hosts mid-conversation: each of its conversations re-activates from the
    log with every acknowledged turn; the other host's conversations never notice (same process)."""
    with conversation_runtime(nats_server.url, tmp_path, shard="hostcrash", latency="fixed:20",
                              placement="hosted", hosts=2, mode="controller_only") as runtime:
        placement = placement_of(runtime)
        keys = [StreamKey("acme", f"crash-{index}") for index in range(12)]
        handles = [conversation_handle(key, runtime) for key in keys]
        assert all(isinstance(handle, HostedConversation) for handle in handles)
        refs = [handle for handle in handles if isinstance(handle, HostedConversation)]
        for ref in refs:
            assert retried(functools.partial(ref.turn, TurnRequest("My name is Ada.", sync=True))).turn == 0
        victim_slot = refs[0].slot
        survivors_pid = {ref.slot: run(ref.pid()) for ref in refs if ref.slot != victim_slot}
        assert survivors_pid, "the twelve conversations all hashed to one host"
        victim_pid = ray.get(placement.host(victim_slot).pid.remote())
        os.kill(victim_pid, signal.SIGKILL)
        until_gone(victim_pid, "the killed host")  # so the next turns reach its successor
        replies = [retried(functools.partial(ref.turn, TurnRequest("What is my name?", sync=True)), retry_for_s=RESTART_S)
                   for ref in refs]
        assert [reply.turn for reply in replies] == [1] * len(refs)  # nothing acknowledged was lost
        for ref in refs:
            state = state_from_snapshot(retried(ref.state_bytes))
            assert state.turn_count == 2
            if ref.slot != victim_slot:
                assert run(ref.pid()) == survivors_pid[ref.slot]
        restarted = ray.get(placement.host(victim_slot).stats.remote())
        assert restarted["activations"] == sum(ref.slot == victim_slot for ref in refs)  # re-activated from the log
