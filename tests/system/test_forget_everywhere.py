"""Forgetting reaches every place a conversation's words go, through the whole stack (gateway, Ray
hosts, ingester process, its own nats-server, DuckDB): canaries put in a conversation's memory
(beliefs and edges its thinking wrote), a persona conversation's card and persona steps, and a
recompute branch are found before and 0 times after, in every file under the data directory but
the stream's block files' known gap; another conversation's canary is still there, and it still
verifies with zero model calls. Then a forget that lands while a slow turn and a recompute run on
the conversation: nothing comes back, and the recompute job ends failed, saying why."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats.js.errors
import pytest

from mirror.cognition.persona import EXAMPLES
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.harness.bench.erasure_residue import scan
from mirror.replay.verify_log import verify_conversations
from tests.support.stack import gateway_stack
from tests.support.waits import until, until_async

pytestmark = pytest.mark.long  # a stack with Ray hosts and thinking: ~40 s

SHARD = "everywhere"
MEMORY_CANARY, PERSONA_CANARY, CARD_CANARY = "canary-3a9e-memory", "canary-b21c-persona", "canary-77d0-card"
BRANCH_CANARY, RACE_CANARY, KEPT_CANARY = "canary-c4f1-branch", "canary-e8a2-race", "canary-0d5b-kept"
GONE = (MEMORY_CANARY, PERSONA_CANARY, CARD_CANARY, BRANCH_CANARY)
LATENCY_MS = 300
"""Each model call's, so a turn (~5 calls with its thinking) and a recompute take long enough to be forgotten mid-way."""
RACE_TURNS = 5


@pytest.fixture(scope="module")
def stack(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path, str]]:
    directory = tmp_path_factory.mktemp("forget-everywhere")
    with EmbeddedNats(directory / "nats") as server, \
            gateway_stack(server.url, directory, shard=SHARD, latency=f"fixed:{LATENCY_MS}") as (url, tokens), \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme']}"}, timeout=120) as client:
        yield client, directory, server.url


def turn(client: httpx.Client, conversation: str, message: str, **body: Any) -> httpx.Response:
    return client.post(f"/v1/conversations/{conversation}/turns", params={"sync": "true"},
                       json={"message": message, **body})


def events(client: httpx.Client, conversation: str, branch: str = "main") -> list[dict[str, Any]]:
    answer = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000, "branch": branch})
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["events"]
    return found


def holding(found: list[dict[str, Any]], canary: str) -> set[str]:
    """The types of the events whose payload holds ``canary``."""
    return {event["type"] for event in found if canary in json.dumps(event["payload"])}


def thought(client: httpx.Client, conversation: str, turns: int) -> None:
    """Until the memory stage of the conversation's last turn is committed."""
    until(lambda: any(e["type"] == "memory_step" and e["turn"] == turns - 1 for e in events(client, conversation)),
          f"the thinking of {conversation}", timeout=60)


def changed_controller() -> dict[str, str]:
    text = (DEFAULT_PROMPT_SETS / "default" / "controller.md").read_text()
    return {"controller.md": text + "\nI keep it brief.\n"}


def forget(client: httpx.Client, conversation: str) -> None:
    answer = client.delete(f"/v1/conversations/{conversation}")
    assert answer.status_code in (200, 202), answer.text
    until(lambda: client.get(answer.json()["poll"]).json()["status"] == "forgotten", f"{conversation} swept", timeout=90)


def residue(directory: Path, canary: str) -> dict[str, int]:
    """Where ``canary`` is left, but the events stream's block files: messages the ingester compacted
    (purged) before the forget keep their bytes there until nats-server retires the block, a known
    gap (docs/operations.md, "Forgetting and retention") that the stream's encryption closes."""
    stream = f"streams{Path('/').as_posix()}MIRROR{Path('/').as_posix()}"
    return {name: count for name, count in scan(directory, canary.encode()).items()
            if not (stream in name and name.endswith(".blk"))}


async def verified(nats_url: str, conversation: str) -> list[tuple[bool, int]]:
    nc = await connect_nats(nats_url, name="test-forget-everywhere")
    try:
        reports = await verify_conversations(LogClient(nc, shard=SHARD), "acme", conversation)
        return [(report.ok, report.model_calls) for report in reports]
    finally:
        await nc.close()


async def stream_clear(nats_url: str, conversation: str) -> bool:
    """Whether the stream holds no message of the conversation (any branch)."""
    nc = await connect_nats(nats_url, name="test-forget-everywhere")
    try:
        try:
            await nc.jetstream().get_last_msg("MIRROR", f"mirror.acme.{conversation}.*")
        except nats.js.errors.NotFoundError:
            return True
        return False
    finally:
        await nc.close()


