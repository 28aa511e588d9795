"""The options of a deployment over several machines (`up --bind/--advertise/--nats-url/--ingest`,
`nats --routes`, `node`): a combination that cannot work is one line naming the option, exit
status 2, before anything starts; `--show-config` shows what would run."""

from __future__ import annotations

import json

import pytest

from mirror.stack.addresses import advertised_host, check_reachable, nats_urls
from mirror.stack.embedded import StackSettings
from mirror.stack.errors import InvalidSettings
from tests.support.cli import run_main

CLUSTER = "nats://10.0.0.10:4222,nats://10.0.0.11:4222,nats://10.0.0.12:4222"


@pytest.mark.parametrize(("args", "option", "words"), [
    (("up", "--nats-url", CLUSTER, "--nats-cluster", "3"), "--nats-cluster", "runs already"),
    (("up", "--nats-url", CLUSTER, "--nats-port", "4333"), "--nats-port", "runs already"),
    (("up", "--nats-url", CLUSTER, "--nats-sync", "2m"), "--nats-sync", "runs already"),
    (("up", "--nats-url", "nats://10.0.0.10"), "--nats-url", "nats://HOST:PORT"),
    (("up", "--nats-url", "http://10.0.0.10:4222"), "--nats-url", "nats://HOST:PORT"),
    (("up", "--nats-url", "nats://10.0.0.10:4222,"), "--nats-url", "not a list of NATS URLs"),
    (("up", "--bind", "0.0.0.0"), "--advertise", "names no machine"),
    (("up", "--bind", "mirror-head"), "--bind", "not an IPv4 address"),
    (("up", "--bind", "0.0.0.0", "--advertise", "10.0.0.10:8080"), "--advertise", "without scheme or port"),
    (("up", "--bind", "10.0.0.10", "--advertise", "127.0.0.1"), "--advertise", "listen on 10.0.0.10 only"),
    (("up", "--bind", "10.0.0.10", "--nats-url", "nats://127.0.0.1:4222"), "--nats-url", "loopback"),
    (("up", "--bind", "10.0.0.10", "--llm", "http://localhost:8099/v1"), "--llm", "loopback"),
    (("up", "--ingest", "1"), "--ingest", "not in the shard map"),
    (("nats", "--routes", "nats://10.0.0.10:6222"), "--name", "needs a name"),
    (("nats", "--name", "mirror-h"), "--name", "give --routes too"),
    (("nats", "--cluster-port", "7222"), "--cluster-port", "give --routes too"),
    (("nats", "--routes", "nats://10.0.0.10:6222", "--name", "h", "--cluster", "3"), "--cluster", "one or the other"),
    (("nats", "--routes", "10.0.0.10:6222", "--name", "h"), "--routes", "nats://HOST:PORT"),
    (("nats", "--routes", "nats://10.0.0.10:6222", "--name", "mirror h"), "--name", "not a server name"),
    (("nats", "--bind", "10.0.0.10", "--routes", "nats://127.0.0.1:6222", "--name", "h"), "--routes", "loopback"),
    (("node", "--ray-address", "10.0.0.10"), "--ray-address", "not HOST:PORT"),
    (("node", "--ray-address", "10.0.0.10:6379", "--ingest", "1", "--ingest", "1"), "--ingest", "given twice"),
    (("node", "--ray-address", "10.0.0.10:6379", "--bind", "0.0.0.0"), "--advertise", "names no machine"),
    (("node", "--ray-address", "10.0.0.10:6379", "--bind", "10.0.0.11", "--nats-url", "nats://127.0.0.1:4222"),
     "--nats-url", "loopback"),
])
def test_a_combination_that_cannot_work_is_one_line_naming_the_option(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], option: str,
        words: str) -> None:
    for name in ("MIRROR_BIND", "MIRROR_ADVERTISE", "MIRROR_NATS_URL", "MIRROR_NATS_CLUSTER", "MIRROR_NATS_SYNC"):
        monkeypatch.delenv(name, raising=False)
    ran = run_main(monkeypatch, capsys, *args, *(("--show-config",) if args[0] != "nats" else ()))
    assert ran.code == 2 and ran.out == "", ran
    (line,) = ran.err.splitlines()
    assert line.startswith(f"mirror: error: {option}: ") and words in line, line


def test_up_shows_what_it_would_run_on_the_head(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MIRROR_BIND", "0.0.0.0")  # environment, as the flags
    ran = run_main(monkeypatch, capsys, "up", "--advertise", "head.example", "--nats-url", CLUSTER,
                   "--llm", "http://10.0.0.10:8099/v1", "--shard-map", "1=acme", "--ingest", "0", "--show-config")
    assert ran.code == 0, ran.err
    shown = json.loads(ran.out)
    assert shown["bind"] == "0.0.0.0" and shown["advertise"] == "head.example"
    assert shown["nats_url"] == CLUSTER and shown["ingest"] == ["0"]
    defaults = json.loads(run_main(monkeypatch, capsys, "up", "--bind", "127.0.0.1", "--show-config").out)
    assert defaults["advertise"] == "127.0.0.1" and defaults["nats_url"] is None and defaults["ingest"] == ["0"]


def test_node_shows_what_it_would_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_main(monkeypatch, capsys, "node", "--ray-address", "10.0.0.10:6379", "--bind", "10.0.0.11",
                   "--ingest", "1", "--data", "/srv/w1", "--port", "8081", "--show-config")
    assert ran.code == 0, ran.err
    shown = json.loads(ran.out)
    assert shown["advertise"] == "10.0.0.11" and shown["gateway_port"] == 8081 and shown["ingest"] == ["1"]
    assert shown["tenants_file"] == "/srv/w1/tenants.json" and shown["nats_url"] is None  # the head's


def test_the_stack_settings_refuse_the_same_without_the_command_line() -> None:
    with pytest.raises(InvalidSettings, match="--nats-cluster"):
        StackSettings(nats_url=CLUSTER, nats_cluster=3)
    with pytest.raises(InvalidSettings, match="--ingest"):
        StackSettings(shard_map=(("1", ("acme",)),), ingest=("2",))
    settings = StackSettings(shard_map=(("1", ("acme",)),), bind="10.0.0.10", nats_url=CLUSTER, ingest=("1",))
    assert settings.advertised == "10.0.0.10" and settings.ingested == ("1",)
    assert StackSettings(shard_map=(("1", ("acme",)),)).ingested == ("0", "1")


def test_addresses() -> None:
    assert nats_urls(" nats://a:1 , tls://b:2") == ("nats://a:1", "tls://b:2")
    assert advertised_host("0.0.0.0", "w1.example") == "w1.example"
    assert advertised_host("127.0.0.1", None) == "127.0.0.1"
    check_reachable(("nats://127.0.0.1:4222",), "--nats-url", "127.0.0.1")  # one machine: loopback is right
    check_reachable(("nats://nats.example:4222",), "--nats-url", "10.0.0.10")  # a name: others may resolve it
