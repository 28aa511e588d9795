"""`mirror up` as a user runs it: a real process with NATS, Ray, the ingester actor, the simulator and the gateway."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.support.up import ctrl_c, start_up


def sigterm(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(90)


def turn(stack: dict, conversation: str, message: str) -> dict:
    reply = httpx.post(f"{stack['url']}/v1/conversations/{conversation}/turns?sync=true", json={"message": message},
                       headers={"Authorization": f"Bearer {stack['token']}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def get(stack: dict, path: str, until=lambda answer: True) -> dict:
    """GET until it answers 200 and ``until`` holds (503 while the ingester restarts)."""
    deadline = time.monotonic() + 60
    while True:
        answer = httpx.get(f"{stack['url']}{path}", headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
        if answer.status_code == 200 and until(answer.json()):
            return answer.json()
        assert answer.status_code in (200, 503) and time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def committed_events(stack: dict, conversation: str, at_least: int) -> list[dict]:
    """The conversation's events from the log (committed by the ingester), once there are ``at_least``."""
    return get(stack, f"/v1/conversations/{conversation}/events?limit=1000",
               until=lambda answer: len(answer["events"]) >= at_least)["events"]


def ingester_pids(data: Path) -> list[int]:
    return [int(pid) for pid in re.findall(r"ingester-0 runs in Ray worker pid (\d+)", (data / "ingester.log").read_text())]


def test_up_serves_turns_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log)
    replies = []
    try:
        assert stack["nats_sync"] == "always"  # acknowledged means fsynced, unless --nats-sync relaxes it
        assert 'sync_interval: "always"' in (data / "nats" / "nats-server.conf").read_text()
        replies.append(turn(stack, "first", "hello"))
        assert replies[0]["seq"] == 1
        # The ingester is a Ray actor in a Ray worker, not a child process of `mirror up`.
        (pid,) = ingester_pids(data)
        assert "IngesterActor" in Path(f"/proc/{pid}/cmdline").read_text()
        os.kill(pid, signal.SIGKILL)
        replies.append(turn(stack, "first", "still there?"))  # turns go on while Ray restarts it
        committed_events(stack, "first", get(stack, "/v1/conversations/first")["last_seq"])
        assert len(ingester_pids(data)) == 2  # restarted by Ray, in another worker
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
    assert not (data / "stack.json").exists()
    duckdb.connect(str(data / "mirror.duckdb")).close()  # stopped cleanly: no process holds the file

    process, again = start_up(data, log)  # the same data: the same tenant token, the same conversation
    try:
        assert again["token"] == stack["token"]
        replies.append(turn(again, "first", "again"))
        assert replies[-1]["turn"] == 2  # continued where it stopped
        events = committed_events(again, "first", replies[-1]["seq"])
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))  # no gap, no double
        said = [event["payload"]["reply"] for event in events if event["type"] == "turn"]
        assert said == [reply["reply"] for reply in replies]
    finally:
        assert sigterm(process) == 0, log.read_text()[-3000:]
    assert not (data / "stack.json").exists()


def test_up_with_a_shard_map_runs_an_ingester_and_a_file_per_shard(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, "--shard-map", "1=default")  # the default tenant on shard 1
    try:
        assert stack["shard_map"] == ["1=default"]
        replies = [turn(stack, "first", "hello"), turn(stack, "first", "and again")]
        events = committed_events(stack, "first", replies[-1]["seq"])
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        verify = subprocess.run([sys.executable, "-m", "mirror", "replay", "verify", "first", "--data", str(data)],
                                capture_output=True, text=True, timeout=120)  # finds shard 1 by the stack's map
        assert verify.returncode == 0 and "default/first/main: ok" in verify.stdout, verify.stdout + verify.stderr
        assert "ingester-1 runs in Ray worker pid" in (data / "ingester-1.log").read_text()
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
    with duckdb.connect(str(data / "mirror-1.duckdb"), read_only=True) as con:
        assert con.execute("SELECT DISTINCT tenant FROM events").fetchall() == [("default",)]
    with duckdb.connect(str(data / "mirror.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM events").fetchall() == [(0,)]


def answered_again(stack: dict, conversation: str, message: str, within_s: float = 60.0) -> tuple[dict, float]:
    """The first 200 for ``message`` (asked again after each failure) and how long it took."""
    started = time.monotonic()
    while True:
        try:
            reply = httpx.post(f"{stack['url']}/v1/conversations/{conversation}/turns", json={"message": message},
                               headers={"Authorization": f"Bearer {stack['token']}"}, timeout=10)
            if reply.status_code == 200:
                return reply.json(), time.monotonic() - started
        except httpx.HTTPError:
            pass
        assert time.monotonic() - started < within_s, f"no answer within {within_s} s of the kill"
        time.sleep(0.2)


def logged(log: Path, pattern: str, within_s: float = 30.0) -> None:
    """Wait until ``mirror up``'s log has a line matching ``pattern`` (the supervisor writes its
    "is back" line when the restart returns, which may be after a client already got through)."""
    deadline = time.monotonic() + within_s
    while not re.search(pattern, log.read_text()):
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n" + log.read_text()[-3000:]
        time.sleep(0.1)


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_up_brings_back_a_killed_nats_server_and_simulator(tmp_path: Path) -> None:
    """kill -9 of the broker, then of the simulator: `mirror up` starts each again by itself (same
    port, same store, same --nats-sync), says so in its log, and the conversation goes on with
    nothing lost. Relaxed on purpose: a killed process (unlike a power cut) loses nothing the
    kernel already holds, so an acknowledged turn survives it whatever the interval."""
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, "--nats-sync", "1m30s")
    try:
        assert stack["nats_sync"] == "1m30s"
        replies = [turn(stack, "healing", "hello")]
        os.kill(stack["nats_pid"], signal.SIGKILL)
        reply, _ = answered_again(stack, "healing", "are you back?")
        replies.append(reply)
        logged(log, rf"nats-server \(pid {stack['nats_pid']}\) died \(exit status -9\)")
        logged(log, r"nats-server is back \(pid \d+\) after [\d.]+ s")
        restarted = re.findall(r"nats-server is back \(pid (\d+)\)", log.read_text())[-1]
        assert str(data / "nats" / "nats-server.conf") in Path(f"/proc/{restarted}/cmdline").read_text()
        assert 'sync_interval: "1m30s"' in (data / "nats" / "nats-server.conf").read_text()
        os.kill(stack["sim_pid"], signal.SIGKILL)
        reply, _ = answered_again(stack, "healing", "and now?")
        replies.append(reply)
        logged(log, rf"the simulator \(pid {stack['sim_pid']}\) died \(exit status -9\)")
        logged(log, r"the simulator is back \(pid \d+\) after [\d.]+ s")
        events = committed_events(stack, "healing", replies[-1]["seq"])
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))  # no gap, no double
        turns = {event["seq"]: event["payload"]["reply"] for event in events if event["type"] == "turn"}
        assert all(turns[reply["seq"]] == reply["reply"] for reply in replies)  # every acknowledged turn
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]


