"""Several machines that do not share a loopback: Linux network namespaces on a bridge
(``tests/support/netns.py``), each with its own address, disk, Ray temp dir and processes.

- A JetStream cluster of three, one nats-server per machine: appends through one machine are
  read through another; with one machine cut off the network the other two still take appends
  (R3 keeps a quorum of two), the cut-off one takes none, and once healed it holds every
  acknowledged append exactly once.
- Head + two workers as docs/operations.md ("Several machines") deploys them
  (``tests/support/deployment.py``), under closed-loop turns over every gateway: W1 loses power
  and boots again, W2 is cut off for 30 s and healed. Nothing acknowledged is lost or doubled,
  seqs have no gap, no log holds a rejected event, no turn is answered 500, every conversation
  answers again through every gateway. It prints what each fault cost (``machines: {...}``:
  time to answer again, turns failed then retried, where the conversations lived), the figures
  of docs/operations.md.
- A turn in flight to a conversation host on W2 (the simulator holding the model's answer for
  minutes) when W2 is cut off the network: the client is answered 503 with ``Retry-After`` soon
  after Ray declares W2's node dead, not after the gateway's 300 s actor time-out; the turns in
  flight on the other machines go on.

Marker ``machines`` (not in the default run; ``.ci/run`` runs it); skipped where ``ip netns add``
is not permitted (it needs root and iproute2).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.actors.conversation_actor import actor_name
from mirror.actors.placement.routing import host_for
from mirror.events.bus import Head
from mirror.events.codec import decode, encode
from mirror.events.envelope import make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats, key_of_subject
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Turn
from mirror.harness.chaos.checker import check_conversation
from tests.support.balanced_load import BalancedLoad, Conversation
from tests.support.balanced_load import client as balanced_client
from tests.support.cluster import stream_messages
from tests.support.deployment import NATS_PORT, RAY_PORT, Deployment, log_lines
from tests.support.netns import SKIP_REASON, Machine, Machines, netns_permitted
from tests.support.waits import until_async

pytestmark = pytest.mark.machines

HOSTS = ["h", "w1", "w2"]
STREAM = "MIRROR"


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    if not netns_permitted():
        pytest.skip(SKIP_REASON)
    with Machines(HOSTS, tmp_path) as made:
        yield made


def nats_url(machine: Machine) -> str:
    return f"nats://{machine.address}:{NATS_PORT}"


def start_nats_cluster(machines: Machines) -> None:
    """``mirror nats --bind --routes --name`` on every machine, until each knows the meta leader."""
    deployment = Deployment(machines)
    for machine in machines:
        deployment.start_nats(machine)
    for machine in machines:
        deployment.wait(machine, "nats", functools.partial(deployment.nats_ready, machine),
                        "NATS is ready with a meta leader")


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


# ---------------------------------------------------------------------- head + two workers under load

TURN_PAUSE_S = 1.0
"""A person's pace, roughly: each turn makes several events and model calls, on 2 cores shared by three machines."""
CUT_S = 30.0
"""How long W2 stays cut off: twice Ray's ~15 s until it declares a silent node dead."""
RECOVERY_S = 150.0
"""Deadline of every conversation answering again after a fault (a bound on failure, not a wait)."""
CLUSTER_PROBE = """
import json, sys, logging, ray
ray.init(address=sys.argv[1], namespace="mirror", log_to_driver=False, logging_level=logging.WARNING)
address = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
alive = sorted(node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"])
hosts = {}
if sys.argv[2] == "hosts":
    for name in ray.util.list_named_actors():
        if name.startswith("conversation-host-"):
            try:
                host = ray.get_actor(name)
                stats = ray.get(host.stats.remote(), timeout=20)
                live = ray.get(host.live.remote(), timeout=20)
                hosts[name] = {"machine": address.get(stats["node_id"]), "conversations": sorted(k.conversation for k in live)}
            except Exception as exc:
                hosts[name] = {"error": type(exc).__name__}
print("cluster:", json.dumps({"alive": alive, "hosts": hosts}))
"""
"""Asked from the head as a Ray driver: the addresses of the live Ray nodes and, with ``hosts``,
each conversation host's machine and live conversations (the cluster must be healthy: a call to
a host on a cut-off machine would wait)."""


