"""Several Ray nodes: the recipe in docs/operations.md (a head, a second raylet, ``mirror up --ray-address``) run
as written, turns under load, then the second node killed with SIGKILL.

What it proves, for each placement of conversations in :data:`PLACEMENTS`: conversations spread
over both nodes; after every process of the second node dies, the conversations that lived there
answer again from the head; every turn the gateway acknowledged is in the DuckDB log; and no node
holds more live conversation actors than ``max_live_actors``. It prints what it measured
(re-activation after the kill, turns in flight at the kill) for docs/operations.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Turn
from mirror.processes import free_port
from tests.support.cluster import Session, probe, processes_named, read_recipe, substitute, wait_for

pytestmark = pytest.mark.cluster


@dataclass(frozen=True)
class Placement:
    """How conversations are placed on Ray actors, as this test needs to know it."""

    name: str
    actor_title: str
    """The process title of the actors that hold conversations (``ray::<class>``)."""
    stack_env: dict[str, str]
    """What ``mirror up`` is given to run with this placement."""

    def actor_of(self, conversation: str) -> str:
        """The named actor that holds ``conversation`` (dedicated: its own)."""
        return f"{TENANT}/{conversation}/main"

    @property
    def hosted(self) -> bool:
        return self.name == "hosted"


TENANT = "default"
PER_HOST = 3
"""Hosted: live conversations per host (4 hosts, one per CPU of the two nodes: 12 places in all)."""
PLACEMENTS = [
    Placement("dedicated", "ray::ConversationActor", {"MIRROR_PLACEMENT": "dedicated"}),
    Placement("hosted", "ray::ConversationHost", {"MIRROR_PLACEMENT": "hosted", "MIRROR_MAX_LIVE_PER_HOST": str(PER_HOST)}),
]
"""Each placement is one run of the whole scenario. A placement that puts several conversations
on one actor adds an entry: its actors' process title, the ``mirror up`` setting that selects it
and, if its actors are not named after a conversation, its own ``actor_of``."""
CONVERSATIONS = 12
MAX_LIVE = 8
"""Per node: under the cap while two nodes share the conversations, over it when one must hold all."""
HOT = MAX_LIVE
"""Conversations under load; the others are opened, left idle, and asked again at the end."""
WARM_LOAD_S = 4.0
AFTER_KILL_S = 3.0
"""How long the load goes on once every conversation of the dead node has answered again."""


@dataclass
class Cluster:
    """The recipe running: its three sessions, the stack's record, the two nodes' ids."""

    head: Session
    worker: Session
    stack: Session
    info: dict[str, Any]
    address: str
    env: dict[str, str]
    head_node: str
    worker_node: str
    ray_dir: Path
    placement: Placement


@pytest.fixture(params=PLACEMENTS, ids=lambda placement: placement.name)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    placement: Placement = request.param
    recipe = read_recipe()
    # Ray's unix sockets live under the temp dir (107 bytes at most): a short path under /tmp.
    ray_dir = Path(tempfile.mkdtemp(prefix="mirror-ray-", dir="/tmp"))
    head_port = free_port()
    address = f"127.0.0.1:{head_port}"
    env = os.environ | recipe.environment | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MIRROR_MAX_LIVE_ACTORS": str(MAX_LIVE), "RAY_USAGE_STATS_ENABLED": "0",
    } | placement.stack_env
    sessions: list[Session] = []

    def run(name: str, command: list[str]) -> Session:
        session = Session.start(name, command, env=env, cwd=tmp_path, log=tmp_path / f"{name}.log")
        sessions.append(session)
        return session

    try:
        for command in recipe.commands:
            if command[:2] != ["ray", "start"] and command[:2] != ["mirror", "up"]:  # prints the token: no log
                setup = Session.start("setup", command, env=env, cwd=tmp_path, log=Path(os.devnull))
                assert setup.process.wait(60) == 0, command
        head = run("head", substitute(recipe.command("ray", "start", "--head"), {
            "--port": str(head_port), "--dashboard-port": str(free_port()),
            "--temp-dir": str(ray_dir),
        }))
        wait_for(lambda: "Ray runtime started" in head.tail(100_000), 90, "the head started", head)
        worker = run("worker", substitute(recipe.command("ray", "start", "--block"), {"--address": address}))
        wait_for(lambda: "Ray runtime started" in worker.tail(100_000), 90, "the worker joined", head, worker)
        data = tmp_path / "data"
        stack = run("stack", substitute(recipe.command("mirror", "up"), {
            "--ray-address": address, "--data": str(data), "--port": str(free_port()), "--nats-port": str(free_port()),
        }))
        wait_for((data / "stack.json").exists, 180, "mirror up is up", head, worker, stack)
        info = json.loads((data / "stack.json").read_text())

        nodes = probe(address, env, [])
        workers = [node for node, about in nodes["nodes"].items() if about["alive"] and "mirror_worker" in about["resources"]]
        assert len(workers) == 1 and workers[0] != nodes["head_node"], nodes
        yield Cluster(head, worker, stack, info, address, env, nodes["head_node"], workers[0], ray_dir, placement)
    finally:
        for session in reversed(sessions):  # the stack first (it drains the ingester), then the nodes
            session.stop()
        # Ray's logs (the actors' included) beside the test's, then the short directory goes.
        if (ray_dir / "session_latest" / "logs").is_dir():
            shutil.copytree(ray_dir / "session_latest" / "logs", tmp_path / "ray-logs", symlinks=True,
                            dirs_exist_ok=True, ignore_dangling_symlinks=True)
        shutil.rmtree(ray_dir, ignore_errors=True)
    for session in sessions:
        assert session.pids() == [], f"{session.name} left processes behind"


@dataclass
class Load:
    """Closed-loop turns on the conversations it is given; records exactly what the gateway acknowledged."""

    url: str
    token: str
    acknowledged: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    failures: int = 0
    in_flight: set[str] = field(default_factory=set)
    """Conversations with a turn sent and not yet answered."""
    answered: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """When each acknowledged turn was sent and answered (monotonic clock), by conversation."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def turn(self, client: httpx.AsyncClient, conversation: str, message: str) -> bool:
        self.in_flight.add(conversation)
        sent = time.monotonic()
        try:
            response = await client.post(f"{self.url}/v1/conversations/{conversation}/turns",
                                         json={"message": message}, timeout=60)
        except httpx.HTTPError:
            response = None
        finally:
            self.in_flight.discard(conversation)
        if response is None or response.status_code != 200:
            self.failures += 1
            return False
        self.acknowledged.setdefault(conversation, []).append((response.json()["seq"], message))
        self.answered.setdefault(conversation, []).append((sent, time.monotonic()))
        return True

    def first_answer_sent_after(self, conversation: str, moment: float) -> float | None:
        """When the first turn sent after ``moment`` was answered: a reply a dead actor cannot give."""
        return next((done for sent, done in self.answered.get(conversation, ()) if sent > moment), None)

    async def loop(self, client: httpx.AsyncClient, conversation: str) -> None:
        attempt = 0
        while not self.stop.is_set():
            attempt += 1
            if not await self.turn(client, conversation, f"{conversation} says hello, attempt {attempt}"):
                await asyncio.sleep(0.2)  # the gateway answered 5xx: its actor is being re-activated


