"""A broker that survives a node: a real 3-node JetStream cluster, fenced writers under load,
kill -9 of one node and then of the stream's leader. Nothing acknowledged is lost, no sequence
forks, and appends resume by themselves (the measured pauses are printed)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mirror.events.bus import Head
from mirror.events.codec import decode, encode
from mirror.events.envelope import make_event
from mirror.events.errors import AppendConflict, BusError
from mirror.events.ids import StreamKey
from mirror.events.nats.cluster import EmbeddedNatsCluster
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, ensure_stream, key_of_subject
from mirror.events.payloads import Turn
from tests.support.cluster import stream_messages

KEYS = [StreamKey("cluster", f"c{index}") for index in range(6)]
WRITERS_PER_KEY = 2
"""Two writers race on every subject: only the fence keeps them from forking its sequence."""
PACE_S = 0.02


@dataclass
class Appends:
    """Every append the bus acknowledged, and when each append was started and answered."""

    acknowledged: dict[tuple[StreamKey, int], tuple[bytes, int]] = field(default_factory=dict)
    """(key, seq) -> (the bytes written, the stream sequence the ack gave)."""
    answered: list[tuple[float, float]] = field(default_factory=list)
    """(started, acknowledged) of each acknowledged append, monotonic seconds."""
    conflicts: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    """Appends that ended in BusError, by message: not acknowledged, so they may or may not have landed."""

    def resumed_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` to the first acknowledgement of an append started after it."""
        after = [done for started, done in self.answered if started >= moment]
        return min(after) - moment if after else None


async def writer(bus: JetStreamBus, key: StreamKey, name: str, appends: Appends, stop: asyncio.Event) -> None:
    head: Head | None = None
    while not stop.is_set():
        try:
            if head is None:
                head = await bus.head(key)
                head = head if head.last_seq is not None else head.with_last_seq(0)
            seq = head.next_seq(key)
            event = make_event(key, seq, Turn(f"{name} says {seq}", f"reply {seq}"), turn=seq, timestamp=float(seq))
            started = time.monotonic()
            head = await bus.append(key, [event], head)
            appends.answered.append((started, time.monotonic()))
            appends.acknowledged[(key, seq)] = (encode(event), head.fence)
        except AppendConflict:
            appends.conflicts += 1
            head = None  # the other writer got there first: read the head again
        except BusError as exc:
            appends.failures[str(exc)[:160]] += 1
            head = None
        await asyncio.sleep(PACE_S)


FLOWING = 200
"""Appends acknowledged between two steps of a scenario: writes flow through each state of the cluster."""


async def acknowledged_more(appends: Appends, count: int, within_s: float = 120.0) -> None:
    """Until ``count`` more appends than now are acknowledged."""
    target = len(appends.answered) + count
    deadline = time.monotonic() + within_s
    while len(appends.answered) < target:
        assert time.monotonic() < deadline, f"the writers stalled at {len(appends.answered)} of {target} appends"
        await asyncio.sleep(0.05)


async def until_resumed(appends: Appends, moment: float, within_s: float = 60.0) -> None:
    """Until an append started after ``moment`` is acknowledged."""
    deadline = time.monotonic() + within_s
    while appends.resumed_after(moment) is None:
        assert time.monotonic() < deadline, f"no append acknowledged within {within_s:g} s of the kill"
        await asyncio.sleep(0.05)


async def stream_leader(js, cluster: EmbeddedNatsCluster) -> int:
    info = await js.stream_info("MIRROR")
    return cluster.node_of(info.cluster.leader)


