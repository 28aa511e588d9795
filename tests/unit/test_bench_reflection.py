"""`mirror bench reflection`'s pure parts: the scripted user, CPU by process role, and the figures
it reads from the log and the state (the bench itself, on a real stack:
``tests/system/test_bench_reflection.py``)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Insight, Narrative, Provenance, Reflection, ThinkerFailed, Turn
from mirror.harness.bench._cpu import CLOCK_TICKS, OTHER, CpuSpent, by_role, descendants, parse_stat, role_of
from mirror.harness.bench._script import SAFETY, SAFETY_EVERY, script
from mirror.harness.bench.reflection import (
    ReflectionBenchConfig,
    answered_late_share,
    backlog,
    comparison,
    latency_figures,
    reflection_figures,
)
from mirror.projections.state import Counters, initial_state

KEY = StreamKey("t", "bench")
PROVENANCE = Provenance(model="m", prompt_set="p", request_fingerprint="0" * 64, latency_ms=100.0)


# ---------------------------------------------------------------------------- the scripted user

def test_the_script_is_a_pure_function_of_its_length_and_seed() -> None:
    messages = script(300, seed=3)
    assert len(messages) == 300 and all(isinstance(message, str) and message for message in messages)
    assert script(300, seed=3) == messages
    assert script(120, seed=3) == messages[:120]  # a shorter run hears the same first turns
    assert script(300, seed=4) != messages


def test_the_script_states_safety_constraints_early_and_restates_one_now_and_then() -> None:
    messages = script(1_000)
    assert [messages[1], messages[4], messages[7]] == list(SAFETY)
    for index in range(SAFETY_EVERY, 1_000, SAFETY_EVERY):
        assert messages[index].startswith("Please remember: ") and messages[index].split(": ", 1)[1] in SAFETY


def test_the_script_mixes_facts_questions_restatements_contradictions_and_small_talk() -> None:
    messages = script(1_000)
    questions = [message for message in messages if message.endswith("?")]
    restated = [message for message in messages if message.startswith("As I told you before: ")]
    contradicted = [message for message in messages if message.startswith("Actually that is not true any more")]
    small_talk = [message for message in messages if len(message.split()) < 3]
    assert min(len(questions), len(restated), len(small_talk)) > 80 and len(contradicted) > 20
    assert all(message.split(": ", 1)[1] in messages for message in restated)  # a restatement repeats a fact said before
    assert len(set(messages)) > 500  # most facts are new: beliefs accumulate and age


# ---------------------------------------------------------------------------- CPU by role

def test_a_stat_line_is_read_after_the_last_parenthesis_of_the_command() -> None:
    fields = ["S", "41", *["0"] * 9, "250", "50", *["0"] * 6, "9876"]  # state, ppid, …, utime, stime, …, starttime
    times = parse_stat(b"123 (ray::Conv (odd) name) " + " ".join(fields).encode())
    assert times.ppid == 41 and times.started == 9876
    assert times.cpu_s == pytest.approx(300 / CLOCK_TICKS)


def test_processes_are_told_apart_by_their_command_line() -> None:
    assert role_of("ray::ConversationHost.turn ") == "conversations"
    assert role_of("ray::ConversationActor") == "conversations"
    assert role_of("ray::GatewayActor") == "gateway"
    assert role_of("ray::IngesterActor") == "ingester"
    assert role_of("/venv/bin/nats-server --jetstream --port 4222") == "nats"
    assert role_of("/venv/bin/python -m mirror sim-llm --port 9 --latency fixed:100") == "simulator"
    assert role_of("/venv/lib/ray/core/src/ray/raylet/raylet --raylet_socket_name=x") == OTHER
    assert role_of("ray::IDLE") == OTHER


def test_cpu_by_role_counts_newborn_processes_from_zero_and_reports_exited_ones() -> None:
    before = {(1, 10): (2.0, "conversations"), (2, 10): (1.0, "nats"), (3, 10): (5.0, OTHER)}
    after = {(1, 10): (2.5, "conversations"), (2, 10): (1.25, "nats"), (4, 20): (0.5, "conversations"),
             (3, 99): (0.25, OTHER)}  # pid 3 reused by a new process: counted from zero, the old one exited
    spent, exited = by_role(before, after)
    assert spent["conversations"] == pytest.approx(1.0) and spent["nats"] == pytest.approx(0.25)
    assert spent[OTHER] == pytest.approx(0.25) and spent["gateway"] == 0.0
    assert exited == 1


def test_cpu_spent_per_turn_and_above_the_idle_rate() -> None:
    spent = CpuSpent({"conversations": 3.0, "gateway": 1.0, "ingester": 2.0, "nats": 0.5, "simulator": 1.0,
                      OTHER: 4.0, "load_generator": 0.5}, exited=0, wall_s=100.0)
    per = spent.ms_per(100)
    assert per["conversations"] == 30.0 and per["mirror"] == 65.0 and per["all"] == 120.0
    idle = CpuSpent({"conversations": 0.1, "gateway": 0.0, "ingester": 0.05, "nats": 0.0, "simulator": 0.0,
                     OTHER: 0.4, "load_generator": 0.0}, exited=0, wall_s=10.0)
    assert idle.ms_per_second()["conversations"] == 10.0
    pooled = idle.plus(CpuSpent({"conversations": 0.3, "gateway": 0.0, "ingester": 0.05, "nats": 0.0, "simulator": 0.0,
                                 OTHER: 0.4, "load_generator": 0.0}, exited=1, wall_s=10.0))
    assert pooled.wall_s == 20.0 and pooled.exited == 1 and pooled.ms_per_second()["conversations"] == 20.0
    active = spent.above(idle).ms_per(100)
    assert active["conversations"] == pytest.approx(20.0) and active["ingester"] == pytest.approx(15.0)
    assert active[OTHER] == pytest.approx(0.0) and active["mirror"] == pytest.approx(50.0)


def test_this_process_has_no_children_to_count_here() -> None:
    assert all(pid != os.getpid() for pid, _ in descendants(os.getpid()))


# ---------------------------------------------------------------------------- figures from the log and the state

def _reflection(seq: int, turn: int, *, accepted: bool = True, warning: str = "", triggers: tuple[str, ...] = ("periodic",),
                decisions: tuple[tuple[str, str, str, str], ...] = ()) -> Event:
    payload = Reflection("I know them.", accepted, "" if accepted else "too short", warning=warning, for_turn=turn,
                         triggers=triggers, decisions=decisions, decay_ms=50.0 if decisions else 0.0)
    return make_event(KEY, seq, payload, turn=turn, provenance=PROVENANCE)


def test_reflection_figures_count_what_the_log_holds() -> None:
    events = [
        make_event(KEY, 1, Insight("They told me: hi.", for_turn=9), turn=9, provenance=PROVENANCE),
        _reflection(2, 9, triggers=("belief_burst", "review"), decisions=(
            ("b1", "forget", "retain", "protected"), ("b2", "forget", "forget", ""), ("b3", "decay", "decay", ""),
            ("b4", "forget", "retain", "strong"), ("b5", "retain", "retain", ""))),
        make_event(KEY, 3, ThinkerFailed("reflection", "timeout", "slow", 1, 19), turn=19, provenance=PROVENANCE),
        _reflection(4, 19, accepted=False, warning="repetitive", decisions=(("b6", "forget", "retain", "protected"),)),
        make_event(KEY, 5, ThinkerFailed("insight", "bad_json", "?", 1, 20), turn=20, provenance=PROVENANCE),
    ]
    figures = reflection_figures(events)
    assert figures["reflections"] == 2 and figures["rejected"] == 1 and figures["warnings"] == 1
    assert figures["overruled"] == 3 and figures["overruled_by_rule"] == {"protected": 2, "strong": 1}
    assert figures["decisions"] == 6 and figures["decayed"] == 1 and figures["forgotten"] == 1
    assert figures["triggers"] == {"belief_burst": 1, "periodic": 1, "review": 1}
    assert figures["reflection_turns"] == [9, 19]
    assert figures["rejected_reasons"] == {"too short": 1}
    assert figures["insights"] == 1 and figures["failures_by_stage"] == {"insight": 1, "reflection": 1}
    assert figures["reflection_model_ms"] == 100.0 * 3 + 50.0 * 2  # the insight and both reflections, and two decay calls


def test_the_backlog_counts_turns_each_stage_is_behind_the_newest() -> None:
    state = replace(initial_state(KEY), turn_count=50, thought_turn=48, memory_turn=47, insight_turn=None,
                    reflection=True, counters=Counters(turns_since_reflection=12))
    assert backlog(state) == {"thinking": 1, "memory": 2, "insight": 50, "not_reflected_on": 12}
    current = replace(state, thought_turn=49, memory_turn=49, insight_turn=49)
    assert backlog(current) == {"thinking": 0, "memory": 0, "insight": 0, "not_reflected_on": 12}
    assert backlog(replace(current, reflection=False))["not_reflected_on"] == 0


def test_a_turn_answered_from_an_older_narrative_arrived_while_thinking_ran() -> None:
    events = [
        make_event(KEY, 1, Turn("a", "b"), turn=0),
        make_event(KEY, 2, Narrative("n0", monologue_seq=None), turn=0),
        make_event(KEY, 3, Turn("c", "d", narrative_seq=2), turn=1),  # saw turn 0's narrative: in time
        make_event(KEY, 4, Turn("e", "f", narrative_seq=2), turn=2),  # turn 1 not thought yet: late
        make_event(KEY, 5, Narrative("n2", monologue_seq=None), turn=2),
        make_event(KEY, 6, Turn("g", "h", narrative_seq=5), turn=3),
    ]
    assert answered_late_share(events) == round(1 / 3, 3)
    assert answered_late_share([]) == 0.0


def test_latency_figures_take_the_talkers_call_out_of_the_overhead() -> None:
    answered = [(110.0 + index, {"llm_ms": 100.0, "timings": {}}) for index in range(10)]
    figures = latency_figures(answered)
    assert figures["latency_p50_ms"] == 114.5 and figures["latency_p90_ms"] == 119.0
    assert figures["overhead_p50_ms"] == 14.5 and figures["llm_call_p50_ms"] == 100.0


def _run(roles: dict[str, float], idle: dict[str, float], latency: float, calls: float, events: float) -> dict[str, object]:
    """A run's figures: CPU ms per turn by role over 100 turns in 50 s, idle ms per second by role."""
    mirror = sum(roles.values())
    return {
        "turns": 100, "cpu_window_s": 50.0, "cpu_ms_per_turn": {**roles, "mirror": mirror},
        "cpu_idle_ms_per_s": {**idle, "mirror": sum(idle.values())},
        "latency_p50_ms": latency, "latency_p90_ms": latency * 1.5, "overhead_p50_ms": latency - 100.0,
        "chat_calls_per_turn": calls, "embedding_calls_per_turn": 1.0, "events_per_turn": events,
    }


