"""``DELETE /v1/tenants/{tenant}`` and ``mirror tenants remove`` through the whole stack (gateway,
Ray hosts, two shards' ingester processes, nats-server, DuckDB): only an admin token of another
tenant may; the job is polled until every shard has swept; afterwards the tenant's token is gone,
its conversations are 410, not a byte of its canary is in the logs or the persona bucket, and the
other tenant's conversation (on the other shard) still verifies with zero model calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.tenants import TenantRegistry
from mirror.harness.bench.erasure_residue import scan
from mirror.replay.verify_log import verify_conversations
from tests.support.cli import run_main
from tests.support.stack import gateway_stack

pytestmark = pytest.mark.long  # a stack with Ray hosts and two ingesters: ~30 s

GONE_CANARY, KEPT_CANARY = "canary-0f3a-tenant-erase", "canary-c4d9-tenant-keep"


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path, EmbeddedNats]]:
    directory = tmp_path_factory.mktemp("forget-tenant-api")
    with gateway_stack(nats_server.url, directory, shard="0", latency="fixed:0", shard_map=("1=globex",)) as (url, tokens):
        tokens["admin"] = TenantRegistry(directory / "tenants.json").add("operator", admin=True)
        yield url, tokens, directory, nats_server


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


async def verified(nats_url: str) -> list[bool]:
    nc = await connect_nats(nats_url, name="test-forget-tenant-verify")
    try:
        return [report.ok for report in await verify_conversations(LogClient(nc, shard="1"), "globex", "kept")]
    finally:
        await nc.close()


def test_removing_a_tenant_over_http_and_the_cli(stack: tuple[str, dict[str, str], Path, EmbeddedNats],
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url, tokens, directory, server = stack
    with client(url, tokens["acme"]) as acme, client(url, tokens["globex"]) as globex, client(url, tokens["admin"]) as admin:
        card = {"spec": "chara_card_v2", "data": {"name": "Wren", "description": f"knows {GONE_CANARY}"}}
        assert acme.post("/v1/personas", content=json.dumps(card), headers={"Content-Type": "application/json"}).status_code == 201
        for conversation in ("one", "two"):
            for n in range(2):
                answer = acme.post(f"/v1/conversations/{conversation}/turns", json={"message": f"{GONE_CANARY} {n}"})
                assert answer.status_code == 200, answer.text
        assert globex.post("/v1/conversations/kept/turns", json={"message": KEPT_CANARY}).status_code == 200

        assert globex.delete("/v1/tenants/acme").status_code == 403  # not an admin token
        assert admin.delete("/v1/tenants/operator").status_code == 409  # its own tenant
        assert admin.delete("/v1/tenants/nobody").status_code == 404
        assert admin.delete("/v1/tenants/bad.name").status_code in (400, 422)
        assert admin.get("/v1/tenants/acme/forget").status_code == 404  # never forgotten

        ran = run_main(monkeypatch, capsys, "tenants", "remove", "acme", "--url", url, "--token", tokens["admin"])
        assert ran.code == 0 and ran.out.startswith("forgot tenant acme: 2 conversation(s)"), ran
        job = admin.get("/v1/tenants/acme/forget").json()
        assert job["status"] == "forgotten" and job["shards"] == {"0": "forgotten", "1": "forgotten"}
        assert admin.delete("/v1/tenants/acme").status_code == 200  # again: the finished job

        assert acme.get("/v1/conversations").status_code == 401  # its token is gone
        assert admin.get("/v1/personas").json()["personas"] == []
        assert "acme" not in TenantRegistry(directory / "tenants.json").tenants()
        assert globex.post("/v1/conversations/kept/turns", json={"message": "still here"}).status_code == 200

    assert len(list(directory.rglob("*.duckdb"))) == 2  # a log file per shard, both scanned
    assert scan(directory, GONE_CANARY.encode()) == {}  # every file of the stack's directory
    assert any(".duckdb" in name for name in scan(directory, KEPT_CANARY.encode()))
    personas = next(server.store_dir.rglob("KV_mirror_personas"))
    assert scan(personas, GONE_CANARY.encode()) == {}
    assert asyncio.run(verified(server.url)) == [True]


def test_the_cli_without_waiting(stack: tuple[str, dict[str, str], Path, EmbeddedNats],
                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url, tokens, directory, _ = stack
    token = TenantRegistry(directory / "tenants.json").add("initech")
    with client(url, token) as initech:
        assert initech.post("/v1/conversations/c/turns", json={"message": "hello"}).status_code == 200
    ran = run_main(monkeypatch, capsys, "tenants", "remove", "initech", "--no-wait", "--json", "--url", url,
                   "--token", tokens["admin"])
    assert ran.code == 0, ran
    job = json.loads(ran.out)
    assert job["job"] == "forget-tenant-initech" and job["conversations"] == 1 and job["poll"] == "/v1/tenants/initech/forget"
    refused = run_main(monkeypatch, capsys, "tenants", "remove", "initech", "--url", url, "--token", tokens["globex"])
    assert refused.code != 0