def probe_cluster(deployment: Deployment, what: str = "nodes") -> dict[str, Any]:
    head = deployment.head
    result = head.call([sys.executable, "-c", CLUSTER_PROBE, f"{head.address}:{RAY_PORT}", what], timeout=120)
    answer = [line for line in result.stdout.splitlines() if line.startswith("cluster: ")]
    if result.returncode != 0 or not answer:
        return {"alive": [], "hosts": {}, "error": result.stderr[-1000:]}
    return dict(json.loads(answer[-1].removeprefix("cluster: ")))


def conversations_on(machine: Machine, placement: dict[str, Any]) -> list[str]:
    """The conversations live on ``machine``'s hosts, by the probe's ``hosts``."""
    return sorted(name for host in placement["hosts"].values() if host.get("machine") == machine.address
                  for name in host.get("conversations", ()))


def wall(moment: float, load: BalancedLoad) -> str:
    """The wall-clock time of ``moment`` (seconds into the load), to read beside the machines' logs."""
    return time.strftime("%H:%M:%S", time.localtime(time.time() - (load.now() - moment)))


async def acknowledged_more(load: BalancedLoad, count: int, what: str) -> None:
    target = len(load.acknowledged) + count
    await until_async(lambda: len(load.acknowledged) >= target, what, timeout=RECOVERY_S, poll_s=0.1)


async def every_conversation_answers_since(load: BalancedLoad, moment: float, what: str) -> None:
    names = {conversation.name for conversation in load.conversations}
    await until_async(lambda: load.answered_since(moment) >= names, what, timeout=RECOVERY_S, poll_s=0.1)


async def read_log(load: BalancedLoad, client, gateway: str, conversation: Conversation) -> list[dict]:
    """Every event of ``conversation`` once the log holds its last acknowledged seq (through ``gateway``)."""
    last = max((ack.seq for ack in load.acks_of(conversation.name)), default=0)
    headers = {"Authorization": f"Bearer {load.tokens[conversation.tenant]}"}
    events: list[dict] = []

    async def caught_up() -> bool:
        nonlocal events
        try:
            response = await client.get(f"{gateway}/v1/conversations/{conversation.name}/events",
                                        params={"after": 0, "limit": 1000}, headers=headers)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        events = response.json()["events"]
        return max((event["seq"] for event in events), default=0) >= last

    await until_async(caught_up, f"the log of {conversation.name} holds seq {last}", timeout=RECOVERY_S, poll_s=0.25)
    return events


async def log_stats(deployment: Deployment) -> dict[str, dict[str, int]]:
    """Each shard's ``mirror log stats`` (asked over NATS, as the command does)."""
    nc = await connect_nats(deployment.nats_urls(), name="machines-test-stats")
    try:
        stats = {}
        for shard in ("0", "1"):
            answer = await LogClient(nc, shard=shard, timeout=30).stats()
            stats[shard] = {"events": answer.events, "conversations": answer.conversations,
                            "rejected": answer.rejected, "skipped": answer.skipped}
        return stats
    finally:
        await nc.close()