async def until_replicas_current(js, replicas: int, within_s: float = 60.0) -> None:
    """Wait until the stream has a leader and ``replicas - 1`` followers, all current."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            info = await js.stream_info("MIRROR")
            peers = info.cluster.replicas or []
            if info.cluster.leader and len(peers) == replicas - 1 and all(p.current and not p.offline for p in peers):
                return
        except Exception:  # no leader for a moment: ask again
            pass
        assert time.monotonic() < deadline, "the stream's replicas did not catch up"
        await asyncio.sleep(0.2)


@pytest.mark.long  # ~22 s: .ci/run runs it with -m long
async def test_a_cluster_loses_nothing_acknowledged_when_a_node_and_then_the_leader_die(tmp_path: Path) -> None:
    with EmbeddedNatsCluster(tmp_path / "nats", 3) as cluster:
        buses = [await JetStreamBus.connect(cluster.url) for _ in range(3)]
        js = buses[0].js
        assert (await js.stream_info("MIRROR")).config.num_replicas == 3  # min(3, three URLs)
        appends, stop = Appends(), asyncio.Event()
        tasks = [
            asyncio.create_task(writer(buses[(index + copy) % len(buses)], key, f"w{copy}", appends, stop))
            for index, key in enumerate(KEYS) for copy in range(WRITERS_PER_KEY)
        ]
        figures: dict[str, object] = {}
        try:
            await acknowledged_more(appends, FLOWING)  # the writers are flowing
            leader = await stream_leader(js, cluster)
            follower = (leader + 1) % 3
            killed_at = time.monotonic()
            cluster.kill(follower)
            await until_resumed(appends, killed_at)
            await acknowledged_more(appends, FLOWING)  # and flow on without the follower
            figures["resume_after_follower_kill_s"] = appends.resumed_after(killed_at)
            cluster.start_node(follower)
            await until_replicas_current(js, 3)
            await acknowledged_more(appends, FLOWING)

            leader = await stream_leader(js, cluster)
            killed_at = time.monotonic()
            cluster.kill(leader)
            await until_resumed(appends, killed_at)
            figures["resume_after_leader_kill_s"] = appends.resumed_after(killed_at)
            figures["new_leader"] = await stream_leader(js, cluster)
            await acknowledged_more(appends, FLOWING)  # the new leader takes appends
            cluster.start_node(leader)
            await acknowledged_more(appends, FLOWING)  # while the old leader rejoins as a follower
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        await until_replicas_current(js, 3)
        stream_state = (await js.stream_info("MIRROR")).state
        for bus in buses:
            await bus.close()

        messages = await stream_messages(cluster.url, stream_state.messages)
        figures |= {"acknowledged": len(appends.acknowledged), "stored": len(messages),
                    "conflicts": appends.conflicts, "failed_appends": sum(appends.failures.values()),
                    "failures": dict(appends.failures)}
        by_place: dict[tuple[StreamKey, int], list[tuple[int, bytes]]] = {}
        for stream_seq, subject, data in messages:
            by_place.setdefault((key_of_subject(subject), decode(data).seq), []).append((stream_seq, data))
        forks = {place: copies for place, copies in by_place.items() if len(copies) > 1}
        lost = [place for place, (data, stream_seq) in appends.acknowledged.items()
                if by_place.get(place) != [(stream_seq, data)]]
        figures["lost"] = len(lost)
        figures["forked"] = len(forks)
        print("nats cluster figures:", json.dumps(figures))
        assert not forks, f"two events at one seq: {list(forks)[:5]}"
        assert not lost, f"{len(lost)} acknowledged appends are not in the stream as acknowledged: {lost[:5]}"
        per_key = Counter(key for key, _ in by_place)
        for key in KEYS:
            assert sorted(seq for k, seq in by_place if k == key) == list(range(1, per_key[key] + 1))  # gapless
        assert not appends.failures, appends.failures  # every append was acknowledged or fenced off
        assert appends.acknowledged and all(figures[name] is not None for name in
                                            ("resume_after_follower_kill_s", "resume_after_leader_kill_s"))
        # A follower's death costs a reconnect at most; a leader's, a Raft election (nats-server
        # waits 4-9 s of silence before one): generous bounds, the figures are printed above.
        assert figures["resume_after_follower_kill_s"] < 5  # type: ignore[operator]
        assert figures["resume_after_leader_kill_s"] < 20  # type: ignore[operator]


async def test_an_existing_single_replica_stream_is_raised_to_three(tmp_path: Path) -> None:
    with EmbeddedNatsCluster(tmp_path / "nats", 3) as cluster:
        nc = await connect_nats(cluster.url)
        try:
            js = nc.jetstream()
            await ensure_stream(js, StreamSettings(replicas=1))
            assert (await js.stream_info("MIRROR")).config.num_replicas == 1
            await ensure_stream(js, StreamSettings(), servers=len(nc.server_urls))
            assert (await js.stream_info("MIRROR")).config.num_replicas == 3
        finally:
            await nc.close()


async def test_mirror_nats_cluster_runs_three_servers_in_the_foreground(tmp_path: Path) -> None:
    """`mirror nats --cluster 3` prints the URL list; a bus given it makes an R3 stream; Ctrl-C stops all three."""
    process = subprocess.Popen([sys.executable, "-m", "mirror", "nats", "--cluster", "3", "--store", str(tmp_path / "nats"),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"), text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        urls = re.search(r"at (\S+) \(store", line)
        assert urls and len(urls.group(1).split(",")) == 3, line
        bus = await JetStreamBus.connect(urls.group(1))
        try:
            assert (await bus.js.stream_info("MIRROR")).config.num_replicas == 3
        finally:
            await bus.close()
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    assert all(b"Server Exiting" in (tmp_path / "nats" / f"n{i}" / "nats-server.log").read_bytes() for i in range(3))


@pytest.mark.parametrize("size", [1, 3])
async def test_a_chosen_port_taken_before_its_server_listens_is_chosen_again(tmp_path: Path, size: int) -> None:
    """Between choosing a free port and nats-server binding it, another process may take it (an
    outgoing connection's local port: the cluster's own routes connect while nodes start). Ports
    the cluster chose are chosen again; the servers come up, on other ports."""
    cluster = EmbeddedNatsCluster(tmp_path / "nats", size)
    taken = cluster.nodes[-1].port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with cluster:
            assert cluster.nodes[-1].port != taken and all(node.running for node in cluster.nodes)
            nc = await connect_nats(cluster.url)
            try:
                await ensure_stream(nc.jetstream(), StreamSettings(replicas=size))
            finally:
                await nc.close()


def test_a_given_port_that_is_taken_is_refused_not_moved(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(BusError, match="address already in use"):
            EmbeddedNatsCluster(tmp_path / "nats", 1, ports=[port]).start()