def stream_leader_node(stack: dict) -> int:
    """Which node (index in ``nats_pids``) leads the MIRROR stream, from JetStream's STREAM.INFO."""
    import asyncio

    from mirror.events.nats.cluster import SERVER_NAME_PREFIX
    from mirror.events.nats.jetstream import connect_nats

    async def leader() -> str:
        nc = await connect_nats(stack["nats_url"], name="test-leader")
        try:
            info = await nc.jetstream().stream_info("MIRROR")
            assert info.config.num_replicas == 3  # min(3, the three URLs the stack gives its clients)
            cluster = info.cluster
            assert cluster is not None and cluster.leader, "the stream has no leader"
            return cluster.leader
        finally:
            await nc.close()

    return int(asyncio.run(leader()).removeprefix(SERVER_NAME_PREFIX))


@pytest.mark.long  # ~36 s (a Raft election of 4-9 s inside): .ci/run runs it with -m long
def test_up_with_a_nats_cluster_answers_through_the_death_of_the_stream_leader(tmp_path: Path) -> None:
    """`mirror up --nats-cluster 3`: kill -9 of the node leading the stream under a steady flow of
    turns; turns go on being answered (a few may fail right at the kill), every acknowledged turn
    is in the log, and the supervisor starts the node again."""
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, "--nats-cluster", "3", reflection=True)  # as users start it: long
    conversations = ["ha-0", "ha-1", "ha-2"]
    acknowledged: list[tuple[str, dict]] = []
    failures: list[str] = []

    def one_turn(number: int) -> bool:
        conversation = conversations[number % len(conversations)]
        try:
            reply = httpx.post(f"{stack['url']}/v1/conversations/{conversation}/turns", json={"message": f"turn {number}"},
                               headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
        except httpx.HTTPError as exc:
            failures.append(repr(exc))
            return False
        if reply.status_code != 200:
            failures.append(f"{reply.status_code} {reply.text[:200]}")
            return False
        acknowledged.append((conversation, reply.json()))
        return True

    try:
        assert len(stack["nats_pids"]) == 3 and stack["nats_pid"] == stack["nats_pids"][0]
        assert len(stack["nats_url"].split(",")) == 3
        number = 0
        while number < 6:
            assert one_turn(number), failures
            number += 1
        leader = stream_leader_node(stack)
        killed_pid = stack["nats_pids"][leader]
        os.kill(killed_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        answered_after: list[float] = []
        while time.monotonic() - killed_at < 15 or len(answered_after) < 6:
            assert time.monotonic() - killed_at < 120, f"turns did not come back: {failures[-5:]}"
            if one_turn(number):
                answered_after.append(time.monotonic() - killed_at)
            else:
                time.sleep(0.2)
            number += 1
        print(f"first turn answered {answered_after[0]:.2f} s after the leader's kill; "
              f"{len(failures)} failed, {len(acknowledged)} acknowledged")
        assert len(failures) <= 5, failures
        logged(log, rf"nats-server mirror-n{leader} \(pid {killed_pid}\) died \(exit status -9\)")
        logged(log, rf"nats-server mirror-n{leader} is back \(pid \d+\) after [\d.]+ s")
        for conversation in conversations:
            replies = {reply["seq"]: reply["reply"] for name, reply in acknowledged if name == conversation}
            events = committed_events(stack, conversation, max(replies))
            assert [event["seq"] for event in events] == list(range(1, len(events) + 1))  # no gap, no double
            turns = {event["seq"]: event["payload"]["reply"] for event in events if event["type"] == "turn"}
            assert all(turns.get(seq) == text for seq, text in replies.items())  # every acknowledged turn
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
