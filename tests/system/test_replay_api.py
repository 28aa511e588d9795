"""Time travel and recompute over HTTP: uvicorn gateway → Ray (actors, recompute driver and
tasks) → NATS → ingester → DuckDB; the simulator as LLM.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st

from mirror.actors.conversation_actor import NAMESPACE
from mirror.actors.recompute_driver import driver_name
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS
from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack

MAX_FINISHED_JOBS = 2  # small, so a test can see the gateway forget the oldest finished job


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("replay-api"), shard="replayapi", latency="fixed:30",
                       max_finished_jobs=MAX_FINISHED_JOBS, reflection=False) as stack:  # it counts thinking's calls
        yield stack


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def converse(http: httpx.Client, conversation: str, turns: int) -> list[dict[str, Any]]:
    for index in range(turns):
        response = http.post(f"/v1/conversations/{conversation}/turns", params={"sync": "true"},
                             json={"message": f"message {index}: I never eat peanuts" if index == 0 else f"message {index}"})
        assert response.status_code == 200, response.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the last turn's thinking and memory, committed
        events = http.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
        if events and events[-1]["type"] == "memory_step" and events[-1]["turn"] == turns - 1:
            return events
        time.sleep(0.05)
    raise AssertionError(f"thinking of {conversation} did not finish")


def changed(template: str) -> dict[str, str]:
    text = (DEFAULT_PROMPT_SETS / "default" / template).read_text()
    return {template: text + "\nI keep it brief.\n"}


def test_state_and_diff_over_http(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        events = converse(http, "travel", 3)
        first = http.get("/v1/conversations/travel/state", params={"at": 1}).json()
        assert first["seq"] == 1 and first["turns"] == 1 and first["narrative"] is None
        last = http.get("/v1/conversations/travel/state").json()
        narrative = [event for event in events if event["type"] == "narrative"][-1]
        assert last["seq"] == events[-1]["seq"] and last["narrative"] == narrative["payload"]["text"]
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(events[0]["ts"] - 60)) + "Z"
        assert http.get("/v1/conversations/travel/state", params={"at_time": iso}).json()["seq"] == 0
        change = http.get("/v1/conversations/travel/diff", params={"from": 0}).json()
        assert change["narrative_changed"] and change["turns_added"] == 3 and change["target"] == f"main@{last['seq']}"
        beyond = http.get("/v1/conversations/travel/state", params={"at": last["seq"] + 1})
        assert beyond.status_code == 404 and f"ends at seq {last['seq']}" in beyond.json()["detail"]
        assert http.get("/v1/conversations/nowhere/state").status_code == 404
        assert http.get("/v1/conversations/travel/state", params={"at": 1, "at_time": iso}).status_code == 400
        assert http.get("/v1/conversations/travel/state", params={"at_time": "yesterday"}).status_code == 400
        assert http.get("/v1/conversations/travel/state", params={"branch": "no.such"}).status_code == 400
    with client(url, tokens["globex"]) as other:  # another tenant cannot look back at acme's conversation
        assert other.get("/v1/conversations/travel/state").status_code == 404
        assert other.get("/v1/conversations/travel/diff").status_code == 404
    with httpx.Client(base_url=url) as anonymous:
        for route in ("/v1/conversations/travel/state", "/v1/conversations/travel/diff", "/v1/recompute/x"):
            assert anonymous.get(route).status_code == 401
        assert anonymous.post("/v1/recompute", json={}).status_code == 401


def test_recompute_over_http_writes_a_branch_and_never_main(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        main_before = converse(http, "rethought", 3)
        refused = http.post("/v1/recompute", json={"prompts": {"nope.md": "x"}, "conversations": ["rethought"]})
        assert refused.status_code == 400 and "unknown prompt template" in refused.json()["detail"]
        unknown = http.post("/v1/recompute", params={"wait": "true"}, json={"conversations": ["ghost"]})
        assert unknown.status_code == 400 and "ghost" in unknown.json()["detail"]
        done = http.post("/v1/recompute", params={"wait": "true"},
                         json={"prompts": changed("controller.md"), "conversations": ["rethought"]})
        assert done.status_code == 200, done.text
        report = done.json()["report"]
        assert report["completed"] == 1 and report["failed"] == 0
        result = report["results"][0]
        assert result["diff"]["narrative_changed"] and result["model_calls"] == 3  # one controller call per turn
        branch = report["branch"]
        on_branch = http.get("/v1/conversations/rethought/state", params={"branch": branch}).json()
        assert on_branch["fork"]["parent_branch"] == "main" and on_branch["turns"] == 3
        across = http.get("/v1/conversations/rethought/diff", params={"to_branch": branch, "from": main_before[-1]["seq"]}).json()
        assert across["narrative_changed"] and across["turns_added"] == 0
        heads = http.get("/v1/conversations/rethought/diff", params={"to_branch": branch}).json()  # no seqs: the heads
        assert heads["source"] == f"main@{main_before[-1]['seq']}" and heads["target"] == f"{branch}@{on_branch['seq']}"
        assert heads == across
        main_after = http.get("/v1/conversations/rethought/events", params={"limit": 1000}).json()["events"]
        assert main_after == main_before
        assert branch in {b for c in http.get("/v1/conversations").json()["conversations"] for b in c["branches"]}
    with client(url, tokens["globex"]) as other:  # a tenant recomputes only its own conversations
        assert other.post("/v1/recompute", params={"wait": "true"}, json={"conversations": ["rethought"]}).status_code == 400


def test_a_killed_recompute_driver_resumes_without_duplicates(stack) -> None:
    url, tokens = stack
    names = [f"long-{index}" for index in range(4)]
    with client(url, tokens["acme"]) as http:
        for name in names:
            converse(http, name, 6)
        body = {"prompts": changed("monologue.md"), "conversations": names, "concurrency": 1, "branch": "resumable"}
        job = http.post("/v1/recompute", json=body).json()
        driver: Any = ray.get_actor(driver_name("acme", job["job"]), namespace=NAMESPACE)  # Any: Ray types its methods, found at run time, as Never
        pid: int = ray.get(driver.pid.remote())
        deadline = time.monotonic() + 60
        while (status := http.get(f"/v1/recompute/{job['job']}").json())["done"] < 1:
            assert status["status"] == "running" and time.monotonic() < deadline, status
            time.sleep(0.01)
        assert status["done"] < len(names), "the run finished before it could be interrupted"
        os.kill(pid, signal.SIGKILL)  # the driver dies; its running tasks die with it
        deadline = time.monotonic() + 60
        while (status := http.get(f"/v1/recompute/{job['job']}").json())["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert status["status"] == "failed" and "resume" in status["error"]

        resumed = http.post("/v1/recompute", params={"wait": "true"}, json=body).json()["report"]
        assert resumed["completed"] == len(names)
        assert any(result["resumed_at_turn"] > 0 for result in resumed["results"])
        clean = http.post("/v1/recompute", params={"wait": "true"}, json={**body, "branch": "clean"}).json()["report"]
        assert clean["completed"] == len(names)
        for name in names:
            states = {branch: http.get(f"/v1/conversations/{name}/state", params={"branch": branch}).json()
                      for branch in ("resumable", "clean")}
            assert states["resumable"]["seq"] == states["clean"]["seq"]
            assert states["resumable"]["narrative"] == states["clean"]["narrative"]
            assert states["resumable"]["events_by_type"] == states["clean"]["events_by_type"]
            for seq in range(1, states["clean"]["seq"] + 1):  # same story, event by event
                a = http.get(f"/v1/conversations/{name}/state", params={"branch": "resumable", "at": seq}).json()
                b = http.get(f"/v1/conversations/{name}/state", params={"branch": "clean", "at": seq}).json()
                assert (a["narrative"], a["threads"], a["turns"]) == (b["narrative"], b["threads"], b["turns"]), seq


def test_the_gateway_forgets_the_oldest_finished_jobs_beyond_its_bound(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        jobs = []
        for _ in range(MAX_FINISHED_JOBS + 1):  # each fails at once (no such conversation), and is finished
            job = http.post("/v1/recompute", json={"conversations": ["nobody-here"]}).json()["job"]
            deadline = time.monotonic() + 60
            while (status := http.get(f"/v1/recompute/{job}").json())["status"] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert status["status"] == "failed" and "nobody-here" in status["error"], status
            jobs.append(job)
        for job in jobs[1:]:  # remembered: their drivers are gone, so this is the gateway's record
            with pytest.raises(ValueError):
                ray.get_actor(driver_name("acme", job), namespace=NAMESPACE)
            assert http.get(f"/v1/recompute/{job}").json()["status"] == "failed"
        forgotten = http.get(f"/v1/recompute/{jobs[0]}")
        assert forgotten.status_code == 404 and "forgotten" in forgotten.json()["detail"], forgotten.text
    with client(url, tokens["globex"]) as other:  # and another tenant never saw them
        assert other.get(f"/v1/recompute/{jobs[-1]}").status_code == 404


@given(conversations=st.integers(0, 200), concurrency=st.integers(1, 64), client=st.integers(1, 64))
def test_slices_cover_every_conversation_once_and_share_the_concurrency(conversations: int, concurrency: int,
                                                                        client: int) -> None:
    from mirror.actors.recompute_driver import CALLS_PER_CONVERSATION, MAX_PER_TASK, plan_slices, task_llm_settings
    from mirror.cognition.openai_client import LLMSettings
    from mirror.events.ids import StreamKey

    keys = [StreamKey("acme", f"c{index}") for index in range(conversations)]
    slices = plan_slices(keys, concurrency)
    assert sorted(key.conversation for part in slices for key in part.keys) == sorted(k.conversation for k in keys)
    if keys:
        assert sum(part.in_flight for part in slices) <= concurrency
        # A conversation may have two chat calls in flight: the tasks' clients hold them to C.
        llm = LLMSettings(base_url="http://127.0.0.1:9/v1", model="m", max_concurrency=client)
        assert sum(task_llm_settings(llm, part.calls).max_concurrency for part in slices) <= concurrency
        assert all(part.in_flight <= part.calls <= CALLS_PER_CONVERSATION * part.in_flight for part in slices)
        assert all(1 <= part.in_flight <= MAX_PER_TASK and part.keys for part in slices)
        assert len(slices) == min(conversations, -(-concurrency // MAX_PER_TASK))
    else:
        assert slices == []
