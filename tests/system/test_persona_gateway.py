"""The persona mind over HTTP: the tenant's persona store, the choice of mind (first turn or
``POST /v1/conversations/{id}``), 409 on another mind later, and the character's state now and
at any seq. Real gateway, NATS (its key-value store), Ray, DuckDB and the simulator."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from mirror.cognition.persona import EXAMPLES
from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import gateway_stack
from tests.support.waits import until


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("persona-gw"), shard="pgw", latency="fixed:2") as stack:
        yield stack


def client_of(stack: tuple[str, dict[str, str]], tenant: str = "acme") -> httpx.Client:
    url, tokens = stack
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[tenant]}"}, timeout=60)


def test_the_persona_store_keeps_cards_by_name_per_tenant(stack) -> None:
    with client_of(stack) as client, client_of(stack, "globex") as other:
        stored = client.post("/v1/personas", content=(EXAMPLES / "wren.json").read_bytes(),
                             headers={"Content-Type": "application/json"})
        assert stored.status_code == 201, stored.text
        assert stored.json()["name"] == "wren-halloway" and len(stored.json()["version"]) == 64
        png = client.post("/v1/personas", params={"name": "odile"}, content=(EXAMPLES / "odile.png").read_bytes(),
                          headers={"Content-Type": "image/png"})
        assert png.status_code == 201, png.text
        assert {"odile", "wren-halloway"} <= set(client.get("/v1/personas").json()["personas"])
        assert client.get("/v1/personas/odile").json()["persona"]["name"] == png.json()["persona"]["name"]
        assert other.get("/v1/personas").json()["personas"] == []  # another tenant's store is its own
        assert other.get("/v1/personas/odile").status_code == 404


@pytest.mark.parametrize("body, names", [
    (b"", "empty"),
    (b"{not json", "$"),
    (json.dumps({"spec": "chara_card_v2", "data": {"description": "no name"}}).encode(), "data.name"),
    (json.dumps({"spec": "chara_card_v3", "data": {"name": "X", "extensions": {"mirror": {"big_five": {"openness": 2}}}}}).encode(),
     "openness"),
])
def test_an_invalid_persona_is_a_400_naming_the_key_and_stores_nothing(stack, body: bytes, names: str) -> None:
    with client_of(stack) as client:
        before = client.get("/v1/personas").json()["personas"]
        answer = client.post("/v1/personas", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and names in answer.json()["detail"], answer.text
        assert client.get("/v1/personas").json()["personas"] == before
        assert client.post("/v1/personas", params={"name": "bad.name"}, content=(EXAMPLES / "wren.json").read_bytes()).status_code == 400


def test_a_first_turn_makes_the_conversation_a_persona_for_good(stack) -> None:
    with client_of(stack) as client:
        client.post("/v1/personas", content=(EXAMPLES / "wren.json").read_bytes())
        first = client.post("/v1/conversations/wren-chat/turns",
                            json={"message": "Hello there.", "mind": "persona", "persona": "wren-halloway"})
        assert first.status_code == 200, first.text
        assert set(first.json()["steps_ms"]) == {"think", "retrieval", "appraisal", "plan", "formulation"}
        until(lambda: client.get("/v1/conversations/wren-chat/persona").json()["updated_turns"]["episode"] == 0,
              "the first turn's background steps", timeout=30)
        now = client.get("/v1/conversations/wren-chat/persona").json()
        assert now["name"] == "Wren Halloway" and now["goals"]["active_hard_goal"] is not None
        assert all(0 <= value <= 1 for value in now["emotions"].values()) and now["appraisal"]["for_turn"] == 0
        at_start = client.get("/v1/conversations/wren-chat/persona", params={"at": 1}).json()
        assert set(at_start["emotions"].values()) == {0.0} and at_start["appraisal"] is None  # the persona event alone
        assert client.get("/v1/conversations/wren-chat").json()["mind"] == "persona"
        last_seq = client.get("/v1/conversations/wren-chat").json()["last_seq"]
        for body in ({"message": "x", "mind": "mirror"}, {"message": "x", "persona": "odile"}, {"message": "x", "mode": "full"},
                     {"message": "x", "reflection": True},
                     {"message": "x", "mind": "persona", "persona": "wren-halloway", "order": "plan_first"}):
            if body.get("persona") == "odile":
                client.post("/v1/personas", params={"name": "odile"}, content=(EXAMPLES / "odile.png").read_bytes())
            refused = client.post("/v1/conversations/wren-chat/turns", json=body)
            assert refused.status_code == 409, (body, refused.text)
        assert client.get("/v1/conversations/wren-chat").json()["last_seq"] == last_seq  # nothing appended
        again = client.post("/v1/conversations/wren-chat/turns", json={"message": "Are you still Wren?"})
        assert again.status_code == 200 and again.json()["steps_ms"] is not None


def test_the_mind_can_be_chosen_before_the_first_turn_with_a_card_in_the_body(stack) -> None:
    card = json.loads((EXAMPLES / "wren.json").read_text())
    with client_of(stack) as client:
        chosen = client.post("/v1/conversations/chosen", json={"mind": "persona", "persona": card, "order": "plan_first"})
        assert chosen.status_code == 200 and chosen.json()["mind"] == "persona", chosen.text
        assert client.post("/v1/conversations/chosen", json={"mind": "persona", "persona": card,
                                                             "order": "plan_first"}).status_code == 200  # the same: no-op
        assert client.get("/v1/conversations/chosen").json()["last_seq"] == 2  # the persona and its greeting
        assert chosen.json()["greeting"].startswith("*Wren looks up")
        assert client.post("/v1/conversations/chosen", json={"mind": "persona", "persona": card}).status_code == 409
        turned = client.post("/v1/conversations/chosen/turns", json={"message": "Hi."})
        assert turned.status_code == 200 and list(turned.json()["steps_ms"])[2:4] == ["plan", "appraisal"]


def test_an_unknown_persona_or_a_persona_without_a_card_is_refused_and_creates_nothing(stack) -> None:
    with client_of(stack) as client:
        assert client.post("/v1/conversations/nobody/turns", json={"message": "hi", "persona": "nobody"}).status_code == 404
        assert client.post("/v1/conversations/nobody/turns", json={"message": "hi", "mind": "persona"}).status_code == 400
        assert client.post("/v1/conversations/nobody/turns", json={"message": "hi", "persona": {"data": {}}}).status_code == 400
        assert client.get("/v1/conversations/nobody").status_code == 404
        plain = client.post("/v1/conversations/plain-one/turns", json={"message": "hi"})
        assert plain.status_code == 200 and plain.json()["steps_ms"] is None
        assert client.get("/v1/conversations/plain-one/persona").status_code == 404