def actors_per_node(title: str, cluster: Cluster) -> dict[str, int]:
    """Live conversation-holding actor processes per node ("head", "worker"), by session."""
    sessions = {cluster.head.sid: "head", cluster.worker.sid: "worker"}
    counts = {"head": 0, "worker": 0}
    for sid in processes_named(title).values():
        if sid in sessions:
            counts[sessions[sid]] += 1
    return counts


def conversation_nodes(conversations: list[str], cluster: Cluster) -> tuple[dict[str, str], dict[str, Any]]:
    """Which node each conversation's actor runs on — the session its process belongs to, or
    "gone: <why>" for one passivated or not yet restarted — and the directory's stats."""
    sessions = {cluster.head.sid: "head", cluster.worker.sid: "worker"}
    if cluster.placement.hosted:  # each host says which conversations it holds
        answer = probe(cluster.address, cluster.env, [])
        nodes = dict.fromkeys(conversations, "gone: passivated")
        for host in answer["hosts"].values():
            for conversation in host.get("conversations", ()):
                try:
                    nodes[conversation] = sessions.get(os.getsid(host["pid"]), "elsewhere")
                except ProcessLookupError:
                    nodes[conversation] = "gone: exited since"
        return nodes, answer["hosts"]
    names = {conversation: cluster.placement.actor_of(conversation) for conversation in conversations}
    answer = probe(cluster.address, cluster.env, sorted(set(names.values())))
    nodes = {}
    for conversation, name in names.items():
        pid = answer["pids"][name]
        try:
            nodes[conversation] = sessions.get(os.getsid(pid), "elsewhere") if isinstance(pid, int) else f"gone: {pid}"
        except ProcessLookupError:
            nodes[conversation] = "gone: exited since"
    return nodes, answer["directory"]


