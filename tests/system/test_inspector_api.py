"""What the inspector page reads, over HTTP: uvicorn gateway → Ray actors → NATS → ingester →
DuckDB, the simulator as LLM and embedder.

``/why`` on a live turn with memory names the ``recall`` the Talker answered from, which is
``/events``' event just before it; bad questions are 400s and unknown subjects 404s that name
them. ``/v1/prompts`` gives the served templates under the names a recompute takes, and a
recompute with one of them edited is accepted and re-thinks with it.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mirror.cognition.persona.prompting import PERSONA_TEMPLATES, default_persona_prompts
from mirror.cognition.prompts import TEMPLATES, default_prompt_set
from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack

FACT = "I have a severe peanut allergy."
LATER = "Could you suggest a peanut snack for my hike?"


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("inspector"), shard="inspect",
                       latency="fixed:5") as stack:
        yield stack


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def test_why_a_reply_names_the_recall_it_answered_from(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        first = http.post("/v1/conversations/hike/turns", json={"message": FACT, "memory": True})
        assert first.status_code == 200, first.text
        # sync: the first turn's thinking and memory stage are done before this one recalls.
        later = http.post("/v1/conversations/hike/turns", json={"message": LATER}, params={"sync": True})
        assert later.status_code == 200, later.text
        turn_seq, recall_seq = later.json()["seq"], later.json()["recall_seq"]
        assert recall_seq == turn_seq - 1, later.text

        why = http.get("/v1/conversations/hike/why", params={"seq": turn_seq})
        assert why.status_code == 200, why.text
        answer = why.json()
        events = http.get("/v1/conversations/hike/events", params={"limit": 1000}).json()["events"]
        by_seq = {event["seq"]: event for event in events}
        assert answer["event"] == by_seq[turn_seq] and answer["subject"]["kind"] == "event"
        recall = answer["causes"][0]
        assert recall["role"] == "recall" and recall["event"] == by_seq[recall_seq] and recall["provenance"] is None
        assert answer["provenance"]["model"] == "mirror-sim" and answer["provenance"]["prompt_tokens"] > 0

        # The recall gave the Talker the fact: its belief's cause is the first turn.
        belief_id = by_seq[recall_seq]["payload"]["belief_ids"][0]
        belief = http.get("/v1/conversations/hike/why", params={"belief": belief_id}).json()
        assert belief["subject"]["belief_id"] == belief_id and belief["history"][0]["type"] == "belief"
        source = next(cause for cause in belief["causes"] if cause["role"] == "source_turn")
        assert source["event"]["payload"]["user_message"] == FACT
        assert any(entry["seq"] == recall_seq for entry in belief["history"])


@pytest.mark.parametrize(
    "params, status, says",
    [
        ({}, 400, "ask one question"),
        ({"seq": 1, "belief": "b-x"}, 400, "seq and belief"),
        ({"src": "a", "relation": "b"}, 400, "give dst"),
        ({"seq": 0}, 422, ""),
        ({"seq": 10_000}, 404, "no seq 10000"),
        ({"belief": "b-never"}, 404, "belief 'b-never'"),
        ({"src": "moon", "relation": "causes", "dst": "tides"}, 404, "edge moon causes tides"),
        ({"seq": 1, "branch": "nowhere"}, 404, "nowhere"),
        ({"seq": 1, "branch": "bad branch"}, 400, "branch"),
    ],
)
def test_bad_questions_are_4xx_that_name_what_to_give(stack, params, status, says) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        assert http.post("/v1/conversations/asked/turns", json={"message": "hello"}).status_code == 200
        answer = http.get("/v1/conversations/asked/why", params=params)
        assert answer.status_code == status, answer.text
        assert says in str(answer.json()["detail"])
        unknown = http.get("/v1/conversations/ghost/why", params={"seq": 1})
        assert unknown.status_code == 404 and "ghost" in unknown.json()["detail"]
    with client(url, tokens["globex"]) as other:  # another tenant's conversation does not exist for it
        assert other.get("/v1/conversations/asked/why", params={"seq": 1}).status_code == 404


def test_prompts_are_the_served_sets_and_an_edited_one_is_accepted_by_recompute(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        served = http.get("/v1/prompts")
        assert served.status_code == 200, served.text
        prompts = served.json()
        assert set(prompts) == {"prompt_set", "templates", "persona"}
        assert sorted(prompts["templates"]) == sorted(TEMPLATES)
        assert prompts["templates"] == dict(default_prompt_set().templates)
        assert prompts["prompt_set"] == default_prompt_set().version
        assert sorted(prompts["persona"]["templates"]) == sorted(PERSONA_TEMPLATES)
        assert prompts["persona"]["prompt_set"] == default_persona_prompts().version

        assert http.post("/v1/conversations/edited/turns", json={"message": "Tell me about rivers."},
                         params={"sync": True}).status_code == 200
        edited = {"controller.md": prompts["templates"]["controller.md"] + "\nKeep it to one sentence.\n"}
        done = http.post("/v1/recompute", params={"wait": "true"},
                         json={"prompts": edited, "conversations": ["edited"], "branch": "edited-prompt"})
        assert done.status_code == 200, done.text
        report = done.json()["report"]
        assert report["completed"] == 1 and report["failed"] == 0
        assert report["prompt_set"] != prompts["prompt_set"]  # the edited set, not the served one
        persona = {"think.md": prompts["persona"]["templates"]["think.md"] + "\nBe brief.\n"}
        accepted = http.post("/v1/recompute", params={"wait": "true"},
                             json={"persona_prompts": persona, "conversations": ["edited"], "branch": "edited-persona"})
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["report"]["persona_prompt_set"] not in (None, prompts["persona"]["prompt_set"])
    assert httpx.get(f"{url}/v1/prompts").status_code == 401