def test_head_and_two_workers_lose_nothing_when_a_worker_dies_or_is_cut_off(machines: Machines) -> None:
    """PART2's scenario: head + two workers, NATS of three, shard 0 on the head and 1 on W1, turns
    of both shards' tenants over every gateway; (a) every process of W1 killed, then started
    again; (b) W2 cut off for 30 s, then healed. Nothing acknowledged is lost or doubled, seqs
    have no gap, every conversation answers again, no log holds a rejected (divergent) event."""
    deployment = Deployment(machines)
    h, w1, w2 = (machines[host] for host in HOSTS)
    figures: dict[str, object] = {}
    try:
        started = time.monotonic()
        deployment.start()
        figures["start_s"] = round(time.monotonic() - started, 1)
        asyncio.run(_under_load(deployment, figures))
    finally:
        fenced = log_lines([path for machine in machines for path in
                            [*machine.ray_dir.glob("session_*/logs/*"), *machine.root.glob("*.log"),
                             *machine.data.glob("*.log")]], "was fenced off")
        figures["fenced_off"] = len(fenced)
        print(f"\nmachines: {json.dumps(figures, default=str)}")
        deployment.stop()
    # Each shard's ingester ran on the machine holding its file, and only there.
    assert (h.data / "mirror.duckdb").exists() and not (h.data / "mirror-1.duckdb").exists()
    assert (w1.data / "mirror-1.duckdb").exists() and not (w1.data / "mirror.duckdb").exists()
    assert not list(w2.data.glob("*.duckdb"))


def conversations_per_host(tenants: tuple[str, ...], hosts: int) -> list[Conversation]:
    """For each tenant, one conversation on each host slot (the routing every gateway computes):
    hosts are dealt one per machine, so every machine then holds conversations of both shards."""
    chosen = []
    for tenant in tenants:
        slots: dict[int, str] = {}
        index = 0
        while len(slots) < hosts:
            name = f"{tenant}-{index}"
            slots.setdefault(host_for(actor_name(StreamKey(tenant, name)), hosts), name)
            index += 1
        chosen += [Conversation(tenant, name) for _, name in sorted(slots.items())]
    return chosen


async def _under_load(deployment: Deployment, figures: dict[str, object]) -> None:
    conversations = conversations_per_host(deployment.tenants, deployment.hosts)
    load = BalancedLoad(deployment.gateways(), deployment.tokens, conversations, uuid.uuid4().hex[:6], pause_s=TURN_PAUSE_S)
    async with balanced_client() as client:
        # Every conversation opens through every gateway: each serves both shards' tenants.
        for conversation in conversations:
            for gateway in load.gateways:
                ack = await load.turn(client, conversation, f"opens on {gateway}", gateway=gateway,
                                      deadline=time.monotonic() + 60)
                assert ack is not None, f"{conversation} did not open through {gateway}: {load.failures[-3:]}"
        loops = [asyncio.create_task(load.loop(client, conversation)) for conversation in conversations]
        try:
            await acknowledged_more(load, 3 * len(conversations), "the load flows")
            await _power_loss(deployment, load, figures)
            await acknowledged_more(load, 2 * len(conversations), "the load flows after W1's reboot")
            await _partition(deployment, load, figures)
            await acknowledged_more(load, 2 * len(conversations), "the load flows after W2's heal")
        finally:
            load.stop.set()
            await asyncio.gather(*loops)
        figures["turns"] = {"acknowledged": len(load.acknowledged), "failed_then_retried": len(load.failures),
                            "failed_by_gateway": dict(load.failed_gateways)}
        await _check_logs(deployment, load, client, figures)


async def _placement(deployment: Deployment, victim: Machine, figures: dict[str, object], fault: str) -> None:
    """Where the conversations live before ``fault``; it must hit some of them."""
    placement = await asyncio.to_thread(probe_cluster, deployment, "hosts")
    figures[f"placement_before_{fault}"] = placement["hosts"]
    assert conversations_on(victim, placement), f"no conversation lives on {victim.host}: {fault} would test nothing ({placement})"