def node_declared_dead(ray_dir: Path, node_id: str) -> float:
    """When the head's control store (GCS) declared ``node_id`` dead, from its log (epoch seconds)."""
    for line in (ray_dir / "session_latest" / "logs" / "gcs_server.out").read_text(errors="replace").splitlines():
        if "Node is dead" in line and node_id in line:
            stamp = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
            assert stamp is not None, line
            return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as Ray writes it
    raise AssertionError(f"the head never declared node {node_id} dead")


async def read_turns(nats_url: str, conversations: list[str]) -> dict[str, dict[int, str]]:
    """Every turn event in the log, by conversation and seq, once the ingester has caught up."""
    nc = await connect_nats(nats_url, name="mirror-test-several-nodes")
    try:
        client = LogClient(nc, timeout=30)
        deadline = time.monotonic() + 60
        while not await client.wait_caught_up(5):  # at most 5 s per ask
            assert time.monotonic() < deadline, "the ingester did not catch up"
        turns: dict[str, dict[int, str]] = {}
        for conversation in conversations:
            events = await client.read(StreamKey(TENANT, conversation))
            assert [event.seq for event in events] == list(range(1, len(events) + 1)), "gap or double"
            turns[conversation] = {event.seq: event.payload.user_message for event in events
                                   if isinstance(event.payload, Turn)}
        return turns
    finally:
        await nc.close()


