"""A deployment's pieces on one machine (loopback), as the several-machines recipe runs them:
``mirror nats --routes`` members forming one JetStream cluster, ``mirror up --nats-url`` on a NATS
it did not start, and ``mirror node`` joined to its Ray cluster with a gateway of its own and the
ingester of a shard whose file is in the node's data directory.

The network-namespace tests (``test_machines.py``) run the same commands on three "machines";
these check, in the default suite, that each command does its part.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
import httpx
import pytest

from mirror.events.errors import BusError
from mirror.events.nats.cluster import wait_jetstream
from mirror.events.nats.server import EmbeddedNats
from mirror.processes import free_port
from tests.support.cluster import processes_named
from tests.support.up import ctrl_c, start_up
from tests.support.waits import until

BIND = "127.0.0.2"
"""Where the head listens: an address of this machine other than 127.0.0.1 (all of 127/8 is loopback)."""


def refused(host: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) != 0


@dataclass
class Head:
    """`mirror up --nats-url` running on a nats-server the test started, with shard 1 (acme) left to a node."""

    process: subprocess.Popen[bytes]
    stack: dict
    data: Path
    nats: EmbeddedNats
    root: Path


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    root = tmp_path_factory.mktemp("machines")
    nats = EmbeddedNats(root / "nats").start()
    data = root / "head"
    try:
        process, stack = start_up(data, root / "up.log", "--nats-url", nats.url, "--shard-map", "1=acme",
                                  "--ingest", "0", "--bind", BIND)
        try:
            yield Head(process, stack, data, nats, root)
        finally:
            assert ctrl_c(process) == 0, (root / "up.log").read_text()[-3000:]
    finally:
        nats.stop()


def post_turn(url: str, token: str, conversation: str, message: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/conversations/{conversation}/turns?sync=true", json={"message": message},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)


def events(url: str, token: str, conversation: str, at_least: int) -> list[dict]:
    """The conversation's events from its shard's log, once it holds ``at_least`` (503 while its ingester starts)."""
    found: list[dict] = []

    def enough() -> bool:
        nonlocal found
        answer = httpx.get(f"{url}/v1/conversations/{conversation}/events", timeout=30,
                           headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code in (200, 503), answer.text
        found = answer.json()["events"] if answer.status_code == 200 else []
        return len(found) >= at_least

    until(enough, f"{conversation}'s events in its log", poll_s=0.2)
    return found


REPUBLISH = """
import dataclasses, sys, time
import ray
from mirror.stack.published import PUBLISHED_NAME, publish_settings
ray.init(address=sys.argv[1], namespace="mirror", log_to_driver=False)
actor = ray.get_actor(PUBLISHED_NAME)
settings, head = ray.get(actor.get.remote())
ray.kill(actor)
runtime = dataclasses.replace(settings.runtime, snapshot_every=settings.runtime.snapshot_every + 1)
while True:
    try:
        held = publish_settings(dataclasses.replace(settings, runtime=runtime), head)  # Ray ends it once unheld
        break
    except ValueError:  # the killed one's name is not free yet
        time.sleep(0.1)