async def _power_loss(deployment: Deployment, load: BalancedLoad, figures: dict[str, object]) -> None:
    """(a) W1 loses power: every process of the machine at once; then it boots again."""
    w1 = deployment.machines["w1"]
    await _placement(deployment, w1, figures, "w1_power_loss")
    fault = load.now()
    killed = len(await asyncio.to_thread(w1.kill_all))
    deployment.boot(w1)
    await every_conversation_answers_since(load, fault, "every conversation answers after W1's death")
    await until_async(lambda: asyncio.to_thread(deployment.booted, w1), "W1 serves again", timeout=RECOVERY_S, poll_s=0.5)
    serves_again = load.now() - fault
    # Its NATS member has caught up (R3 again) before the next fault: two at once is more than R3 survives.
    await until_async(lambda: replicas_current(deployment.nats_urls()), "the stream's three replicas are current",
                      timeout=RECOVERY_S, poll_s=0.5)
    figures["w1_power_loss"] = load.figures_since(fault) | {
        "at": wall(fault, load), "killed_processes": killed, "w1_serves_again_s": round(serves_again, 2),
        "nats_replicas_current_s": round(load.now() - fault, 2)}


async def _partition(deployment: Deployment, load: BalancedLoad, figures: dict[str, object]) -> None:
    """(b) W2 cut off the network for :data:`CUT_S`, then healed; once Ray has declared it dead,
    its raylet and ``mirror node`` exit when they hear from the head again, and the machine's
    supervisor (here: :meth:`Deployment.restart_exited`) starts them again."""
    w2 = deployment.machines["w2"]
    await _placement(deployment, w2, figures, "w2_cut")
    await asyncio.to_thread(w2.cut)
    fault = load.now()
    await asyncio.sleep(CUT_S)  # the fault's length, not a wait for a result
    answered_while_cut = sorted(load.answered_between(fault, load.now()))
    await asyncio.to_thread(w2.heal)
    healed = load.now()
    await every_conversation_answers_since(load, fault, "every conversation answers after W2's cut")
    figures["w2_cut"] = load.figures_since(fault) | {"at": wall(fault, load), "answered_while_cut": answered_while_cut}
    restarted: list[str] = []

    def w2_back() -> bool:
        restarted.extend(deployment.restart_exited(w2))
        return w2.address in probe_cluster(deployment)["alive"] and deployment.serves(w2)

    await until_async(lambda: asyncio.to_thread(w2_back), "W2 is a live Ray node and serves again",
                      timeout=RECOVERY_S, poll_s=1.0)
    figures["w2_heal"] = {"at": wall(healed, load), "serves_again_s": round(load.now() - healed, 2), "restarted": restarted}


async def _check_logs(deployment: Deployment, load: BalancedLoad, client: httpx.AsyncClient,
                      figures: dict[str, object]) -> None:
    """Every conversation answers through every gateway; each log holds every acknowledged turn
    once at its seq, without gaps; no shard's log rejected an event; no answer was a 500."""
    conversations = load.conversations
    for conversation in conversations:
        for gateway in load.gateways:
            ack = await load.turn(client, conversation, f"after the faults on {gateway}", gateway=gateway,
                                  deadline=time.monotonic() + 60)
            assert ack is not None, f"{conversation} does not answer through {gateway}: {load.failures[-3:]}"
    checks = []
    for index, conversation in enumerate(conversations):
        events = await read_log(load, client, load.gateways[index % len(load.gateways)], conversation)
        checks.append(check_conversation(conversation.name, load.acks_of(conversation.name), events,
                                         message_prefix=f"machines {load.run_id} "))
    figures["unacknowledged_logged"] = sum(check.unacknowledged_logged for check in checks)
    stats = await log_stats(deployment)
    figures["log_stats"] = stats
    bad = [check.as_dict() for check in checks if not check.ok]
    lost = {check.conversation: [(ack.seq, wall(ack.sent_s, load), wall(ack.acked_s, load), load.gateway_of[ack.message])
                                 for ack in load.acks_of(check.conversation) if ack.seq in check.lost]
            for check in checks if check.lost}
    assert not bad, f"conversations failing the check: {bad}; lost (seq, sent, acknowledged, gateway): {lost}"
    assert all(shard["rejected"] == 0 for shard in stats.values()), f"a log holds rejected events: {stats}"
    errors = [failure for failure in load.failures if failure.kind == "http 500"]
    assert not errors, f"{len(errors)} turns answered 500 (a dependency down is a 503 + Retry-After): {errors[:3]}"