def test_memory_persona_and_recompute_branch_are_forgotten(stack: tuple[httpx.Client, Path, str]) -> None:
    client, directory, nats_url = stack
    # Memory: the simulator's memory stage makes a belief of each sentence and an edge of "X because Y".
    memory = f"I keep {MEMORY_CANARY} in the drawer because {MEMORY_CANARY} calms me down."
    assert turn(client, "remembers", memory).status_code == 200
    assert turn(client, "remembers", f"The drawer with {BRANCH_CANARY} is locked tonight.").status_code == 200
    thought(client, "remembers", 2)
    assert {"belief", "edge"} <= holding(events(client, "remembers"), MEMORY_CANARY)
    # A recompute branch of it.
    done = client.post("/v1/recompute", params={"wait": "true"},
                       json={"prompts": changed_controller(), "conversations": ["remembers"]})
    assert done.status_code == 200 and done.json()["report"]["completed"] == 1, done.text
    branch = done.json()["report"]["branch"]
    assert {"turn", "belief"} <= holding(events(client, "remembers", branch), BRANCH_CANARY)  # the branch's own copies
    # A persona conversation: its own card (given inline, so not in the tenant's persona store).
    card = json.loads((EXAMPLES / "wren.json").read_text())
    card["data"]["description"] = f"{card['data']['description']} Her keepsake is {CARD_CANARY}."
    assert turn(client, "in-character", f"Tell me about {PERSONA_CANARY} and the old lighthouse.",
                mind="persona", persona=card).status_code == 200
    persona_events = events(client, "in-character")
    assert "persona" in holding(persona_events, CARD_CANARY)
    assert holding(persona_events, PERSONA_CANARY) - {"turn"}, "the persona steps hold the message"
    # Another conversation, kept.
    assert turn(client, "kept", f"My locker code is {KEPT_CANARY} and it never changes.").status_code == 200
    thought(client, "kept", 1)
    for canary in GONE:
        assert scan(directory, canary.encode()), canary

    forget(client, "remembers")
    forget(client, "in-character")

    assert client.get("/v1/conversations/remembers/events", params={"branch": branch}).status_code == 410
    assert turn(client, "in-character", "Still there?").status_code == 410
    left = {canary: where for canary in GONE if (where := residue(directory, canary))}
    assert left == {}, left
    assert residue(directory, KEPT_CANARY)
    assert asyncio.run(verified(nats_url, "kept")) == [(True, 0)]


def test_forgetting_while_a_turn_and_a_recompute_run(stack: tuple[httpx.Client, Path, str]) -> None:
    client, directory, nats_url = stack
    assert turn(client, "kept-racing", f"My spare key is {KEPT_CANARY} too.").status_code == 200
    for n in range(RACE_TURNS):
        assert turn(client, "racing", f"Note {n}: {RACE_CANARY} is behind the blue door.").status_code == 200
    thought(client, "racing", RACE_TURNS)
    # A recompute of every turn (a live controller call each) and a new turn with its thinking.
    job = client.post("/v1/recompute", json={"prompts": changed_controller(), "conversations": ["racing"],
                                             "branch": "slow"}).json()
    outcome: dict[str, httpx.Response] = {}
    turning = threading.Thread(target=lambda: outcome.setdefault("turn", turn(
        client, "racing", f"One more: {RACE_CANARY} again, slowly.")))
    turning.start()
    until(lambda: client.get("/v1/conversations/racing/events", params={"branch": "slow"}).status_code == 200,
          "the recompute's branch to begin", timeout=60)

    forget(client, "racing")
    turning.join(timeout=120)
    assert not turning.is_alive()
    assert outcome["turn"].status_code in (200, 410, 503), outcome["turn"].text

    status = until(lambda: (s := client.get(f"/v1/recompute/{job['job']}").json())["status"] != "running" and s,
                   "the recompute job to end", timeout=120)
    # One conversation, forgotten mid-way: its result is a failure saying so, and no branch is reported.
    assert status["status"] == "done" and status["report"]["failed"] == 1, status
    assert "ConversationForgotten" in status["report"]["results"][0]["error"], status
    assert client.get("/v1/conversations/racing/events").status_code == 410
    assert turn(client, "racing", "and now?").status_code == 410
    # Whatever the turn's thinking or the recompute wrote after the sweep reached the stream too: the
    # ingester dropped it and erased its stream copies (the scan above cannot see the stream's blocks).
    assert asyncio.run(until_async(lambda: stream_clear(nats_url, "racing"), "the late writes erased", timeout=60))
    assert residue(directory, RACE_CANARY) == {}
    assert asyncio.run(verified(nats_url, "kept-racing")) == [(True, 0)]
