"""What the inspector page reads, over HTTP: uvicorn gateway → Ray actors → NATS → ingester →
DuckDB, the simulator as LLM and embedder.

``/why`` on a live turn with memory names the ``recall`` the Talker answered from, which is
``/events``' event just before it; bad questions are 400s and unknown subjects 404s that name
them. ``/v1/prompts`` gives the served templates under the names a recompute takes, and a
recompute with one of them edited is accepted and re-thinks with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mirror.cognition.persona.prompting import PERSONA_TEMPLATES, default_persona_prompts
from mirror.cognition.prompts import TEMPLATES, default_prompt_set
from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack
from tests.support.waits import until

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
        # its recalls apart from the rest of its history, a page at a time, each a line without its event
        assert all(entry["type"] != "recall" for entry in belief["history"])
        assert belief["recalls"]["total"] >= 1 and belief["recalls"]["items"][-1]["seq"] == recall_seq
        assert set(belief["recalls"]["items"][0]) == {"seq", "turn", "summary"}


def test_the_timeline_the_events_by_type_and_range_and_vectors_only_when_asked(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        for message in (FACT, LATER, "Where do peanuts grow?"):
            answer = http.post("/v1/conversations/lined/turns", json={"message": message, "memory": True},
                               params={"sync": True})
            assert answer.status_code == 200, answer.text
        last = answer.json()["seq"]  # acknowledged: the reads below include it (read-your-writes)
        timeline = http.get("/v1/conversations/lined/timeline").json()
        # the thinking may still be adding events: those the timeline saw are the first of the events read after it
        events = http.get("/v1/conversations/lined/events", params={"limit": 1000, "vectors": True}).json()["events"]
        events = events[: len(timeline["seq"])]
        assert timeline["seq"] == [event["seq"] for event in events] and timeline["seq"][-1] >= last
        assert [timeline["types"][kind] for kind in timeline["type"]] == [event["type"] for event in events]
        assert timeline["turn"] == [event["turn"] for event in events] and timeline["fork_seq"] is None
        assert timeline["ts"] == [round(event["ts"], 3) for event in events] and timeline["last_seq"] == events[-1]["seq"]

        recall = next(event for event in events if event["type"] == "recall")
        assert recall["payload"]["query_embedding"]  # base64, asked for
        plain = http.get("/v1/conversations/lined/events", params={"after": recall["seq"] - 1, "limit": 1}).json()
        assert plain["events"][0]["payload"]["query_embedding"] is None  # left out by default
        assert {**plain["events"][0]["payload"], "query_embedding": None} == {**recall["payload"], "query_embedding": None}

        turns = [event["seq"] for event in events if event["type"] == "turn"]
        between = http.get("/v1/conversations/lined/events", params={"type": "turn", "after": turns[0], "until": turns[-1]})
        assert [event["seq"] for event in between.json()["events"]] == turns[1:]
        paged = http.get("/v1/conversations/lined/events", params={"type": "turn,recall", "limit": 2}).json()
        assert [event["type"] for event in paged["events"]] == ["turn", "recall"]
        assert paged["next_after"] == paged["events"][-1]["seq"]
        empty = http.get("/v1/conversations/lined/events", params={"type": " , "})
        assert empty.status_code == 400 and "type" in empty.json()["detail"]
        assert http.get("/v1/conversations/ghost/timeline").status_code == 404
        assert http.get("/v1/conversations/lined/timeline", params={"branch": "nowhere"}).json()["seq"] == []


def settled(http: httpx.Client, conversation: str, turn: int) -> list[dict[str, Any]]:
    """The conversation's events once ``turn``'s memory stage is logged (nothing more will touch its beliefs)."""
    def done() -> list[dict[str, Any]]:
        events = http.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
        return events if any(e["type"] == "memory_step" and e["turn"] == turn for e in events) else []
    return until(done, f"{conversation}'s memory stage after turn {turn}")


def test_why_a_belief_pages_its_recalls(stack) -> None:
    url, tokens = stack
    with client(url, tokens["acme"]) as http:
        answer = http.post("/v1/conversations/paged/turns", json={"message": FACT, "memory": True}, params={"sync": True})
        assert answer.status_code == 200, answer.text
        for _ in range(4):  # each recalls the allergy
            last = http.post("/v1/conversations/paged/turns", json={"message": LATER}, params={"sync": True})
            assert last.status_code == 200, last.text
        # The last turn's memory stage may still reinforce the belief: read once it has.
        events = settled(http, "paged", last.json()["turn"])
        recalls = [event for event in events if event["type"] == "recall" and event["payload"]["belief_ids"]]
        belief_id = recalls[-1]["payload"]["belief_ids"][0]
        expected = [event["seq"] for event in recalls if belief_id in event["payload"]["belief_ids"]]
        assert len(expected) >= 3, expected
        whole = http.get("/v1/conversations/paged/why", params={"belief": belief_id}).json()
        assert [item["seq"] for item in whole["recalls"]["items"]] == expected and whole["recalls"]["next_after"] is None
        seen, after = [], 0
        while after is not None:
            page = http.get("/v1/conversations/paged/why", params={"belief": belief_id, "limit": 2, "after": after}).json()
            assert page["recalls"]["total"] == len(expected) and len(page["recalls"]["items"]) <= 2
            assert page["causes"] == whole["causes"] and page["history"] == whole["history"]
            seen += [item["seq"] for item in page["recalls"]["items"]]
            after = page["recalls"]["next_after"]
        assert seen == expected
        roles = {cause["role"] for cause in whole["causes"]}
        assert {"source_turn", "memory_step"} <= roles, roles  # found beside the events that name the belief
        assert http.get("/v1/conversations/paged/why", params={"belief": belief_id, "limit": 0}).status_code == 422


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