# ---------------------------------------------------------------------- a turn in flight to a machine cut off

HELD_S = 240
"""How long the simulator holds every chat answer: the turns stay in flight through the whole test."""
LOST_WITHIN_S = 90.0
"""Bound on the 503 after the cut: Ray's ~16 s to declare the node dead, plus the node watch's
poll, on a loaded host; far below the simulator's hold and the gateway's 300 s actor time-out."""


def test_a_turn_in_flight_to_a_machine_cut_off_is_answered_503_soon_after_ray_declares_it_dead(machines: Machines) -> None:
    deployment = Deployment(machines, tenants=("default",),
                            sim_args=("--latency", f"fixed:{HELD_S * 1000}", "--embedding-latency", "fixed:0"))
    figures: dict[str, object] = {}
    try:
        deployment.start()
        asyncio.run(_turn_in_flight_to_a_cut_machine(deployment, figures))
    finally:
        print(f"\nhost lost: {json.dumps(figures, default=str)}")
        deployment.stop()


async def _turn_in_flight_to_a_cut_machine(deployment: Deployment, figures: dict[str, object]) -> None:
    h, w2 = deployment.machines["h"], deployment.machines["w2"]
    conversations = conversations_per_host(deployment.tenants, deployment.hosts)  # one per host, so one per machine
    headers = {"Authorization": f"Bearer {deployment.tokens['default']}"}
    async with httpx.AsyncClient(timeout=httpx.Timeout(HELD_S + 120.0, connect=10.0)) as client:
        turns = {conversation.name: asyncio.create_task(client.post(
            f"{deployment.gateway(h)}/v1/conversations/{conversation.name}/turns",
            json={"message": "a turn the model takes minutes to answer"}, headers=headers))
            for conversation in conversations}
        placement: dict[str, Any] = {}

        async def live_on_every_machine() -> bool:
            nonlocal placement
            placement = await asyncio.to_thread(probe_cluster, deployment, "hosts")
            return all(conversations_on(machine, placement) for machine in deployment.machines)

        await until_async(live_on_every_machine, "every conversation live, one on each machine's host",
                          timeout=RECOVERY_S, poll_s=1.0)
        figures["placement"] = placement["hosts"]
        assert not any(turn.done() for turn in turns.values()), {name: turn for name, turn in turns.items() if turn.done()}
        (lost,) = conversations_on(w2, placement)
        await asyncio.to_thread(w2.cut)
        cut_at = time.monotonic()
        try:
            response = await asyncio.wait_for(asyncio.shield(turns[lost]), LOST_WITHIN_S)
        except TimeoutError:
            raise AssertionError(f"the turn in flight to {w2.host} was not answered within {LOST_WITHIN_S} s "
                                 "of the cut") from None
        figures["answered_after_cut_s"] = round(time.monotonic() - cut_at, 2)
        figures["answer"] = {"status": response.status_code, "retry_after": response.headers.get("Retry-After"),
                             "body": response.json()}
        assert response.status_code == 503, response.text
        assert response.headers.get("Retry-After", "").isdigit(), response.headers
        assert response.json().get("error") == "HostLost", response.text
        # The turns in flight on the machines still up are not touched: still waiting on the model.
        others = {name: turn for name, turn in turns.items() if name != lost}
        assert not any(turn.done() for turn in others.values()), \
            {name: turn.result().text if not turn.exception() else turn.exception() for name, turn in others.items() if turn.done()}
        for turn in others.values():
            turn.cancel()
        await asyncio.gather(*others.values(), return_exceptions=True)
