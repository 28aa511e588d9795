"""Forgetting on a NATS cluster of three (R3 streams): every node's store directory — its stream
blocks and its Raft logs, which hold a copy of every message that no message delete reaches —
is scanned bytewise after forgetting a conversation and a whole tenant. The messages are sealed with the conversation's data key
(:mod:`mirror.events.nats.sealing`), so no node holds the canary's plaintext at any time; the
key's own bytes leave every node's files once each has snapshotted the key stream's Raft group."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.events.bus import Head
from mirror.events.duckdb.ingester import IngesterSettings
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.cluster import EmbeddedNatsCluster
from mirror.events.nats.jetstream import JetStreamBus, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.payloads import Turn
from mirror.harness.bench.erasure_residue import occurrences, scan
from tests.support.stack import ingesting
from tests.support.waits import until_async

GONE, KEPT = StreamKey("acme", "gone"), StreamKey("acme", "kept")
GONE_CANARY, KEPT_CANARY = "canary-5c20-cluster-forget-me", "canary-e913-cluster-keep-me"
TENANT_GONE = (StreamKey("beta", "b1"), StreamKey("beta", "b2"))  # a whole tenant forgotten
TENANT_CANARY = "canary-77d1-cluster-tenant-forget-me"


def turns(key: StreamKey, canary: str, first: int, count: int) -> list[Event]:
    return [make_event(key, seq, Turn(f"{canary} says {seq}", f"{canary} heard {seq}"), turn=seq, timestamp=2000.0 + seq)
            for seq in range(first, first + count)]


@pytest.mark.long  # a cluster of three, a forget, and up to one Raft snapshot interval: ~3 min
async def test_no_node_of_a_cluster_of_three_keeps_a_forgotten_conversation_or_tenant_readable(tmp_path: Path) -> None:
    with EmbeddedNatsCluster(tmp_path / "nats", 3) as cluster:
        bus = await JetStreamBus.connect(cluster.url)
        nc = await connect_nats(cluster.url, name="test-forget-cluster")
        client = LogClient(nc)
        try:
            assert (await bus.js.stream_info("MIRROR")).config.num_replicas == 3
            async with ingesting(cluster.url, tmp_path / "log.duckdb", IngesterSettings(compact_interval_s=3600),
                                 name="test-forget-cluster-ingester") as ingester:
                gone, kept = Head(0, 0), Head(0, 0)
                tenant_heads = [Head(0, 0) for _ in TENANT_GONE]
                for first in (1, 11, 21):
                    gone = await bus.append(GONE, turns(GONE, GONE_CANARY, first, 10), gone)
                    kept = await bus.append(KEPT, turns(KEPT, KEPT_CANARY, first, 10), kept)
                    for index, key in enumerate(TENANT_GONE):
                        tenant_heads[index] = await bus.append(key, turns(key, TENANT_CANARY, first, 10),
                                                               tenant_heads[index])
                assert await ingester.wait_for_offset(max(kept.fence, *(h.fence for h in tenant_heads)), timeout=60)
                await ingester.compact()  # most of every conversation: purged from the stream, not erased
                secrets = [(await bus.keys.for_writing(key.tenant, key.conversation)).key.secret
                           for key in (GONE, *TENANT_GONE)]
                assert (await bus.js.stream_info("MIRROR_KEYS")).config.num_replicas == 3
                assert all(occurrences(tmp_path / "nats" / f"n{index}", secret)
                           for index in range(3) for secret in secrets)

                await client.forget("acme", "gone")
                await client.forget_tenant("beta")

                async def done() -> bool:
                    tombstone = await client.tombstone("acme", "gone")
                    tenant = await client.tenant_tombstone("beta")
                    return (tombstone is not None and tombstone["status"] == "forgotten"
                            and tenant is not None and tenant["status"] == "forgotten")
                await until_async(done, "the sweeps to finish", timeout=60)
            for index in range(3):
                store = tmp_path / "nats" / f"n{index}"
                assert scan(store, GONE_CANARY.encode()) == {}, f"node {index}"
                assert scan(store, TENANT_CANARY.encode()) == {}, f"node {index}"
                assert scan(store, KEPT_CANARY.encode()) == {}, f"node {index}: the stream holds ciphertext only"
            assert "log.duckdb" in scan(tmp_path, KEPT_CANARY.encode())  # the log keeps plain events
            # The key's message is erased at once; its copy in each node's Raft log of the key stream
            # goes when that node next snapshots the stream (nats-server: every 2 minutes; 147 s measured).
            assert scan(tmp_path, TENANT_CANARY.encode()) == {}  # the log and its WAL too
            await until_async(lambda: not any(scan(tmp_path / "nats" / f"n{index}", secret)
                                              for index in range(3) for secret in secrets),
                              "every node's copies of the erased keys to go", timeout=300, poll_s=5)
        finally:
            await nc.close()
            await bus.close()
