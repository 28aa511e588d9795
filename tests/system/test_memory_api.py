"""Reading memory over HTTP: a real gateway (uvicorn) → NATS → ingester → DuckDB, the simulator
as embedder; `mirror memory` commands as real processes against it.

The memory-writing stage is not what is tested here, so the history is written as that stage
would write it: belief, edge and contradiction events appended through the fenced bus, each
belief with a real embedding from the simulator's ``/v1/embeddings`` (so vector ranks mean
something). The expected answers are computed beside the gateway from the same events —
folded with the projection, recalled with :func:`recall` — and must be equal, not close.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.embeddings import OpenAIEmbedder
from mirror.cognition.memory import recall, recall_view
from mirror.cognition.openai_client import LLMSettings
from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief, BeliefKind, BeliefOperation, Edge, Fork, MemoryType, Turn
from mirror.processes import free_port
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState, initial_state
from tests.support.stack import conversation_runtime, nats_of

CONVERSATION = "kitchen"
DAY = 86_400.0
T0 = 1_763_000_000.0  # fixed, so decay strengths are the same on every run
QUERY = "Can the user eat peanuts, or is there an allergic reaction?"

BELIEFS: dict[str, tuple[str, MemoryType, BeliefKind, str]] = {  # belief_id -> (statement, memory_type, kind, about)
    "b-allergy": ("The user is allergic to peanuts and carries an epinephrine pen", "standard", "belief", "user"),
    "b-lisbon": ("The user lives in Lisbon near the river", "location", "belief", "user"),
    "b-recipe": ("I promised to send the user a peanut-free satay recipe", "operational", "open_loop", "recipe"),
    "b-eats": ("The user eats peanut butter every morning without trouble", "standard", "belief", "user"),
    "b-cashew": ("The user is allergic to cashews, not peanuts", "standard", "belief", "user"),
}
FORK_SEQ = 6  # branch "alt" re-thinks history after the edges: no b-eats, no contradiction, b-cashew instead


async def seed_memory(runtime: RuntimeSettings, key: StreamKey) -> tuple[list[Event], list[Event]]:
    """Two turns with beliefs, edges, a contradiction and a reinforcement, appended fenced, and
    branch ``alt`` forked after :data:`FORK_SEQ` with a belief of its own; all committed."""
    async with OpenAIEmbedder(LLMSettings(base_url=runtime.llm.base_url, model=runtime.embedding_model)) as embedder:
        ids = list(BELIEFS)
        embeddings = await embedder.embed([BELIEFS[belief_id][0] for belief_id in ids])

    def belief(belief_id: str, operation: BeliefOperation, confidence: float, related: tuple[str, ...] = ()) -> Belief:
        statement, memory_type, kind, about = BELIEFS[belief_id]
        return Belief(belief_id, operation, statement, memory_type, confidence, related, about, kind,
                      source_turn=0, embedding=embeddings.packed(ids.index(belief_id)),
                      embedding_model=embeddings.model, embedding_fingerprint=embeddings.request_fingerprint)

    steps: list[tuple[float, int, Any]] = [
        (T0, 0, Turn("I'm allergic to peanuts. I live in Lisbon. Can you find me a satay recipe?", "Of course.")),
        (T0 + 60, 0, belief("b-allergy", "assert", 0.8)),
        (T0 + 61, 0, belief("b-lisbon", "assert", 0.7)),
        (T0 + 62, 0, belief("b-recipe", "assert", 0.6)),
        (T0 + 63, 0, Edge("peanuts", "cause", "allergic reaction", origin="user_confirmed")),
        (T0 + 64, 0, Edge("allergic reaction", "requires", "epinephrine", origin="world")),
        (T0 + 10 * DAY, 1, Turn("Peanut butter every morning, never a problem!", "Good to know.")),
        (T0 + 10 * DAY + 60, 1, belief("b-eats", "contradict", 0.6, related=("b-allergy",))),
        (T0 + 20 * DAY, 1, Belief("b-lisbon", "reinforce")),
    ]
    events = [make_event(key, seq, payload, turn=turn, timestamp=ts)
              for seq, (ts, turn, payload) in enumerate(steps, start=1)]
    alt = replace(key, branch="alt")
    branch = [make_event(alt, FORK_SEQ + 1, Fork("main", FORK_SEQ), turn=1, timestamp=T0 + 5 * DAY),
              make_event(alt, FORK_SEQ + 2, belief("b-cashew", "assert", 0.7), turn=1, timestamp=T0 + 5 * DAY + 1)]
    bus = await JetStreamBus.connect(nats_of(runtime).url, nats_of(runtime).stream)
    try:
        await bus.append(key, events, Head(0, 0))
        head = await bus.append(alt, branch, Head(FORK_SEQ, 0))
        assert await LogClient(bus.nc, shard=nats_of(runtime).shard).wait_committed(head.fence, 30)
    finally:
        await bus.close()
    return events, branch


def fold(key: StreamKey, events: list[Event], until: int | None = None) -> ConversationState:
    state = initial_state(key)
    for event in events[:until]:
        state = apply(state, event)
    return state


def fold_branch(stack: dict[str, Any]) -> ConversationState:
    """Branch ``alt`` as :class:`History` must see it: main up to the fork, then its own events."""
    state = replace(fold(stack["key"], stack["events"], FORK_SEQ), key=replace(stack["key"], branch="alt"))
    for event in stack["branch"]:
        state = apply(state, event)
    return state


def as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def stack(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A gateway (no Ray needed: memory is read from the log) with tenants acme and globex, and acme's seeded memory."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("memory-api")
    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in ("acme", "globex")}
    with conversation_runtime(nats_server.url, directory, shard="memapi") as runtime:
        settings = GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json"))
        key = StreamKey("acme", CONVERSATION)
        events, branch = asyncio.run(seed_memory(runtime, key))
        with GatewayServer(create_app(settings)) as gateway:
            yield {"url": gateway.url, "tokens": tokens, "settings": settings, "runtime": runtime, "key": key,
                   "events": events, "branch": branch}


def client(stack: dict[str, Any], tenant: str = "acme") -> httpx.Client:
    return httpx.Client(base_url=stack["url"], headers={"Authorization": f"Bearer {stack['tokens'][tenant]}"},
                        timeout=60)


def expected_recall(stack: dict[str, Any], query: str, *, until: int | None = None, limit: int = 5,
                    branch: str = "main") -> dict[str, Any]:
    """What the endpoint must answer: the same fold, the same query vector, :func:`recall` directly."""
    runtime = stack["runtime"]
    state = fold(stack["key"], stack["events"], until) if branch == "main" else fold_branch(stack)

    async def embed() -> Any:
        async with OpenAIEmbedder(LLMSettings(base_url=runtime.llm.base_url, model=runtime.embedding_model)) as embedder:
            return await embedder.embed([query])

    embeddings = asyncio.run(embed())
    result = recall(state.beliefs.values(), query, embeddings.vectors[0], state.last_timestamp or 0.0,
                    edges=state.edges.values(), reviews=state.review_items.values(), limit=limit)
    return as_json({"conversation": CONVERSATION, "branch": branch, "seq": state.last_seq,
                    "timestamp": state.last_timestamp, "limit": limit, "embedding_model": embeddings.model,
                    "query_fingerprint": embeddings.request_fingerprint, **recall_view(result)})


def test_memory_answers_the_recall_with_ranks_and_scores_equal_to_recall_itself(stack) -> None:
    with client(stack) as http:
        response = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer == expected_recall(stack, QUERY)
    assert answer["seq"] == len(stack["events"]) and answer["now"] == T0 + 20 * DAY
    items = {item["belief_id"]: item for item in answer["items"]}
    allergy = items["b-allergy"]
    assert allergy["bm25_rank"] is not None and allergy["vector_rank"] is not None
    assert allergy["fused"] == pytest.approx(1 / (60 + allergy["bm25_rank"]) + 1 / (60 + allergy["vector_rank"]))
    assert 0 < allergy["strength"] < 1  # twenty days old at the last event
    assert allergy["score"] == pytest.approx(allergy["fused"] * allergy["strength"])
    scores = [item["score"] for item in answer["items"]]
    assert scores == sorted(scores, reverse=True)
    # The contradiction of b-allergy by b-eats is an open review, shown with both statements.
    assert [(r["belief_id"], r["opposed_id"]) for r in answer["reviews"]] == [("b-eats", "b-allergy")]
    assert answer["reviews"][0]["review_id"].startswith("rv-")
    # "peanuts" is an edge node: the walk reaches epinephrine through the allergic reaction.
    assert {(e["src"], e["dst"]) for e in answer["edges"]} >= {("peanuts", "allergic reaction"),
                                                              ("allergic reaction", "epinephrine")}
    assert BELIEFS["b-allergy"][0] in answer["rendered"] and "epinephrine" in answer["rendered"]


def test_memory_at_a_past_seq_recalls_what_was_known_then(stack) -> None:
    with client(stack) as http:
        before = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY, "at": 6, "limit": 2})
        listed = http.get(f"/v1/conversations/{CONVERSATION}/beliefs", params={"at": 3}).json()
        reviews_then = http.get(f"/v1/conversations/{CONVERSATION}/reviews", params={"at": 7}).json()
    assert before.status_code == 200, before.text
    answer = before.json()
    assert answer == expected_recall(stack, QUERY, until=6, limit=2)
    assert answer["seq"] == 6 and len(answer["items"]) == 2 and answer["reviews"] == []
    assert "b-eats" not in {item["belief_id"] for item in answer["items"]}
    assert [b["belief_id"] for b in listed["beliefs"]] == ["b-allergy", "b-lisbon"] and listed["seq"] == 3
    assert reviews_then["count"] == 0


def test_a_branch_shows_its_own_memory_and_what_it_inherited(stack) -> None:
    with client(stack) as http:
        recalled = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY, "branch": "alt"})
        beliefs = http.get(f"/v1/conversations/{CONVERSATION}/beliefs", params={"branch": "alt"}).json()
        reviews = http.get(f"/v1/conversations/{CONVERSATION}/reviews", params={"branch": "alt"}).json()
        edges = http.get(f"/v1/conversations/{CONVERSATION}/edges", params={"branch": "alt", "at": FORK_SEQ}).json()
    assert recalled.status_code == 200, recalled.text
    assert recalled.json() == expected_recall(stack, QUERY, branch="alt")
    assert [b["belief_id"] for b in beliefs["beliefs"]] == ["b-allergy", "b-lisbon", "b-recipe", "b-cashew"]
    assert beliefs["branch"] == "alt" and beliefs["seq"] == FORK_SEQ + 2 and reviews["count"] == 0
    assert edges["count"] == 2 and edges["seq"] == FORK_SEQ


def test_beliefs_edges_and_reviews_list_the_projection_without_vectors(stack) -> None:
    state = fold(stack["key"], stack["events"])
    with client(stack) as http:
        beliefs = http.get(f"/v1/conversations/{CONVERSATION}/beliefs").json()
        edges = http.get(f"/v1/conversations/{CONVERSATION}/edges").json()
        reviews = http.get(f"/v1/conversations/{CONVERSATION}/reviews").json()
    assert [b["belief_id"] for b in beliefs["beliefs"]] == ["b-allergy", "b-lisbon", "b-recipe", "b-eats"]
    assert beliefs["count"] == 4 and beliefs["seq"] == edges["seq"] == reviews["seq"] == len(stack["events"])
    for view in beliefs["beliefs"]:
        projected = state.beliefs[view["belief_id"]]
        assert "embedding" not in view and view["embedding_dimensions"] == len(projected.embedding) // 4 > 0
        assert (view["kind"], view["about"], view["confidence"]) == (projected.kind, projected.about, projected.confidence)
        assert 0 < view["strength"] <= 1
    lisbon = next(b for b in beliefs["beliefs"] if b["belief_id"] == "b-lisbon")
    assert lisbon["confidence"] == pytest.approx(0.75) and lisbon["strength"] == 1.0  # reinforced at the last event
    assert [(e["src"], e["relation"], e["dst"]) for e in edges["edges"]] == [
        ("allergic reaction", "requires", "epinephrine"), ("peanuts", "cause", "allergic reaction")]
    assert reviews["count"] == 1
    review = reviews["reviews"][0]
    assert (review["belief_id"], review["opposed_id"], review["seq"]) == ("b-eats", "b-allergy", 8)
    assert review["statement"] == BELIEFS["b-eats"][0] and review["opposed_statement"] == BELIEFS["b-allergy"][0]


def test_state_and_diff_show_memory(stack) -> None:
    with client(stack) as http:
        state = http.get(f"/v1/conversations/{CONVERSATION}/state").json()
        change = http.get(f"/v1/conversations/{CONVERSATION}/diff", params={"from": 6, "to": 9}).json()
    beliefs = {b["belief_id"]: b for b in state["beliefs"]}
    assert beliefs["b-recipe"]["kind"] == "open_loop" and beliefs["b-recipe"]["about"] == "recipe"
    assert all(b["embedding_dimensions"] > 0 and "embedding" not in b for b in beliefs.values())
    assert [(r["belief_id"], r["opposed_id"]) for r in state["review_items"]] == [("b-eats", "b-allergy")]
    assert len(state["edges"]) == 2
    assert [b["belief_id"] for b in change["beliefs_added"]] == ["b-eats"]
    assert [(c["key"], c["before"], c["after"]) for c in change["beliefs_changed"]] == [
        ("b-lisbon", 0.7, pytest.approx(0.75))]
    assert change["edges_added"] == [] and change["changed"]


def test_bad_input_is_a_4xx_that_names_it(stack) -> None:
    path = f"/v1/conversations/{CONVERSATION}"
    last = len(stack["events"])
    with client(stack) as http:
        for query in ("", "   "):
            empty = http.get(f"{path}/memory", params={"query": query})
            assert empty.status_code == 400 and "query is empty" in empty.json()["detail"]
        missing = http.get(f"{path}/memory")
        assert missing.status_code == 422 and "query" in missing.text
        huge = http.get(f"{path}/memory", params={"query": "x" * (stack["settings"].max_message_bytes + 1)})
        assert huge.status_code == 413
        assert http.get(f"{path}/memory", params={"query": "peanuts", "limit": 0}).status_code == 422
        for route in ("memory", "beliefs", "edges", "reviews"):
            params = {"query": "peanuts"}
            beyond = http.get(f"{path}/{route}", params={**params, "at": last + 1})
            assert beyond.status_code == 404 and f"ends at seq {last}" in beyond.json()["detail"], route
            unknown = http.get(f"/v1/conversations/nowhere/{route}", params=params)
            assert unknown.status_code == 404 and "nowhere" in unknown.json()["detail"], route
            assert http.get(f"/v1/conversations/no.such/{route}", params=params).status_code == 400, route
            assert http.get(f"{path}/{route}", params={**params, "branch": "no.such"}).status_code == 400, route
            assert http.get(f"{path}/{route}", params={**params, "branch": "other"}).status_code == 404, route
            assert http.get(f"{path}/{route}", params={**params, "at": -1}).status_code == 422, route
    with client(stack, "globex") as other:  # another tenant cannot read acme's memory
        for route in ("memory", "beliefs", "edges", "reviews"):
            assert other.get(f"{path}/{route}", params={"query": "peanuts"}).status_code == 404, route
    with httpx.Client(base_url=stack["url"]) as anonymous:
        for route in ("memory", "beliefs", "edges", "reviews"):
            assert anonymous.get(f"{path}/{route}", params={"query": "peanuts"}).status_code == 401, route
        documented = anonymous.get("/openapi.json").json()["paths"]
        memory = documented["/v1/conversations/{conversation}/memory"]["get"]
        assert {p["name"] for p in memory["parameters"]} >= {"conversation", "query", "at", "branch", "limit"}


def test_an_embedder_that_is_down_is_a_prompt_503_with_retry_after(stack) -> None:
    from mirror.gateway.app import GatewayServer, create_app

    nowhere = LLMSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", model="gone", timeout_s=2, max_retries=1,
                          backoff_initial_s=0.01)
    with GatewayServer(create_app(replace(stack["settings"], embedder=nowhere))) as gateway:
        with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {stack['tokens']['acme']}"},
                          timeout=60) as http:
            started = time.monotonic()
            down = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY})
            elapsed = time.monotonic() - started
            assert down.status_code == 503 and down.headers["Retry-After"].isdigit(), down.text
            assert "embedder" in down.json()["detail"] and elapsed < 5
            # Listing needs no embedder, and neither does a past without vectors (seq 1: a turn only).
            assert http.get(f"/v1/conversations/{CONVERSATION}/beliefs").status_code == 200
            empty_past = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY, "at": 1})
            assert empty_past.status_code == 200 and empty_past.json()["items"] == []


def test_an_embedder_that_hangs_is_a_503_after_its_timeout_not_a_hang(stack) -> None:
    from mirror.gateway.app import GatewayServer, create_app
    from mirror.sim.server import SimLLMServer, SimSettings

    with SimLLMServer(SimSettings(latency="fixed:30000")) as slow:  # answers after 30 s
        stuck = LLMSettings(base_url=slow.base_url, model="mirror-sim", timeout_s=1, max_retries=0)
        with GatewayServer(create_app(replace(stack["settings"], embedder=stuck))) as gateway, \
                httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {stack['tokens']['acme']}"},
                             timeout=60) as http:
            started = time.monotonic()
            timed_out = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY})
            assert timed_out.status_code == 503 and "Retry-After" in timed_out.headers, timed_out.text
            assert time.monotonic() - started < 5


def mirror_cli(stack: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MIRROR_")}
    env["COLUMNS"] = "250"  # rich wraps at 80 columns when not on a terminal
    return subprocess.run(
        [sys.executable, "-m", "mirror", *args, "--url", stack["url"], "--token", stack["tokens"]["acme"]],
        capture_output=True, text=True, timeout=120, env=env, cwd=Path(__file__).parent,
    )


def test_the_memory_commands_print_what_the_api_answers(stack) -> None:
    with client(stack) as http:
        api = {route: http.get(f"/v1/conversations/{CONVERSATION}/{route}", params={"at": 8}).json()
               for route in ("beliefs", "edges", "reviews")}
        recalled = http.get(f"/v1/conversations/{CONVERSATION}/memory", params={"query": QUERY, "limit": 3}).json()

    searched = mirror_cli(stack, "memory", "search", CONVERSATION, QUERY, "--limit", "3", "--json")
    assert searched.returncode == 0, searched.stderr
    assert json.loads(searched.stdout) == recalled
    shown = mirror_cli(stack, "memory", "show", CONVERSATION, "--at", "8", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "conversation": CONVERSATION, "branch": "main", "seq": 8, "timestamp": api["beliefs"]["timestamp"],
        "beliefs": api["beliefs"]["beliefs"], "edges": api["edges"]["edges"], "reviews": api["reviews"]["reviews"],
    }
    reviews = mirror_cli(stack, "memory", "reviews", CONVERSATION, "--json")
    assert reviews.returncode == 0 and json.loads(reviews.stdout)["reviews"] == api["reviews"]["reviews"]

    table = mirror_cli(stack, "memory", "search", CONVERSATION, QUERY, "--limit", "3")
    assert table.returncode == 0, table.stderr
    for item in recalled["items"]:
        assert item["belief_id"] in table.stdout and f"{item['score']:.4f}" in table.stdout
    assert "what the Talker reads" in table.stdout and "epinephrine" in table.stdout
    shown_table = mirror_cli(stack, "memory", "show", CONVERSATION)
    assert shown_table.returncode == 0, shown_table.stderr
    on_main = [belief_id for belief_id in BELIEFS if belief_id != "b-cashew"]
    assert all(belief_id in shown_table.stdout for belief_id in on_main) and "b-cashew" not in shown_table.stdout
    assert "open reviews (1)" in shown_table.stdout
    unknown = mirror_cli(stack, "memory", "show", "nowhere")
    assert unknown.returncode == 2 and "404" in unknown.stderr and "nowhere" in unknown.stderr
