"""Reading reflections over HTTP: a real gateway (uvicorn) → NATS → ingester → DuckDB; `mirror
portrait`, `mirror reflections` and `mirror replay diff` as real processes against it.

Reflection itself is not what is tested here, so the history is written as the writer would
write it (the hand-made log of ``tests/unit/test_reflection_view.py``: three reflections, one
with decay decisions and an overruled one, one rejected, a failed attempt) through the fenced
bus, and branch ``alt`` forked after reflection 2 with a reflection of its own. The expected
answers are computed beside the gateway from the same events with the read model and must be
equal, not close. A forced reflection through a live conversation is ``test_reflect_live.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.actors.settings import RuntimeSettings
from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Fork, Reflection
from mirror.gateway.routes.reflection import portrait_view
from mirror.processes import free_port
from mirror.projections.conversation import fold
from mirror.replay.reflections import reflection_history
from tests.support.stack import conversation_runtime, nats_of
from tests.unit.test_reflection_view import FIRST, SECOND, T0, events

CONVERSATION = "kitchen"
FORK_SEQ = 9  # branch "alt" forks after reflection 2 and reflects once more on its own
ALT_PORTRAIT = SECOND + " They also love jazz on Sundays."


async def seed(runtime: RuntimeSettings, key: StreamKey) -> tuple[list[Event], list[Event]]:
    main = events(key)
    alt = replace(key, branch="alt")
    branch = [make_event(alt, FORK_SEQ + 1, Fork("main", FORK_SEQ), turn=1, timestamp=T0 + 50),
              make_event(alt, FORK_SEQ + 2, Reflection(ALT_PORTRAIT, accepted=True, triggers=("review",), for_turn=1),
                         turn=1, timestamp=T0 + 51)]
    bus = await JetStreamBus.connect(nats_of(runtime).url, nats_of(runtime).stream)
    try:
        await bus.append(key, main, Head(0, 0))
        head = await bus.append(alt, branch, Head(FORK_SEQ, 0))
        assert await LogClient(bus.nc, shard=nats_of(runtime).shard).wait_committed(head.fence, 30)
    finally:
        await bus.close()
    return main, branch


@pytest.fixture(scope="module")
def stack(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A gateway (no Ray: reading is done from the log) with tenants acme and globex, and acme's seeded log."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("reflection-api")
    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in ("acme", "globex")}
    with conversation_runtime(nats_server.url, directory, shard="reflapi", reflection=True) as runtime:
        settings = GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json"))
        key = StreamKey("acme", CONVERSATION)
        main, branch = asyncio.run(seed(runtime, key))
        with GatewayServer(create_app(settings)) as gateway:
            yield {"url": gateway.url, "tokens": tokens, "settings": settings, "key": key, "main": main,
                   "branch": branch}


def client(stack: dict[str, Any], tenant: str = "acme") -> httpx.Client:
    return httpx.Client(base_url=stack["url"], headers={"Authorization": f"Bearer {stack['tokens'][tenant]}"},
                        timeout=60)


def as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def where(key: StreamKey, state: Any) -> dict[str, Any]:
    return {"conversation": key.conversation, "branch": key.branch, "seq": state.last_seq,
            "timestamp": state.last_timestamp}


def expected_reflections(stack: dict[str, Any], branch: str = "main", until: int | None = None) -> list[dict[str, Any]]:
    log = stack["main"] if branch == "main" else [*stack["main"][:FORK_SEQ], *stack["branch"]]
    found = reflection_history(log[:until])
    return [as_json(view.as_dict()) for view in found.reflections]


def test_the_portrait_at_any_seq_is_the_one_the_log_folds_to(stack) -> None:
    path = f"/v1/conversations/{CONVERSATION}/portrait"
    with client(stack) as http:
        answers = {at: http.get(path, params={"at": at}).json() for at in (4, 6, 10, 11)}
        last = http.get(path).json()
        alt = http.get(path, params={"branch": "alt"}).json()
    for at, answer in answers.items():
        state = fold(stack["main"][:at])
        assert answer == as_json({**where(stack["key"], state), **portrait_view(state)}), at
    assert answers[4]["portrait"] is None and answers[6]["portrait"] == FIRST
    assert answers[11]["portrait"] == SECOND and answers[11]["rejected"] == 1
    assert answers[11]["last_reflection"]["accepted"] is False and answers[11]["portrait_seq"] == 9
    assert last == answers[11]
    assert alt["portrait"] == ALT_PORTRAIT and alt["branch"] == "alt" and alt["reflections"] == 3


def test_reflections_list_each_with_its_triggers_diff_decisions_and_cost(stack) -> None:
    path = f"/v1/conversations/{CONVERSATION}/reflections"
    with client(stack) as http:
        listed = http.get(path).json()
        page = http.get(path, params={"after": 1, "limit": 1}).json()
        then = http.get(path, params={"at": 8}).json()
        alt = http.get(path, params={"branch": "alt"}).json()
    assert listed["reflections"] == expected_reflections(stack)
    assert listed["count"] == 3 and listed["seq"] == 11 and listed["next_after"] == 3
    second = listed["reflections"][1]
    assert second["triggers"] == ["periodic", "belief_burst"] and second["overruled"] == 1
    assert [d["belief_id"] for d in second["decisions"] if d["overruled"]] == ["b-allergy"]
    assert "+They host dinners on Saturdays and care about their guests." in second["diff"]
    assert [f["belief_id"] for f in second["forgotten"]] == ["b-jazz"]
    assert second["cost"] == {"model": "mirror-sim", "consolidation_prompt_tokens": 1500,
                              "consolidation_completion_tokens": 220, "consolidation_ms": 900.0, "decay_tokens": 300,
                              "decay_ms": 120.5, "tokens": 2020, "ms": 1020.5}
    assert [(f["seq"], f["error_type"]) for f in listed["failures"]] == [(8, "LLMTimeout")]
    assert [view["number"] for view in page["reflections"]] == [2] and page["next_after"] == 2
    assert then["count"] == 1 and then["seq"] == 8
    assert alt["reflections"] == expected_reflections(stack, "alt")
    assert [(view["number"], view["seq"]) for view in alt["reflections"]] == [(1, 6), (2, 9), (3, 11)]


def test_what_reflection_n_changed(stack) -> None:
    path = f"/v1/conversations/{CONVERSATION}/reflections"
    with client(stack) as http:
        second = http.get(f"{path}/2").json()
        alt = http.get(f"{path}/3", params={"branch": "alt"}).json()
        missing = http.get(f"{path}/4")
        zero = http.get(f"{path}/0")
    state = fold(stack["main"])
    assert second == {**as_json(where(stack["key"], state)), **expected_reflections(stack)[1]}
    assert alt["portrait_before"] == SECOND and alt["diff"][-1] == "+They also love jazz on Sundays."
    assert missing.status_code == 404 and "has no reflection 4: it has had 3" in missing.json()["detail"]
    assert zero.status_code == 404


def test_a_diff_across_a_reflection_shows_the_portrait_and_the_beliefs(stack) -> None:
    with client(stack) as http:
        change = http.get(f"/v1/conversations/{CONVERSATION}/diff", params={"from": 8, "to": 9}).json()
        state = http.get(f"/v1/conversations/{CONVERSATION}/state", params={"at": 9}).json()
    assert change["reflections"] == 1 and change["portrait_changed"]
    assert (change["beliefs_decayed"], change["beliefs_forgotten"]) == (1, 1)
    assert change["portrait_before"] == FIRST and change["portrait_after"] == SECOND
    assert [b["belief_id"] for b in change["beliefs_removed"]] == ["b-jazz"]
    assert state["portrait"] == SECOND and state["reflections"] == 2


def test_bad_input_is_a_4xx_that_names_it(stack) -> None:
    path = f"/v1/conversations/{CONVERSATION}"
    routes = ("portrait", "reflections", "reflections/1")
    with client(stack) as http:
        for route in routes:
            unknown = http.get(f"/v1/conversations/nowhere/{route}")
            assert unknown.status_code == 404 and "nowhere" in unknown.json()["detail"], route
            assert http.get(f"/v1/conversations/no.such/{route}").status_code == 400, route
            assert http.get(f"{path}/{route}", params={"branch": "no.such"}).status_code == 400, route
            assert http.get(f"{path}/{route}", params={"branch": "other"}).status_code == 404, route
        for route in ("portrait", "reflections"):
            beyond = http.get(f"{path}/{route}", params={"at": 12})
            assert beyond.status_code == 404 and "ends at seq 11" in beyond.json()["detail"], route
            assert http.get(f"{path}/{route}", params={"at": -1}).status_code == 422, route
        assert http.get(f"{path}/reflections", params={"limit": 0}).status_code == 422
        forced = http.post("/v1/conversations/nowhere/reflect")  # refused before any actor is involved
        assert forced.status_code == 404 and "nowhere" in forced.json()["detail"]
    with client(stack, "globex") as other:  # another tenant cannot read acme's reflections
        for route in routes:
            assert other.get(f"{path}/{route}").status_code == 404, route
        assert other.post(f"{path}/reflect").status_code == 404
    with httpx.Client(base_url=stack["url"]) as anonymous:
        for route in routes:
            assert anonymous.get(f"{path}/{route}").status_code == 401, route
        assert anonymous.post(f"{path}/reflect").status_code == 401
        documented = anonymous.get("/openapi.json").json()["paths"]
    assert {p["name"] for p in documented["/v1/conversations/{conversation}/portrait"]["get"]["parameters"]} >= {
        "conversation", "at", "branch"}
    assert "post" in documented["/v1/conversations/{conversation}/reflect"]
    assert "get" in documented["/v1/conversations/{conversation}/reflections/{number}"]


def test_a_broker_that_is_down_is_a_prompt_503_with_retry_after(stack) -> None:
    from mirror.gateway.app import GatewayServer, create_app

    gone = replace(stack["settings"].runtime, infrastructure=NatsInfrastructure(f"nats://127.0.0.1:{free_port()}"))
    with GatewayServer(create_app(replace(stack["settings"], runtime=gone))) as gateway, \
            httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {stack['tokens']['acme']}"},
                         timeout=60) as http:
        for method, route in (("POST", "reflect"), ("GET", "portrait"), ("GET", "reflections")):
            down = http.request(method, f"/v1/conversations/{CONVERSATION}/{route}")
            assert down.status_code == 503 and down.headers["Retry-After"].isdigit(), (route, down.text)


def mirror_cli(stack: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MIRROR_")}
    env["COLUMNS"] = "80"
    return subprocess.run(
        [sys.executable, "-m", "mirror", *args, "--url", stack["url"], "--token", stack["tokens"]["acme"]],
        capture_output=True, text=True, timeout=120, env=env, cwd=Path(__file__).parent,
    )


def test_the_commands_print_what_the_api_answers(stack) -> None:
    with client(stack) as http:
        portrait = http.get(f"/v1/conversations/{CONVERSATION}/portrait", params={"at": 9}).json()
        listed = http.get(f"/v1/conversations/{CONVERSATION}/reflections").json()
        second = http.get(f"/v1/conversations/{CONVERSATION}/reflections/2").json()
    shown = mirror_cli(stack, "portrait", CONVERSATION, "--at", "9", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == portrait
    assert json.loads(mirror_cli(stack, "reflections", CONVERSATION, "--json").stdout) == listed
    assert json.loads(mirror_cli(stack, "reflections", CONVERSATION, "2", "--json").stdout) == second

    text = mirror_cli(stack, "portrait", CONVERSATION)
    assert text.returncode == 0, text.stderr
    assert "the portrait of seq 9" in text.stdout and "They host dinners" in text.stdout
    table = mirror_cli(stack, "reflections", CONVERSATION)
    assert table.returncode == 0, table.stderr
    assert "3 reflection(s), 1 failed attempt(s)" in table.stdout and "1 forgotten" in table.stdout
    assert "failed at seq 8 (turn 1): LLMTimeout" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    detail = mirror_cli(stack, "reflections", CONVERSATION, "2")
    assert detail.returncode == 0, detail.stderr
    assert "+They host dinners on Saturdays and care about their guests." in detail.stdout
    assert "b-jazz" in detail.stdout and "protected" in detail.stdout
    diff = mirror_cli(stack, "replay", "diff", CONVERSATION, "--from", "8", "--to", "9")
    assert diff.returncode == 0, diff.stderr
    assert "reflections: +1 (+1 belief(s) decayed, +1 forgotten)" in diff.stdout and "portrait:" in diff.stdout
    unknown = mirror_cli(stack, "reflections", "nowhere")
    assert unknown.returncode == 2 and "404" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    missing = mirror_cli(stack, "reflections", CONVERSATION, "7")
    assert missing.returncode == 2 and "has no reflection 7" in missing.stderr
