"""Several machines that do not share a loopback: Linux network namespaces on a bridge
(``tests/support/netns.py``), each with its own address, disk, Ray temp dir and processes.

- A JetStream cluster of three, one nats-server per machine: appends through one machine are
  read through another; with one machine cut off the network the other two still take appends
  (R3 keeps a quorum of two), the cut-off one takes none, and once healed it holds every
  acknowledged append exactly once.

Marker ``machines`` (not in the default run; ``.ci/run`` runs it); skipped where ``ip netns add``
is not permitted (it needs root and iproute2).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js.api import DeliverPolicy

from mirror.events.bus import Head
from mirror.events.codec import decode, encode
from mirror.events.envelope import make_event
from mirror.events.errors import AppendConflict, BusError
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, key_of_subject
from mirror.events.nats.server import nats_server_binary
from mirror.events.payloads import Turn
from tests.support.netns import SKIP_REASON, Machine, Machines, netns_permitted
from tests.support.waits import until, until_async

pytestmark = pytest.mark.machines

HOSTS = ["h", "w1", "w2"]
NATS_PORT = 4222
ROUTE_PORT = 6222
STREAM = "MIRROR"
META_LEADER_LINES = (b"JetStream cluster new metadata leader", b"Self is new JetStream cluster metadata leader")


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    if not netns_permitted():
        pytest.skip(SKIP_REASON)
    with Machines(HOSTS, tmp_path) as made:
        yield made


def nats_url(machine: Machine) -> str:
    return f"nats://{machine.address}:{NATS_PORT}"


def cluster_url(machines: Machines) -> str:
    return ",".join(nats_url(machine) for machine in machines)


def nats_log(machine: Machine) -> Path:
    return machine.data / "nats" / "nats-server.log"


def start_nats(machine: Machine, machines: Machines) -> subprocess.Popen[bytes]:
    """One member of the cluster on ``machine``, routes to every member (its own included:
    nats-server ignores a route to itself)."""
    store = machine.data / "nats"
    store.mkdir(parents=True, exist_ok=True)
    routes = ",".join(f"nats://{other.address}:{ROUTE_PORT}" for other in machines)
    return machine.run([
        str(nats_server_binary()), "--jetstream", "--store_dir", str(store),
        "--addr", machine.address, "--port", str(NATS_PORT), "--log", str(nats_log(machine)),
        "--server_name", f"mirror-{machine.host}", "--cluster_name", "mirror",
        "--cluster", f"nats://{machine.address}:{ROUTE_PORT}", "--routes", routes,
    ], log="nats")


def logged(path: Path, *lines: bytes) -> bool:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return False
    return any(line in text for line in lines)


def start_nats_cluster(machines: Machines) -> None:
    for machine in machines:
        start_nats(machine, machines)
    for machine in machines:
        until(lambda m=machine: logged(nats_log(m), b"Server is ready"), f"nats-server on {machine.host} is ready")
        until(lambda m=machine: logged(nats_log(m), *META_LEADER_LINES), f"nats-server on {machine.host} knows the meta leader")


async def append_turns(bus: JetStreamBus, key: StreamKey, count: int, acknowledged: dict[tuple[StreamKey, int], bytes],
                       writer: str) -> None:
    """``count`` fenced appends to ``key``, each recorded once acknowledged."""
    head: Head | None = None
    done = 0
    while done < count:
        try:
            if head is None:
                head = await bus.head(key)
                head = head if head.last_seq is not None else head.with_last_seq(0)
            seq = head.next_seq(key)
            event = make_event(key, seq, Turn(f"{writer} says {seq}", f"reply {seq}"), turn=seq, timestamp=float(seq))
            head = await bus.append(key, [event], head)
            acknowledged[(key, seq)] = encode(event)
            done += 1
        except AppendConflict:
            head = None


async def stream_messages(url: str) -> list[tuple[int, str, bytes]]:
    """Every message of the stream as the server at ``url`` holds it: (stream seq, subject, data)."""
    nc = await connect_nats(url, name="machines-test-reader")
    try:
        js = nc.jetstream()
        expected = (await js.stream_info(STREAM)).state.messages
        messages: list[tuple[int, str, bytes]] = []
        done = asyncio.Event()

        async def collect(message) -> None:
            messages.append((message.metadata.sequence.stream, message.subject, message.data))
            if len(messages) >= expected:
                done.set()

        if expected:
            subscription = await js.subscribe("mirror.>", cb=collect, stream=STREAM, ordered_consumer=True,
                                              deliver_policy=DeliverPolicy.ALL)
            try:
                await asyncio.wait_for(done.wait(), 60)
            finally:
                await subscription.unsubscribe()
        return messages
    finally:
        await nc.close()


def check_stream(messages: list[tuple[int, str, bytes]], acknowledged: dict[tuple[StreamKey, int], bytes]) -> None:
    """Every acknowledged append exactly once at its place, no place twice, each subject gapless."""
    by_place: dict[tuple[StreamKey, int], list[bytes]] = {}
    for _, subject, data in messages:
        by_place.setdefault((key_of_subject(subject), decode(data).seq), []).append(data)
    doubled = [place for place, copies in by_place.items() if len(copies) > 1]
    assert not doubled, f"two messages at one place: {doubled[:5]}"
    lost = [place for place, data in acknowledged.items() if by_place.get(place) != [data]]
    assert not lost, f"acknowledged appends not in the stream as acknowledged: {lost[:5]}"
    for key in {key for key, _ in by_place}:
        seqs = sorted(seq for other, seq in by_place if other == key)
        assert seqs == list(range(1, len(seqs) + 1)), f"{key}: gap in {seqs}"


STALE_PUBLISH = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1], connect_timeout=2, max_reconnect_attempts=0)
    try:
        ack = await nc.jetstream().publish(sys.argv[2], b"from the cut-off machine", timeout=float(sys.argv[3]))
        print("acknowledged", ack.seq)
    except Exception as exc:
        print("refused", type(exc).__name__, exc)
    finally:
        await nc.close()
asyncio.run(main())
"""
"""A publish from inside a machine to its own nats-server; prints whether it was acknowledged."""


