"""The broker killed with SIGKILL and left down: every request is answered within 2 s (503,
``Retry-After``, naming what is down), no Ray worker processes pile up, and once the broker is
back on the same port and store, turns resume by themselves within 5 s — with every turn
acknowledged before the kill still in the log. Both placements.

Without the gateway's check (``GatewayRuntime.bus``) and the bus's fail-fast while disconnected
(``JetStreamBus._connected``, the publisher's grace), a turn waited out the publish and retry
deadlines (5 s, then up to 30 s) and Ray kept starting actors for a broker that was gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.cluster import processes_named
from tests.support.stack import PLACEMENTS, gateway_stack

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]  # ~40 s (6 s outages): .ci/run runs it with -m long

ANSWER_WITHIN_S = 2.0
RESUME_WITHIN_S = 5.0
DOWN_FOR_S = 6.0
"""How long the broker stays down: longer than any publish deadline (5 s) would hide."""


@pytest.fixture(params=PLACEMENTS)
def stack(request: pytest.FixtureRequest, ray_cluster: None, tmp_path: Path) -> Iterator[tuple[EmbeddedNats, str, str]]:
    nats = EmbeddedNats(tmp_path / "nats").start()
    try:
        with gateway_stack(nats.url, tmp_path / "stack", shard="down", latency="fixed:5",
                           placement=request.param) as (url, tokens):
            yield nats, url, tokens["acme"]
    finally:
        nats.stop()


def workers() -> int:
    """Ray worker processes of this test's Ray (descendants of this process), not the machine's."""
    return sum(_descends(pid, os.getpid()) for pid in processes_named("ray::"))


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def test_a_dead_broker_is_a_fast_503_and_turns_resume_when_it_is_back(stack: tuple[EmbeddedNats, str, str]) -> None:
    nats, url, token = stack
    acknowledged: dict[str, list[tuple[int, str]]] = {}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:

        def turn(conversation: str, message: str) -> httpx.Response:
            response = client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})
            if response.status_code == 200:
                acknowledged.setdefault(conversation, []).append((response.json()["seq"], message))
            return response

        for index in range(3):
            assert turn(f"calm-{index}", f"hello {index}").status_code == 200
        processes_before = workers()

        nats.kill()
        answers: list[tuple[str, int, float, str, str]] = []  # (what, status, seconds, retry-after, detail)
        peak = processes_before
        down_until = time.monotonic() + DOWN_FOR_S
        attempt = 0
        while time.monotonic() < down_until:
            attempt += 1
            requests = [("turn", "calm-0", f"while down {attempt}"), ("new conversation", f"new-{attempt}", "first words"),
                        ("events", "calm-1", ""), ("list", "", "")]
            for what, conversation, message in requests:
                started = time.monotonic()
                if message:
                    response = turn(conversation, message)
                elif conversation:
                    response = client.get(f"/v1/conversations/{conversation}/events")
                else:
                    response = client.get("/v1/conversations")
                detail = response.json().get("detail", "") if response.headers.get("content-type") == "application/json" else response.text
                answers.append((what, response.status_code, time.monotonic() - started,
                                response.headers.get("retry-after", ""), str(detail)[:300]))
            peak = max(peak, workers())

        slowest = max(seconds for _, _, seconds, _, _ in answers)
        print(f"\nbroker down: {len(answers)} requests, slowest {slowest:.2f} s, workers {processes_before} -> peak {peak}")
        for what, status, seconds, retry_after, detail in answers:
            assert status == 503, (what, status, detail)
            assert seconds <= ANSWER_WITHIN_S, (what, seconds)
            assert retry_after.isdigit(), (what, retry_after)
            assert "NATS" in detail, (what, detail)  # names what is down
        assert peak <= processes_before + 1, (processes_before, peak)  # no actor started per request

        nats.start()  # same port, same store
        back = time.monotonic()
        while turn("calm-0", "the broker is back").status_code != 200:
            assert time.monotonic() - back <= RESUME_WITHIN_S, "turns did not resume"
            time.sleep(0.1)
        resumed = time.monotonic() - back
        print(f"broker back: the first turn answered {resumed:.2f} s after it started")
        assert resumed <= RESUME_WITHIN_S

        # Nothing acknowledged is lost, and nothing was appended while the broker was down.
        for conversation, turns in acknowledged.items():
            deadline = time.monotonic() + 30
            while True:
                listed = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000})
                if listed.status_code == 200:
                    events = listed.json()["events"]
                    logged = {event["seq"]: event["payload"]["user_message"] for event in events if event["type"] == "turn"}
                    if all(logged.get(seq) == message for seq, message in turns):
                        break
                assert time.monotonic() < deadline, (conversation, turns, listed.text[:300])
                time.sleep(0.2)
            assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
            assert not any(message.startswith("while down") for message in logged.values())
