"""End to end over HTTP: uvicorn gateway → conversation hosts or dedicated actors (both
placements) → NATS → ingester → DuckDB; the simulator as LLM."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import httpx
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import PLACEMENTS, gateway_stack
from tests.support.waits import until


@pytest.fixture(scope="module", params=PLACEMENTS)
def stack(request: pytest.FixtureRequest, ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("gateway"), shard="gw", latency="fixed:5",
                       placement=request.param) as stack:
        yield stack


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_two_tenants_concurrent_turns_all_acknowledged_and_logged(stack) -> None:
    url, tokens = stack
    jobs = [(tenant, f"chat-{index}", turn) for tenant in tokens for index in range(3) for turn in range(3)]

    def run_conversation(tenant: str, conversation: str) -> list[dict]:
        with httpx.Client(base_url=url, headers=auth(tokens[tenant]), timeout=60) as client:
            replies = []
            for turn in range(3):
                response = client.post(f"/v1/conversations/{conversation}/turns", json={"message": f"{tenant} says {turn}"})
                assert response.status_code == 200, response.text
                timing = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
                assert set(timing) == {"recall", "embed", "llm", "talk", "append", "actor", "gateway"}
                phases = float(timing["recall"]) + float(timing["talk"]) + float(timing["append"])
                assert phases <= float(timing["actor"]) + 0.003  # each rounded to the microsecond
                # Each phase lies within the one around it: llm ⊂ talk ⊂ actor ⊂ gateway.
                assert float(timing["llm"]) <= float(timing["talk"]) <= float(timing["actor"]) <= float(timing["gateway"])
                assert float(timing["append"]) <= float(timing["actor"])
                assert abs(float(timing["llm"]) - response.json()["llm_ms"]) < 0.01
                replies.append(response.json())
            return replies

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda job: run_conversation(*job), sorted({(t, c) for t, c, _ in jobs})))
    assert all([r["turn"] for r in replies] == [0, 1, 2] for replies in results)
    for tenant, token in tokens.items():
        with httpx.Client(base_url=url, headers=auth(token), timeout=60) as client:
            for index in range(3):
                def logged(conversation: str = f"chat-{index}") -> list[dict]:
                    """The events once the log holds the three turns ([] until then: it commits a moment
                    after the bus acknowledged)."""
                    found = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
                    return found if sum(e["type"] == "turn" for e in found) >= 3 else []
                listed = until(logged, f"the log holding chat-{index}'s three turns")
                turns = [e for e in listed if e["type"] == "turn"]
                assert [t["payload"]["user_message"] for t in turns] == [f"{tenant} says {n}" for n in range(3)]
                assert [e["seq"] for e in listed] == list(range(1, len(listed) + 1))


def test_tenant_isolation_matrix(stack) -> None:
    url, tokens = stack
    acme, globex = tokens["acme"], tokens["globex"]
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/conversations/private/turns", json={"message": "secret plan"}, headers=auth(acme)).status_code == 200
        routes = [
            ("GET", "/v1/conversations"), ("GET", "/v1/conversations/private"),
            ("GET", "/v1/conversations/private/events"), ("POST", "/v1/conversations/private/turns"),
        ]
        for method, route in routes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
                response = client.request(method, route, headers=headers, json={"message": "x"})
                assert response.status_code == 401, (method, route, headers)
        # globex cannot see or read acme's conversation: it does not exist for globex
        assert "private" not in [c["id"] for c in client.get("/v1/conversations", headers=auth(globex)).json()["conversations"]]
        assert client.get("/v1/conversations/private", headers=auth(globex)).status_code == 404
        assert client.get("/v1/conversations/private/events", headers=auth(globex)).status_code == 404
        assert client.get("/v1/conversations/private/stream", headers=auth(globex)).status_code == 404
        listed = {c["id"]: c for c in client.get("/v1/conversations", headers=auth(acme)).json()["conversations"]}
        assert set(listed["private"]) == {"id", "branches", "events", "last_seq", "updated_at", "turns", "mind"}
        assert (listed["private"]["turns"], listed["private"]["mind"], listed["private"]["branches"]) == (1, "mirror", ["main"])
        summary = client.get("/v1/conversations/private", headers=auth(acme)).json()
        assert summary["turns"] == 1 and summary["last_seq"] >= 1  # thinking may still be under way


@pytest.mark.parametrize(
    "route, body, status",
    [
        ("/v1/conversations/bad.name/turns", {"message": "hi"}, 400),
        ("/v1/conversations/ok/turns", {"message": ""}, 400),
        ("/v1/conversations/ok/turns", {"message": "x" * (32 * 1024 + 1)}, 413),
        ("/v1/conversations/ok/turns", {"text": "hi"}, 422),
        ("/v1/conversations/ok/turns", {"message": "hi", "mode": "fast"}, 422),
    ],
)
def test_bad_input_is_refused_and_appends_nothing(stack, route, body, status) -> None:
    url, tokens = stack
    with httpx.Client(base_url=url, headers=auth(tokens["acme"]), timeout=60) as client:
        assert client.post(route, json=body).status_code == status
        malformed = client.post("/v1/conversations/ok/turns", content=b"{not json", headers={"Content-Type": "application/json"})
        assert malformed.status_code == 422
        assert client.get("/v1/conversations/ok").status_code == 404  # nothing was created


def test_healthz_and_openapi(stack) -> None:
    url, _ = stack
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert "/v1/conversations/{conversation}/turns" in paths
    assert httpx.get(f"{url}/docs").status_code == 200


def test_turn_and_summary_answer_the_same_json_shape(stack) -> None:
    """The actors answer dataclasses across Ray; the HTTP API answers the JSON it always did."""
    url, tokens = stack
    with httpx.Client(base_url=url, headers=auth(tokens["acme"]), timeout=60) as client:
        answer = client.post("/v1/conversations/shape/turns", json={"message": "hello"}, params={"sync": True}).json()
        assert list(answer) == ["reply", "turn", "seq", "narrative_seq", "llm_ms", "recall_seq", "steps_ms"]
        assert answer["recall_seq"] is None  # nothing to recall yet: no recall event
        assert (answer["turn"], answer["seq"], answer["narrative_seq"]) == (0, 1, None) and answer["reply"]
        summary = client.get("/v1/conversations/shape").json()
        assert list(summary) == ["id", "branch", "turns", "last_seq", "narrative", "narrative_seq", "thought_turn",
                                 "thinking", "mode", "last_failure", "updated_at", "mind", "greeting", "branches"]
        assert (summary["id"], summary["branch"], summary["turns"], summary["mode"]) == ("shape", "main", 1, "full")
        assert summary["branches"] == ["main"]  # from the log (before it commits the first event: main alone)


def test_stream_relays_each_new_event_once_in_order(stack) -> None:
    url, tokens = stack
    headers = auth(tokens["acme"])
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        assert client.post("/v1/conversations/streamed/turns", json={"message": "first"}).status_code == 200
        deadline = time.monotonic() + 30
        while client.get("/v1/conversations/streamed").json()["thinking"]:  # its thoughts come before the stream
            assert time.monotonic() < deadline, "the first turn was never thought through"
            time.sleep(0.05)
        with client.stream("GET", "/v1/conversations/streamed/stream") as stream:
            lines = stream.iter_lines()
            assert next(lines) == ": connected"  # subscribed: everything appended from now on is relayed
            with httpx.Client(base_url=url, headers=headers, timeout=60) as other:
                said = other.post("/v1/conversations/streamed/turns", json={"message": "second"}, params={"sync": True}).json()
            relayed: list[tuple[int, str]] = []
            seq = None
            for line in lines:
                if line.startswith("id: "):
                    seq = int(line.removeprefix("id: "))
                elif line.startswith("event: "):
                    assert seq is not None  # each event's id line comes first
                    relayed.append((seq, line.removeprefix("event: ")))
                    if relayed[-1][1] == "narrative" and relayed[-1][0] > said["seq"]:
                        break
    assert relayed[0] == (said["seq"], "turn")  # nothing from before the subscription
    assert [seq for seq, _ in relayed] == list(range(said["seq"], said["seq"] + len(relayed)))
    assert [kind for _, kind in relayed][-2:] == ["monologue", "narrative"]


def test_the_first_turn_fixes_a_conversations_mode(stack) -> None:
    """A per-conversation mode: one stack serves conversations of every mode side by side."""
    url, tokens = stack
    with httpx.Client(base_url=url, headers=auth(tokens["acme"]), timeout=60) as client:
        first = client.post("/v1/conversations/moded/turns", json={"message": "hello", "mode": "baseline"},
                            params={"sync": True})
        assert first.status_code == 200, first.text
        default = client.post("/v1/conversations/unmoded/turns", json={"message": "hello"})
        assert default.status_code == 200, default.text
        again = client.post("/v1/conversations/moded/turns", json={"message": "and again", "mode": "baseline"},
                            params={"sync": True})
        assert again.status_code == 200 and again.json()["turn"] == 1
        omitted = client.post("/v1/conversations/moded/turns", json={"message": "no mode said"}, params={"sync": True})
        assert omitted.status_code == 200 and omitted.json()["turn"] == 2
        before = logged_events(client, "moded", turns=3)
        refused = client.post("/v1/conversations/moded/turns", json={"message": "switch", "mode": "full"})
        assert refused.status_code == 409 and "runs mode 'baseline'" in refused.json()["detail"], refused.text
        # One writer, appending in order: the next accepted turn is number 3 only if the refused
        # one was never appended, and the log then holds it right after the three before.
        confirmed = client.post("/v1/conversations/moded/turns", json={"message": "after the refusal"}, params={"sync": True})
        assert confirmed.status_code == 200 and confirmed.json()["turn"] == 3, confirmed.text
        after = logged_events(client, "moded", turns=4)
        assert [e["payload"]["user_message"] for e in after if e["type"] == "turn"] == [
            *(e["payload"]["user_message"] for e in before if e["type"] == "turn"), "after the refusal"]
        assert client.get("/v1/conversations/moded").json()["mode"] == "baseline"
        assert client.get("/v1/conversations/unmoded").json()["mode"] == "full"
        forgetful = client.post("/v1/conversations/forgetful/turns", json={"message": "I hate olives.", "memory": False})
        assert forgetful.status_code == 200, forgetful.text
        asks = client.post("/v1/conversations/forgetful/turns", json={"message": "Remember now.", "memory": True})
        assert asks.status_code == 409 and "runs memory False" in asks.json()["detail"], asks.text
        assert logged_events(client, "forgetful", turns=1)[0]["payload"]["memory"] is False
        turns = [event["payload"]["mode"] for event in before if event["type"] == "turn"]
        assert turns == ["baseline"] * 3
        # Baseline does not think: no monologue or narrative was written for it.
        assert not [event for event in before if event["type"] in ("monologue", "narrative")]


def logged_events(client: httpx.Client, conversation: str, *, turns: int) -> list[dict]:
    """The conversation's events once the log holds ``turns`` turns (the log trails the bus a little)."""
    deadline = time.monotonic() + 30
    while True:
        events = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
        if sum(event["type"] == "turn" for event in events) >= turns or time.monotonic() > deadline:
            return events
        time.sleep(0.1)
