"""Live conversations on a real local Ray, with real NATS, an ingester process and the simulator,
in both placements: hosted (many per conversation host) and dedicated (one actor each)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from mirror.actors.conversation import RuntimeSettings
from mirror.actors.conversation_actor import call
from mirror.actors.placement import conversation_ref, placement_of
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.projections.snapshot import state_from_snapshot
from tests.support.stack import PLACEMENTS, conversation_runtime, let_go
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
    actor = conversation_ref(key, runtime)
    same = conversation_ref(key, runtime)
    assert ray.get(actor.pid.remote()) == ray.get(same.pid.remote())
    reply = ray.get(actor.turn.remote("Hello"))
    assert reply.seq == 1
    assert ray.get(same.wait_idle.remote(30))
    assert ray.get(same.summary.remote()).turns == 1
    let_go(actor)


def test_a_killed_actor_is_rebuilt_with_the_state_it_had_plus_finished_thinking(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "ray-crash")
    actor = conversation_ref(key, runtime)
    ray.get(actor.turn.remote("I only eat vegetarian food."))
    assert ray.get(actor.wait_idle.remote(30))
    ray.get(actor.turn.remote("Plan lunch."))  # its thinking is now running (200 ms per call)
    old_pid = ray.get(actor.pid.remote())
    os.kill(old_pid, signal.SIGKILL)  # the worker process dies mid-thought
    until_gone(old_pid, "the killed conversation's worker")  # so what is asked next reaches its successor
    actor = conversation_ref(key, runtime)  # restarted by Ray (max_restarts) or re-created
    assert call(actor.pid, retry_for_s=RESTART_S) != old_pid  # its successor, once Ray has restarted it
    assert call(actor.wait_idle, 60)  # the unthought turn is thought through after rebuild
    state = state_from_snapshot(call(actor.state_bytes))
    assert state.turn_count == 2 and state.thought_turn == 1 and state.narrative
    reply = call(actor.turn, "And dinner?")
    # the turn follows the state, after the recall the Talker answered from when there was one
    assert reply.seq == (reply.recall_seq or state.last_seq) + 1
    assert reply.recall_seq in (None, state.last_seq + 1)
    let_go(actor)


def test_a_crashed_host_takes_no_state_and_no_neighbour_with_it(ray_cluster: None, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """Kill -9 one of two hosts mid-conversation: each of its conversations re-activates from the
    log with every acknowledged turn; the other host's conversations never notice (same process)."""
    with conversation_runtime(nats_server.url, tmp_path, shard="hostcrash", latency="fixed:20",
                              placement="hosted", hosts=2, mode="controller_only") as runtime:
        placement = placement_of(runtime)
        keys = [StreamKey("acme", f"crash-{index}") for index in range(12)]
        refs = [conversation_ref(key, runtime) for key in keys]
        for ref in refs:
            assert call(ref.turn, "My name is Ada.", True).turn == 0
        victim_slot = refs[0].slot
        survivors_pid = {ref.slot: ray.get(ref.pid.remote()) for ref in refs if ref.slot != victim_slot}
        assert survivors_pid, "the twelve conversations all hashed to one host"
        victim_pid = ray.get(placement.host(victim_slot).pid.remote())
        os.kill(victim_pid, signal.SIGKILL)
        until_gone(victim_pid, "the killed host")  # so the next turns reach its successor
        replies = [call(ref.turn, "What is my name?", True, retry_for_s=RESTART_S) for ref in refs]
        assert [reply.turn for reply in replies] == [1] * len(refs)  # nothing acknowledged was lost
        for ref in refs:
            state = state_from_snapshot(call(ref.state_bytes))
            assert state.turn_count == 2
            if ref.slot != victim_slot:
                assert ray.get(ref.pid.remote()) == survivors_pid[ref.slot]
        restarted = ray.get(placement.host(victim_slot).stats.remote())
        assert restarted["activations"] == sum(ref.slot == victim_slot for ref in refs)  # re-activated from the log