def publish_inside(machine: Machine, subject: str, timeout_s: float) -> str:
    result = machine.call([sys.executable, "-c", STALE_PUBLISH, nats_url(machine), subject, str(timeout_s)],
                          timeout=timeout_s + 30)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


async def stream_leader(url: str) -> str:
    nc = await connect_nats(url, name="machines-test-leader")
    try:
        info = await nc.jetstream().stream_info(STREAM)
        return str(info.cluster.leader) if info.cluster and info.cluster.leader else ""
    finally:
        await nc.close()


async def replicas_current(url: str) -> bool:
    nc = await connect_nats(url, name="machines-test-replicas")
    try:
        info = await nc.jetstream().stream_info(STREAM)
    except Exception:  # no leader for a moment: not yet
        return False
    finally:
        await nc.close()
    peers = (info.cluster.replicas or []) if info.cluster else []
    return bool(info.cluster and info.cluster.leader) and len(peers) == 2 and all(p.current and not p.offline for p in peers)


def test_a_nats_cluster_across_machines_keeps_its_quorum_when_one_is_cut_off(machines: Machines) -> None:
    start_nats_cluster(machines)
    keys = [StreamKey("machines", f"c{index}") for index in range(4)]
    acknowledged: dict[tuple[StreamKey, int], bytes] = {}
    figures: dict[str, object] = {}

    async def scenario() -> None:
        h, w1, w2 = (machines[host] for host in HOSTS)
        bus = await JetStreamBus.connect(nats_url(h), StreamSettings(replicas=3))
        try:
            assert (await bus.js.stream_info(STREAM)).config.num_replicas == 3
            for key in keys:  # through the head's server ...
                await append_turns(bus, key, 5, acknowledged, "h")
        finally:
            await bus.close()
        check_stream(await stream_messages(nats_url(w1)), acknowledged)  # ... read through a worker's
        # Cut off the machine that leads the stream: the other two must elect a leader and go on.
        leader = await stream_leader(nats_url(h))
        cut = next(machine for machine in machines if f"mirror-{machine.host}" == leader)
        writer, reader = [machine for machine in machines if machine is not cut]
        figures["cut"] = cut.host
        cut.cut()
        cut_at = time.monotonic()
        bus = await JetStreamBus.connect(nats_url(writer), StreamSettings(replicas=3))
        try:
            await append_turns(bus, keys[0], 1, acknowledged, writer.host)
            figures["first_append_after_cut_s"] = round(time.monotonic() - cut_at, 2)
            for key in keys:
                await append_turns(bus, key, 5, acknowledged, writer.host)
        finally:
            await bus.close()
        check_stream(await stream_messages(nats_url(reader)), acknowledged)
        # The cut-off server takes no append: it has no quorum.
        answer = await asyncio.to_thread(publish_inside, cut, "mirror.machines.stale.main", 3.0)
        figures["publish_on_the_cut_off_machine"] = answer
        assert answer.startswith("refused"), answer
        cut.heal()
        healed_at = time.monotonic()
        await until_async(lambda: replicas_current(nats_url(reader)), "the healed machine's replica is current",
                          timeout=90, poll_s=0.5)
        figures["current_after_heal_s"] = round(time.monotonic() - healed_at, 2)
        # Every acknowledged append, once, on the machine that was cut off too; the refused one nowhere.
        held = await stream_messages(nats_url(cut))
        check_stream(held, acknowledged)
        assert not any(subject == "mirror.machines.stale.main" for _, subject, _ in held)

    asyncio.run(scenario())
    figures["acknowledged"] = len(acknowledged)
    print(f"\nnats cluster across machines: {json.dumps(figures)}")
