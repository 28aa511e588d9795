"""A reflection forced over HTTP through a live conversation: uvicorn gateway → conversation host or
dedicated actor (both placements) → NATS → ingester → DuckDB, the simulator as model (its portrait
repeats what the person said). `mirror reflect` as a real process against the same gateway.

The policy's gates hold for a forced reflection: the conversation's start counts as the last
reflection, so the first may run after the cooldown's 10 turns; after it, the next 10 turns are a
cooldown again. The refusal names the turns left and writes nothing. The forced ones run in
conversations without memory (no beliefs: no ``belief_burst`` reflection of their own first); one
with memory shows a reflection its beliefs triggered, with its decay decisions and cost.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import PLACEMENTS, gateway_stack

COOLDOWN = 10  # the default policy's (cognition/reflection/policy.py)


@pytest.fixture(scope="module", params=PLACEMENTS)
def stack(request: pytest.FixtureRequest, ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    with gateway_stack(nats_server.url, tmp_path_factory.mktemp("reflect"), shard="reflect", latency="fixed:0",
                       placement=request.param, reflection=True) as stack:
        yield stack


def client(stack: tuple[str, dict[str, str]], tenant: str = "acme") -> httpx.Client:
    url, tokens = stack
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[tenant]}"}, timeout=120)


def turn(http: httpx.Client, conversation: str, message: str, *, memory: bool | None = None) -> dict:
    body = {"message": message} if memory is None else {"message": message, "memory": memory}
    response = http.post(f"/v1/conversations/{conversation}/turns", params={"sync": "true"}, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def mirror_cli(stack: tuple[str, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    url, tokens = stack
    env = {name: value for name, value in os.environ.items() if not name.startswith("MIRROR_")}
    env["COLUMNS"] = "80"
    return subprocess.run([sys.executable, "-m", "mirror", *args, "--url", url, "--token", tokens["acme"]],
                          capture_output=True, text=True, timeout=300, env=env)


def test_a_forced_reflection_waits_out_the_cooldown_then_writes_a_portrait_of_what_was_said(stack) -> None:
    conversation = "reflect-forced"
    path = f"/v1/conversations/{conversation}"
    with client(stack) as http:
        turn(http, conversation, "I have a severe peanut allergy. I carry an epinephrine pen.", memory=False)
        early = http.post(f"{path}/reflect")
        assert early.status_code == 409, early.text
        refusal = early.json()
        assert refusal["reason"] == "cooldown" and refusal["turns_left"] == COOLDOWN - 1
        assert f"{COOLDOWN - 1} more turn(s)" in refusal["detail"]
        for index in range(COOLDOWN - 1):
            turn(http, conversation, f"I am planning dinner number {index} for my friends in Lisbon.")
        forced = http.post(f"{path}/reflect")
        assert forced.status_code == 200, forced.text
        result = forced.json()
        assert result["accepted"] and "forced" in result["triggers"] and result["tokens"] > 0
        assert "peanut" in result["portrait"]  # the simulator's portrait repeats what the person said
        again = http.post(f"{path}/reflect")
        assert again.status_code == 409 and again.json()["turns_left"] == COOLDOWN, again.text

        portrait = http.get(f"{path}/portrait").json()
        listed = http.get(f"{path}/reflections").json()
        assert portrait["portrait"] == result["portrait"] and portrait["portrait_seq"] == result["seq"]
        (view,) = [view for view in listed["reflections"] if view["seq"] == result["seq"]]
        assert view["triggers"] == result["triggers"] and view["accepted"]
        assert view["portrait_before"] is None and view["portrait_after"] == result["portrait"]
        assert view["cost"]["tokens"] == result["tokens"] and view["cost"]["ms"] == pytest.approx(result["ms"], abs=1e-3)
        assert any(line.startswith("+") and "peanut" in line for line in view["diff"])
        assert http.get(f"{path}/reflections/{view['number']}").json()["seq"] == result["seq"]

    refused = mirror_cli(stack, "reflect", conversation)
    assert refused.returncode == 2, refused.stdout
    assert "409" in refused.stderr and f"{COOLDOWN} more turn(s)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_mirror_reflect_shows_what_the_reflection_changed(stack) -> None:
    conversation = "reflect-cli"
    with client(stack) as http:
        for index in range(COOLDOWN):
            turn(http, conversation, f"My sister Ana visits on day {index}. She loves green tea.", memory=False)
    forced = mirror_cli(stack, "reflect", conversation)
    assert forced.returncode == 0, forced.stderr
    assert f"reflection 1 of {conversation} (main)" in forced.stdout and "forced" in forced.stdout
    assert "portrait:" in forced.stdout and "Ana" in forced.stdout
    shown = mirror_cli(stack, "portrait", conversation)
    assert shown.returncode == 0 and "Ana" in shown.stdout, shown.stderr


def test_beliefs_trigger_a_reflection_of_their_own_and_a_forced_one_then_waits(stack) -> None:
    conversation = "reflect-burst"
    path = f"/v1/conversations/{conversation}"
    facts = ["I live in Lisbon.", "I have a severe peanut allergy.", "My sister Ana loves green tea.",
             "I cook paella on Sundays.", "I work as a nurse at night.", "My dog is called Bolt.",
             "I play the cello badly.", "I am learning Japanese.", "I hate cilantro.", "I run every morning."]
    with client(stack) as http:
        for fact in facts:
            turn(http, conversation, fact)
        forced = http.post(f"{path}/reflect")  # waits for the thinking behind it: the due reflection ran first
        listed = http.get(f"{path}/reflections").json()
    assert forced.status_code == 409 and forced.json()["turns_left"] == COOLDOWN, forced.text
    (view,) = listed["reflections"]
    assert "belief_burst" in view["triggers"] and "forced" not in view["triggers"]
    assert view["cost"]["tokens"] > 0 and view["portrait_after"]
    table = mirror_cli(stack, "reflections", conversation)
    assert table.returncode == 0, table.stderr
    assert "belief_burst" in table.stdout and max(len(line) for line in table.stdout.splitlines()) <= 80