OFF_ROLES = {"conversations": 40.0, "gateway": 20.0, "ingester": 30.0, "nats": 10.0}
IDLE = {"conversations": 10.0, "gateway": 40.0, "ingester": 20.0, "nats": 0.0}  # ms/s: at 0.5 s a turn, half that a turn


def test_the_comparison_takes_the_pooled_idle_rate_off_both_runs() -> None:
    on = _run({"conversations": 44.0, "gateway": 20.0, "ingester": 40.0, "nats": 12.0}, IDLE, 121.5, 5.4, 7.0)
    off = _run(OFF_ROLES, {role: rate / 2 for role, rate in IDLE.items()}, 120.0, 4.4, 6.0)
    met = comparison(on, off)
    assert met["idle_cpu_ms_per_s"]["gateway"] == 30.0 and met["idle_cpu_ms_per_s"]["mirror"] == 52.5  # pooled
    assert met["cpu_ms_per_turn_on"] == 116.0 and met["cpu_ms_per_turn_off"] == 100.0 and met["cpu_added_share"] == 0.16
    assert met["cpu_ms_per_turn_above_idle_off"] == 100.0 - 52.5 / 2 and met["cpu_ms_per_turn_above_idle_on"] == 116.0 - 52.5 / 2
    assert met["cpu_added_share_above_idle"] == round(16.0 / 73.75, 3)  # the difference as measured, over less
    added = met["added_per_turn"]
    assert added["cpu_ms_by_role"] == {"conversations": 4.0, "gateway": 0.0, "ingester": 10.0, "nats": 2.0, "mirror": 16.0}
    assert added["chat_calls"] == 1.0 and added["events"] == 1.0
    cost = met["added_cost"]
    assert cost["ingester_ms_per_added_event"] == 10.0 and cost["nats_ms_per_added_event"] == 2.0
    assert cost["conversations_ms_per_added_chat_call"] == 4.0 and cost["insight_floor_ms_per_turn"] == 16.0
    assert cost["insight_floor_share_above_idle"] == round(16.0 / 73.75, 3)
    assert met["latency_added_p50_ms"] == 1.5 and met["targets"]["latency_met"]
    assert met["targets"]["cpu_met_as_measured"] and not met["targets"]["cpu_met"]  # 0.16 as measured, 0.217 above idle


