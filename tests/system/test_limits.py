"""Per-tenant limits end to end: two gateway apps on one NATS (as two gateways of a deployment),
limits set with `mirror tenants limits`, over HTTP; the simulator slow enough to hold a turn open."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats.js.errors
import pytest

from mirror.events.nats.counters import BUCKET, JetStreamCounters
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
from mirror.gateway.limits import Usage, usage_key
from mirror.gateway.tenants import TenantRegistry
from mirror.stack.embedded import stack_file
from mirror.stack.machine import write_record
from tests.support.cli import run_main
from tests.support.stack import conversation_runtime, run
from tests.support.waits import until

pytestmark = pytest.mark.long  # ~22 s: two gateways on one broker; .ci/run runs it with -m long

TENANTS = ("rpm", "slots", "budget", "tasks", "live", "free")


@dataclass(frozen=True)
class Deployment:
    directory: Path
    settings: GatewaySettings
    urls: tuple[str, str]
    tokens: dict[str, str]
    nats_url: str

    def client(self, gateway: int, tenant: str) -> httpx.Client:
        return httpx.Client(base_url=self.urls[gateway], headers={"Authorization": f"Bearer {self.tokens[tenant]}"},
                            timeout=60)

    def usage(self, tenant: str) -> Usage:
        return run(_read_usage(self.nats_url, tenant))


async def _drop_bucket(url: str) -> None:
    nc = await connect_nats(url, name="mirror-test-limits")
    try:
        with contextlib.suppress(nats.js.errors.BucketNotFoundError, nats.js.errors.NotFoundError):
            await nc.jetstream().delete_key_value(BUCKET)
    finally:
        await nc.close()


async def _read_usage(url: str, tenant: str) -> Usage:
    nc = await connect_nats(url, name="mirror-test-limits")
    try:
        return Usage.decode(await JetStreamCounters(nc.jetstream()).read(usage_key(tenant)))
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def deployment(ray_cluster: None, nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("limits")
    run(_drop_bucket(nats_server.url))
    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in TENANTS}
    with conversation_runtime(nats_server.url, directory, shard="lim", latency="fixed:400") as runtime:
        settings = GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json"))
        with GatewayServer(create_app(settings)) as first, GatewayServer(create_app(settings)) as second:
            # What `mirror up` records, so `mirror tenants list --data` finds this deployment's broker.
            write_record(stack_file(directory), {"pid": os.getpid(), "nats_url": nats_server.url})
            yield Deployment(directory, settings, (first.url, second.url), tokens, nats_server.url)


def limits(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], deployment: Deployment, *args: str) -> str:
    ran = run_main(monkeypatch, capsys, "tenants", *args, "--data", str(deployment.directory))
    assert ran.code == 0, ran.err
    return ran.out


def test_requests_per_minute_hold_across_both_gateways(deployment: Deployment, monkeypatch, capsys) -> None:
    limits(monkeypatch, capsys, deployment, "limits", "rpm", "--rpm", "4")
    # Four requests must fall in one clock minute: start with enough of it left.
    until(lambda: 60 - time.time() % 60 > 20, "a minute with 20 s left")
    with deployment.client(0, "rpm") as first, deployment.client(1, "rpm") as second:
        answered = [(first if n % 2 else second).get("/v1/conversations") for n in range(4)]
        assert [r.status_code for r in answered] == [200] * 4
        assert [r.headers["x-ratelimit-limit-requests"] for r in answered] == ["4"] * 4
        assert [r.headers["x-ratelimit-remaining-requests"] for r in answered] == ["3", "2", "1", "0"]
        assert answered[0].headers["x-ratelimit-reset-requests"].endswith("s")
        assert "x-ratelimit-limit-tokens" not in answered[0].headers  # no token budget set
        for client in (first, second):
            refused = client.get("/v1/conversations")
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert refused.headers["x-ratelimit-remaining-requests"] == "0"
            body = refused.json()
            assert body["limit"] == "requests_per_minute" and body["value"] == 4 and "rpm" in body["detail"]
        openai = first.post("/v1/chat/completions", json={"model": "mirror", "user": "chat",
                                                          "messages": [{"role": "user", "content": "hi"}]})
        assert openai.status_code == 429 and "retry-after" in openai.headers
        error = openai.json()["error"]
        assert (error["type"], error["code"], error["param"]) == ("rate_limit_error", "rate_limit_exceeded", None)
        assert "requests per minute" in error["message"]
    with deployment.client(1, "free") as free:  # a tenant without limits: nothing counted, no headers
        plain = free.get("/v1/conversations")
        assert plain.status_code == 200 and "x-ratelimit-limit-requests" not in plain.headers


def test_a_turn_running_on_one_gateway_holds_the_only_slot_on_the_other(deployment: Deployment, monkeypatch, capsys) -> None:
    limits(monkeypatch, capsys, deployment, "limits", "slots", "--concurrent-turns", "1")
    with deployment.client(0, "slots") as first, deployment.client(1, "slots") as second, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(first.post, "/v1/conversations/long/turns", json={"message": "take your time"})
        until(lambda: len(deployment.usage("slots").current(time.time(), 300).turns) == 1,
              "the first turn holding its slot")
        refused = second.post("/v1/conversations/other/turns", json={"message": "me too"})
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "1" and refused.json()["limit"] == "concurrent_turns"
        assert (refused.headers["x-ratelimit-limit-concurrent-turns"],
                refused.headers["x-ratelimit-remaining-concurrent-turns"]) == ("1", "0")
        answered = running.result()
        assert answered.status_code == 200
        assert answered.headers["x-ratelimit-remaining-concurrent-turns"] == "0"  # this turn's own slot
        assert "limits;dur=" in answered.headers["server-timing"]
        # Freed before the first turn's answer was complete: the next turn, at once, gets the slot.
        assert second.post("/v1/conversations/other/turns", json={"message": "now me"}).status_code == 200
    assert deployment.usage("slots").turns == {}


def test_a_spent_token_budget_refuses_the_next_turn_on_every_gateway_and_after_a_restart(
        deployment: Deployment, monkeypatch, capsys) -> None:
    assert "budget\tlimits\ttokens_per_day 1" in limits(monkeypatch, capsys, deployment, "limits", "budget",
                                                        "--tokens-per-day", "1")
    completion = {"model": "mirror", "messages": [{"role": "user", "content": "hello"}]}
    with deployment.client(0, "budget") as first, deployment.client(1, "budget") as second:
        allowed = first.post("/v1/chat/completions", json=completion, headers={"X-Mirror-Conversation": "spend"})
        assert allowed.status_code == 200, allowed.text
        assert (allowed.headers["x-ratelimit-limit-tokens"], allowed.headers["x-ratelimit-remaining-tokens"]) == ("1", "1")
        spent = allowed.json()["usage"]["prompt_tokens"] + allowed.json()["usage"]["completion_tokens"]
        until(lambda: deployment.usage("budget").tokens == spent, "the turn's tokens counted on the broker")
        refused = second.post("/v1/chat/completions", json=completion, headers={"X-Mirror-Conversation": "spend"})
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-ratelimit-remaining-tokens"] == "0"
        error = refused.json()["error"]
        assert (error["type"], error["code"], error["param"]) == ("insufficient_quota", "insufficient_quota", None)
        native = second.post("/v1/conversations/spend/turns", json={"message": "again"})
        assert native.status_code == 429 and native.json()["limit"] == "tokens_per_day"
    listed = limits(monkeypatch, capsys, deployment, "list")
    assert f"budget\tlimits\ttokens_per_day 1 (used {spent})" in listed
    assert "free\tlimits\tnone" in listed
    # A gateway started afresh (a restart) finds the count on the broker, not in a process.
    with GatewayServer(create_app(deployment.settings)) as restarted, httpx.Client(
            base_url=restarted.url, headers={"Authorization": f"Bearer {deployment.tokens['budget']}"}, timeout=60) as client:
        assert client.post("/v1/conversations/spend/turns", json={"message": "after restart"}).status_code == 429
    limits(monkeypatch, capsys, deployment, "limits", "budget", "--clear")
    with deployment.client(1, "budget") as second:
        again = second.post("/v1/conversations/spend/turns", json={"message": "unlimited again"})
        assert again.status_code == 200 and "x-ratelimit-limit-tokens" not in again.headers


def test_a_front_ends_background_task_spends_the_token_budget_its_turns_are_refused_by(
        deployment: Deployment, monkeypatch, capsys) -> None:
    limits(monkeypatch, capsys, deployment, "limits", "tasks", "--tokens-per-day", "1")
    title = {"model": "mirror", "messages": [{"role": "user", "content": "Write a title for: hello"}]}
    with deployment.client(0, "tasks") as first, deployment.client(1, "tasks") as second:
        answered = first.post("/v1/chat/completions", json=title, headers={"X-Mirror-Task": "background"})
        assert answered.status_code == 200, answered.text
        assert answered.headers["x-mirror-task"] == "background"
        assert answered.headers["x-ratelimit-remaining-tokens"] == "1"  # judged before its call, as a turn is
        spent = answered.json()["usage"]["total_tokens"]
        assert spent > 0
        until(lambda: deployment.usage("tasks").tokens == spent, "the background task's tokens counted on the broker")
        refused = second.post("/v1/conversations/after-title/turns", json={"message": "hi"})
        assert refused.status_code == 429 and refused.json()["limit"] == "tokens_per_day"
        again = second.post("/v1/chat/completions", json=title, headers={"X-Mirror-Task": "background"})
        assert again.status_code == 429 and again.json()["error"]["code"] == "insufficient_quota"
    assert deployment.usage("tasks").tokens == spent  # refusals spend nothing


def test_live_conversations_admit_the_live_ones_and_refuse_a_new_one(deployment: Deployment, monkeypatch, capsys) -> None:
    limits(monkeypatch, capsys, deployment, "limits", "live", "--live-conversations", "1")
    with deployment.client(0, "live") as first, deployment.client(1, "live") as second:
        assert first.post("/v1/conversations/one/turns", json={"message": "hi"}).status_code == 200
        refused = second.post("/v1/conversations/two/turns", json={"message": "hi"})
        assert refused.status_code == 429 and refused.json()["limit"] == "live_conversations"
        assert 1 <= int(refused.headers["retry-after"]) <= deployment.settings.runtime.passivate_after_s
        again = second.post("/v1/conversations/one/turns", json={"message": "again"})
        assert again.status_code == 200
        assert (again.headers["x-ratelimit-limit-live-conversations"],
                again.headers["x-ratelimit-remaining-live-conversations"]) == ("1", "0")
    assert "live\tlimits\tlive_conversations 1 (used 1)" in limits(monkeypatch, capsys, deployment, "list")
    assert json.loads((deployment.directory / "tenants.json").read_text())["limits"]["live"] == {"live_conversations": 1}