print("published", flush=True)
sys.stdin.read()  # the actor is this driver's: held until the test closes stdin
"""


@contextlib.contextmanager
def republished(ray_address: str, env: dict[str, str]) -> Iterator[None]:
    """The head's published settings replaced by others (another ``snapshot_every``), from a driver of its own."""
    child = subprocess.Popen([sys.executable, "-c", REPUBLISH, ray_address], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "published"
        yield
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(60)


def test_up_listens_on_its_bind_address_and_hands_out_urls_there(head: Head) -> None:
    gateway, model = urlsplit(head.stack["url"]), urlsplit(head.stack["llm_url"])
    assert gateway.hostname == model.hostname == BIND  # the simulator too: conversations anywhere call it there
    assert gateway.port is not None and model.port is not None
    assert refused("127.0.0.1", gateway.port) and refused("127.0.0.1", model.port)
    assert httpx.get(f"{head.stack['url']}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"http://{BIND}:{model.port}/healthz", timeout=10).status_code == 200


def test_up_with_a_nats_url_starts_no_broker_and_answers_over_http(head: Head) -> None:
    stack = head.stack
    assert stack["nats_url"] == head.nats.url and stack["nats_pids"] == [] and stack["nats_pid"] is None
    assert not (head.data / "nats").exists()  # no store: no broker of its own
    assert [pid for pid, session in processes_named(str(Path(sys.executable).parent / "nats-server")).items()
            if session == head.process.pid] == []
    reply = post_turn(stack["url"], stack["token"], "over-nats-url", "hello")
    assert reply.status_code == 200, reply.text
    assert reply.json()["seq"] == 1
    assert [event["seq"] for event in events(stack["url"], stack["token"], "over-nats-url", 1)][:1] == [1]
    assert head.nats.running  # the broker is the test's, untouched


def test_a_node_joins_the_cluster_serves_turns_from_its_gateway_and_ingests_its_shard_in_its_own_data(
        head: Head) -> None:
    stack = head.stack
    added = subprocess.run([sys.executable, "-m", "mirror", "tenants", "add", "acme", "--data", str(head.data)],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    acme = added.stdout.strip()
    node_data, config = head.root / "w1", head.root / "w1-config"
    config.mkdir()
    shutil.copy(head.data / "tenants.json", config / "tenants.json")  # what is copied to a machine: hashes only
    # Until a node runs shard 1's ingester, acme's log is not served: a prompt 503.
    refused = post_turn(stack["url"], acme, "on-shard-1", "anyone?")
    assert refused.status_code == 503, refused.text

    log = head.root / "node.log"
    env = os.environ | {"RAY_AUTH_MODE": "token"}  # the head's Ray has token authentication on
    command = [sys.executable, "-m", "mirror", "node", "--ray-address", stack["ray_address"], "--data", str(node_data),
               "--port", str(free_port()), "--tenants", str(config / "tenants.json"), "--ingest", "1"]
    node = subprocess.Popen(command, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        until(lambda: (node_data / "node.json").exists() or node.poll() is not None, "mirror node up",
              timeout=120, poll_s=0.2)
        assert node.poll() is None, log.read_text()[-3000:]
        record = json.loads((node_data / "node.json").read_text())
        assert record["url"] != stack["url"] and record["ingest"] == ["1"] and record["pid"] == node.pid

        reply = post_turn(record["url"], acme, "on-shard-1", "hello from the node's gateway")  # acme: shard 1
        assert reply.status_code == 200, reply.text
        assert post_turn(record["url"], stack["token"], "on-shard-0", "hello").status_code == 200  # default: shard 0
        # Both gateways read shard 1's log from the node's ingester (the Thinker may append after the turn).
        seq = reply.json()["seq"]
        assert seq == 1  # the refused turn appended nothing
        seen = events(stack["url"], acme, "on-shard-1", seq)[:seq]
        assert seen == events(record["url"], acme, "on-shard-1", seq)[:seq]
        assert seen[0]["payload"]["user_message"] == "hello from the node's gateway"

        # The head publishes other settings (as a restarted `mirror up` would): the node follows,
        # with new gateways on the same port, so that every gateway hands out the same hosts.
        with republished(stack["ray_address"], env):
            until(lambda: "the head's settings are this node's gateways' after" in log.read_text(), "the node follows the head",
                  timeout=60, poll_s=0.2)
            assert post_turn(record["url"], acme, "on-shard-1", "after the change").status_code == 200
    finally:
        assert ctrl_c(node) == 0, log.read_text()[-3000:]
    assert not (node_data / "node.json").exists()
    assert not (head.data / "mirror-1.duckdb").exists()
    with duckdb.connect(str(node_data / "mirror-1.duckdb"), read_only=True) as db:  # closed: the node drained it
        (count,) = db.execute("SELECT count(*) FROM events WHERE tenant = 'acme'").fetchone() or (0,)
    assert count >= 1
    assert post_turn(stack["url"], stack["token"], "on-shard-0", "the head goes on").status_code == 200
    asked = time.monotonic()  # shard 1 is served by nobody again: acme's reads are a prompt 503
    answer = httpx.get(f"{stack['url']}/v1/conversations/on-shard-1/events", timeout=30,
                       headers={"Authorization": f"Bearer {acme}"})
    assert answer.status_code == 503 and time.monotonic() - asked < 10, answer.text


def test_three_nats_members_with_the_same_routes_form_one_jetstream_cluster(tmp_path: Path) -> None:
    """`mirror nats --routes` as each machine runs it: alone, a member has no JetStream to offer
    (no majority); with the other two it does, and every member says so."""
    clients, routes = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
    route_list = ",".join(f"nats://127.0.0.1:{port}" for port in routes)  # every member's, its own included
    url = ",".join(f"nats://127.0.0.1:{port}" for port in clients)
    members: list[subprocess.Popen[bytes]] = []

    def start(index: int) -> None:
        command = [sys.executable, "-m", "mirror", "nats", "--store", str(tmp_path / f"m{index}"),
                   "--port", str(clients[index]), "--cluster-port", str(routes[index]), "--name", f"mirror-m{index}",
                   "--routes", route_list]
        members.append(subprocess.Popen(command, stdout=(tmp_path / f"m{index}.log").open("ab"),
                                        stderr=subprocess.STDOUT, start_new_session=True))

    def said(index: int, words: str) -> bool:
        assert members[index].poll() is None, (tmp_path / f"m{index}.log").read_text()
        return words in (tmp_path / f"m{index}.log").read_text()

    try:
        start(0)
        until(lambda: said(0, "a member of cluster 'mirror'"), "the first member listens", poll_s=0.1)
        with pytest.raises(BusError, match="did not answer within"):
            asyncio.run(wait_jetstream(url.split(",")[0], timeout_s=2))
        start(1)
        start(2)
        for index in range(3):
            until(lambda index=index: said(index, "has a meta leader"), f"member {index} knows the meta leader",  # type: ignore[misc]
                  poll_s=0.1)
        asyncio.run(wait_jetstream(url, timeout_s=30))
    finally:
        codes = [ctrl_c(member) for member in members]
    assert codes == [0] * len(members)


def test_a_node_that_cannot_join_says_why_in_one_line_at_once(tmp_path: Path) -> None:
    """No tenants file, or nothing at --ray-address (Ray itself would try for minutes): one line, status 2."""
    node = [sys.executable, "-m", "mirror", "node", "--data", str(tmp_path), "--port", "0"]
    ran = subprocess.run([*node, "--ray-address", "127.0.0.1:6379"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and ran.stderr.startswith("mirror: error: --tenants: "), ran.stderr
    (tmp_path / "tenants.json").write_text("{}")
    started = time.monotonic()
    ran = subprocess.run([*node, "--ray-address", f"127.0.0.1:{free_port()}"], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 2 and "mirror: error: cannot reach Ray at 127.0.0.1:" in ran.stderr, ran.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "node.json").exists()
