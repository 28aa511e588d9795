"""Export and import through the whole stack (gateway, Ray hosts, ingester, nats-server, DuckDB):
the CLI writes an archive of a conversation, an admin imports it into another tenant, where it
verifies with zero model calls; refusals are 409 (exists), 400 (a corrupted archive, naming the
member) and 403 (a whole tenant without the admin scope)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.events.archive import read_archive
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.tenants import TenantRegistry
from mirror.replay.verify_log import verify_conversations
from tests.support.cli import run_main
from tests.support.stack import gateway_stack

pytestmark = pytest.mark.long  # a stack with Ray hosts: ~20 s


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], str]]:
    directory = tmp_path_factory.mktemp("transfer-api")
    with gateway_stack(nats_server.url, directory, shard="transfer", latency="fixed:0") as (url, tokens):
        tokens["admin"] = TenantRegistry(directory / "tenants.json").add("operator", admin=True)
        yield url, tokens, nats_server.url


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


async def verified(nats_url: str, tenant: str, conversation: str) -> list[tuple[bool, int]]:
    nc = await connect_nats(nats_url, name="test-transfer-verify")
    try:
        reports = await verify_conversations(LogClient(nc, shard="transfer"), tenant, conversation)
        return [(report.ok, report.model_calls) for report in reports]
    finally:
        await nc.close()


async def test_export_with_the_cli_and_import_into_another_tenant(
        stack: tuple[str, dict[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, tokens, nats_url = stack
    with client(url, tokens["acme"]) as acme, client(url, tokens["globex"]) as globex, \
            client(url, tokens["admin"]) as admin:
        for message in ("My name is Ada.", "my secret is a river (1)", "my secret is a river (2)"):
            assert acme.post("/v1/conversations/ada/turns", json={"message": message}).status_code == 200
        archive = tmp_path / "ada.tar"
        ran = run_main(monkeypatch, capsys, "export", "ada", "--output", str(archive), "--url", url, "--token", tokens["acme"])
        assert ran.code == 0, ran
        exported = read_archive(archive.read_bytes())  # checked whole
        assert exported.tenant == "acme" and exported.manifest["conversations"]["ada"]["events"] >= 3

        # Into acme again: it exists (409). Into globex with globex's own token: its own tenant.
        assert acme.post("/v1/import", content=archive.read_bytes()).status_code == 409
        assert globex.post("/v1/import?tenant=acme", content=archive.read_bytes()).status_code == 403
        ran = run_main(monkeypatch, capsys, "import", str(archive), "--json", "--url", url, "--token", tokens["globex"])
        assert ran.code == 0 and '"tenant": "globex"' in ran.out, ran
        assert globex.get("/v1/conversations/ada/events").json()["events"][-1]["seq"] == \
               exported.manifest["conversations"]["ada"]["branches"]["main"]["last_seq"]
        # The source and the copy both verify, with zero model calls.
        assert await verified(nats_url, "acme", "ada") == [(True, 0)]
        assert await verified(nats_url, "globex", "ada") == [(True, 0)]

        # A whole tenant: admin only; a corrupted archive names its member, nothing appended.
        assert acme.get("/v1/tenants/acme/export").status_code == 403
        whole = admin.get("/v1/tenants/acme/export")
        assert whole.status_code == 200 and whole.headers["content-type"] == "application/x-tar"
        spoilt = bytearray(whole.content)
        where = spoilt.index(b"My name is Ada.")
        spoilt[where] ^= 0x20
        refused = admin.post("/v1/import?tenant=initech", content=bytes(spoilt))
        assert refused.status_code == 400 and "events/ada/main.msgpack" in refused.json()["detail"], refused.text
        events = read_archive(whole.content).manifest["counts"]["events"]
        assert admin.post("/v1/import?tenant=initech", content=whole.content).json()["conversations"] == {"ada": events}
