"""``DELETE /v1/conversations/{id}`` through the whole stack (gateway, Ray hosts, ingester
process, nats-server, DuckDB): a job to poll, a 410 for the forgotten conversation afterwards,
not a byte of its canary in the log's files, and the other conversation still verifying with
zero model calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.harness.bench.erasure_residue import scan
from mirror.replay.verify_log import verify_conversations
from tests.support.cli import run_main
from tests.support.stack import gateway_stack
from tests.support.waits import until

pytestmark = pytest.mark.long  # a stack with Ray hosts: ~20 s

GONE_CANARY, KEPT_CANARY = "canary-5e0c-erase-me", "canary-a77f-keep-me"


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path, str]]:
    directory = tmp_path_factory.mktemp("forget-api")
    with gateway_stack(nats_server.url, directory, shard="forget", latency="fixed:0") as (url, tokens), \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['acme']}"}, timeout=60) as client:
        yield client, directory, nats_server.url


def turn(client: httpx.Client, conversation: str, message: str) -> httpx.Response:
    return client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})


async def verified(nats_url: str, conversation: str) -> list[bool]:
    nc = await connect_nats(nats_url, name="test-forget-verify")
    try:
        reports = await verify_conversations(LogClient(nc, shard="forget"), "acme", conversation)
        return [report.ok for report in reports]
    finally:
        await nc.close()


def test_mirror_forget_waits_for_the_sweep(stack: tuple[httpx.Client, Path, str], monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    client, _, _ = stack
    assert turn(client, "by-cli", f"my secret is {GONE_CANARY}").status_code == 200
    token = client.headers["Authorization"].removeprefix("Bearer ")
    ran = run_main(monkeypatch, capsys, "forget", "by-cli", "--url", str(client.base_url), "--token", token)
    assert ran.code == 0 and ran.out.startswith("forgot by-cli:"), ran
    assert client.get("/v1/conversations/by-cli/forget").json()["status"] == "forgotten"
    assert run_main(monkeypatch, capsys, "forget", "no.such", "--url", str(client.base_url), "--token", token).code == 2


def test_forgetting_over_http(stack: tuple[httpx.Client, Path, str]) -> None:
    client, directory, nats_url = stack
    for n in range(3):
        assert turn(client, "gone", f"my secret is {GONE_CANARY} ({n})").status_code == 200
        assert turn(client, "kept", f"my secret is {KEPT_CANARY} ({n})").status_code == 200
    assert client.get("/v1/conversations/gone/forget").status_code == 404
    assert client.delete("/v1/conversations/never-was").status_code == 404

    answer = client.delete("/v1/conversations/gone")
    assert answer.status_code in (200, 202), answer.text
    job = answer.json()
    assert job["job"] == "forget-gone" and job["events"] > 0 and job["poll"] == "/v1/conversations/gone/forget"
    until(lambda: client.get(job["poll"]).json()["status"] == "forgotten", "the sweep to finish", timeout=60)

    assert turn(client, "gone", "are you there?").status_code == 410
    assert client.get("/v1/conversations/gone/events").status_code == 410
    assert client.delete("/v1/conversations/gone").status_code == 200  # forgetting again: the finished job
    assert "gone" not in [c["id"] for c in client.get("/v1/conversations").json()["conversations"]]

    logs = [path for path in directory.rglob("*") if path.is_file() and ".duckdb" in path.name]
    assert logs and not any(scan(path.parent, GONE_CANARY.encode()) for path in logs)
    assert any(scan(path.parent, KEPT_CANARY.encode()) for path in logs)
    assert asyncio.run(verified(nats_url, "kept")) == [True]