def test_killing_a_node_under_load_loses_no_acknowledged_turn(cluster: Cluster) -> None:
    conversations = [f"spread-{index}" for index in range(CONVERSATIONS)]
    title = cluster.placement.actor_title
    load = Load(cluster.info["url"], cluster.info["token"])
    figures: dict[str, Any] = {}

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {load.token}"}
        limits = httpx.Limits(max_connections=CONVERSATIONS * 2)
        async with httpx.AsyncClient(headers=headers, limits=limits) as client:
            for conversation in conversations:  # one at a time: each activation is a process start
                assert await load.turn(client, conversation, f"{conversation} opens")
            placed, _ = await asyncio.to_thread(conversation_nodes, conversations, cluster)
            figures["placed"] = placed
            on_worker = [name for name, node in placed.items() if node == "worker"]
            on_head = [name for name, node in placed.items() if node == "head"]
            assert on_worker and on_head, f"not spread: {placed}"  # (a node over its cap passivated some)
            # The load runs on as many conversations as one node may hold, from both nodes; the rest
            # stay idle until the end. (All twelve in a loop would make every turn an activation:
            # least-recently-used over a cycle longer than the cache misses every time.)
            hot = on_worker[:HOT // 2] + on_head[:HOT - min(len(on_worker), HOT // 2)]
            hot += [name for name in on_worker if name not in hot][:HOT - len(hot)]
            hot_on_worker = [name for name in hot if name in on_worker]

            loops = [asyncio.create_task(load.loop(client, conversation)) for conversation in hot]
            await asyncio.sleep(WARM_LOAD_S)
            before = sum(map(len, load.acknowledged.values()))
            figures["in_flight_at_kill"] = {"all": len(load.in_flight), "on_the_killed_node": len(load.in_flight & set(on_worker))}
            killed_at, figures["killed_wall"] = time.monotonic(), time.time()
            figures["killed_pids"] = len(cluster.worker.kill())
            deadline = killed_at + 120
            while None in (reactivated := [load.first_answer_sent_after(name, killed_at) for name in hot_on_worker]):
                assert time.monotonic() < deadline, f"not re-activated: {dict(zip(hot_on_worker, reactivated, strict=True))}"
                await asyncio.sleep(0.05)
            answered = [done - killed_at for done in reactivated if done is not None]
            figures["reactivated_s"] = (round(min(answered), 2), round(max(answered), 2))
            await asyncio.sleep(AFTER_KILL_S)
            load.stop.set()
            await asyncio.gather(*loops)
            figures["turns"] = {"before_kill": before, "all": sum(map(len, load.acknowledged.values())),
                                "failed": load.failures}
            # The idle ones answer too — those of the dead node from the head — and take the head over its cap.
            for conversation in conversations:
                if conversation not in hot:
                    assert await load.turn(client, conversation, f"{conversation} is back"), conversation

    asyncio.run(scenario())
    # Ray itself saw the node die: its control store declares a node dead after missed health checks.
    dead_at = node_declared_dead(cluster.ray_dir, cluster.worker_node)
    figures["declared_dead_s"] = round(dead_at - figures.pop("killed_wall"), 2)

    # Every conversation lives on the head now, or was passivated there; the second node has no process left.
    assert cluster.worker.pids() == []
    if cluster.placement.hosted:
        # The dead node's hosts were restarted by Ray on the head; every host keeps its cap.
        after, hosts = conversation_nodes(conversations, cluster)
        figures |= {"hosts": {name: {key: host.get(key) for key in ("node_id", "live", "activations", "evictions")}
                              for name, host in hosts.items()}, "actors": actors_per_node(title, cluster)}
        print(f"\nseveral nodes ({cluster.placement.name}): {json.dumps(figures, default=str)}")
        assert all(node == "head" or node.startswith("gone:") for node in after.values()), after
        assert len(hosts) == 4 and all(host.get("node_id") == cluster.head_node for host in hosts.values()), hosts
        assert all(host["live"] <= PER_HOST for host in hosts.values()), hosts
        assert sum(host["live"] for host in hosts.values()) == sum(node == "head" for node in after.values())
    else:
        wait_for(lambda: actors_per_node(title, cluster)["head"] <= MAX_LIVE, 60, "the head under its cap")
        after, stats = conversation_nodes(conversations, cluster)
        figures |= {"directory": stats, "actors": actors_per_node(title, cluster)}
        print(f"\nseveral nodes ({cluster.placement.name}): {json.dumps(figures, default=str)}")
        assert all(node == "head" or node.startswith("gone:") for node in after.values()), after
        # The cap holds on the node that took everyone in, and it was the cap that passivated some.
        assert 0 < stats["live_per_node"][cluster.head_node] <= MAX_LIVE, stats
        assert stats["passivations"] >= CONVERSATIONS - MAX_LIVE, stats

    # Nothing acknowledged is lost: each acknowledged turn is in the log at the seq it was given.
    turns = asyncio.run(read_turns(cluster.info["nats_url"], conversations))
    for conversation, acknowledged in load.acknowledged.items():
        for seq, message in acknowledged:
            assert turns[conversation].get(seq) == message, (conversation, seq, message)