def test_the_targets_are_missed_when_reflection_adds_too_much() -> None:
    on = _run({"conversations": 60.0, "gateway": 20.0, "ingester": 40.0, "nats": 12.0}, IDLE, 123.0, 5.4, 7.0)
    missed = comparison(on, _run(OFF_ROLES, IDLE, 120.0, 4.4, 6.0))
    assert missed["cpu_added_share"] > 0.2 and missed["cpu_added_share_above_idle"] > missed["cpu_added_share"]
    assert not missed["targets"]["cpu_met"] and not missed["targets"]["cpu_met_as_measured"]
    assert not missed["targets"]["latency_met"]
    nothing_added = comparison(_run(OFF_ROLES, IDLE, 120.0, 4.4, 6.0), _run(OFF_ROLES, IDLE, 120.0, 4.4, 6.0))
    assert nothing_added["added_cost"]["insight_floor_ms_per_turn"] is None  # no added call or event to price
    assert nothing_added["targets"]["cpu_met"] and nothing_added["cpu_added_share"] == 0.0


def test_the_bench_lifts_only_the_hourly_cap_of_the_default_policy() -> None:
    policy = ReflectionBenchConfig(max_per_hour=500).policy
    assert policy.max_per_hour == 500
    assert replace(policy, max_per_hour=6) == ReflectionBenchConfig(max_per_hour=6).policy
    assert policy.every == 20 and policy.cooldown == 10
