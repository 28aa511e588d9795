"""Two shards, tenants on both: each event lands in its tenant's shard's DuckDB file only, every
reader finds it there, and one shard keeps committing while the other's ingester is down (frozen,
then killed -9 and restarted by Ray)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from mirror.actors.ingester_actor import RayIngester
from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.duckdb.ingester import IngesterSettings
from mirror.events.envelope import make_event
from mirror.events.errors import LogUnavailable
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Monologue, Turn
from mirror.events.shards import ShardMap
from tests.support.stack import gateway_stack, local_ray, reset_stream, retried, shard_log

SHARDS = ShardMap.parse(["east=alpha,gamma"], default="west")
"""alpha and gamma on east; beta, listed nowhere, on the default shard west."""
KEYS = [StreamKey(tenant, f"c{index}") for tenant in ("alpha", "beta", "gamma") for index in range(4)]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A private cluster, not the session's: this module SIGKILLs a Ray worker process."""
    with local_ray():
        yield


class Writer:
    """Appends rounds of events to every key; keeps what was acknowledged and each shard's newest fence."""

    def __init__(self, bus: JetStreamBus) -> None:
        self.bus = bus
        self.heads = {key: Head(0, 0) for key in KEYS}
        self.acknowledged: dict[StreamKey, list[bytes]] = {key: [] for key in KEYS}
        self.newest = dict.fromkeys(SHARDS.shards, 0)
        self.random = random.Random(11)

    async def round(self) -> None:
        batches = []
        for key in KEYS:
            first = self.heads[key].next_seq(key)
            count = self.random.randint(1, 3)
            events = [make_event(key, seq, Turn(f"{key.tenant} {seq}", "reply") if seq % 2 else Monologue("r", "m", "g"))
                      for seq in range(first, first + count)]
            batches.append((key, events, self.heads[key]))
        for (key, events, _), result in zip(batches, await self.bus.append_many(batches), strict=True):
            assert isinstance(result, Head), result  # one writer: never fenced
            self.heads[key] = result
            self.acknowledged[key].extend(map(encode, events))
            shard = SHARDS.shard_of(key.tenant)
            self.newest[shard] = max(self.newest[shard], result.fence)


def ingester_settings(shard: str) -> IngesterSettings:
    return IngesterSettings(shard=shard, filter_subjects=SHARDS.filter_subjects(shard),
                            skip_tenants=SHARDS.skipped_tenants(shard))


async def outage(nats_url: str, east: RayIngester) -> dict[str, Any]:
    """Rounds before, during and after a SIGKILL of east's ingester; returns what was seen."""
    bus = await JetStreamBus.connect(nats_url)
    clients = {shard: LogClient(bus.nc, shard=shard, timeout=5) for shard in SHARDS.shards}
    writer = Writer(bus)
    try:
        for _ in range(3):
            await writer.round()
        for shard, client in clients.items():
            assert await client.wait_committed(writer.newest[shard], 30), shard
        old_pid = await asyncio.to_thread(lambda: east.pid)
        # East is down for as long as the test needs: frozen first (SIGSTOP: it answers nobody and
        # commits nothing, and Ray, which restarts a worker only once it died, leaves it be), then
        # killed -9 once west has committed, and only then restarted by Ray. A kill alone would
        # leave the outage as long as Ray's restart takes, which a fast machine makes shorter
        # than a round and west's commit. The probe waits out no absence (no grace for "no
        # responders") and little silence: it asks who answers now.
        probe = LogClient(bus.nc, shard="east", timeout=0.1, no_responder_grace_s=0)
        os.kill(old_pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while True:  # until nobody answers for east (a request answered as it froze may still land)
                try:
                    await probe.committed_offset()
                except LogUnavailable:
                    break
                assert time.monotonic() < deadline, "east still answers after it was frozen"
            west_before = await clients["west"].committed_offset()
            east_stuck_at = writer.newest["east"]
            await writer.round()  # west commits this round while east is down
            assert await clients["west"].wait_committed(writer.newest["west"], 30)
            west_during = await clients["west"].committed_offset()
            with pytest.raises(LogUnavailable):  # ... and east was still down when it had
                await probe.committed_offset()
            assert writer.newest["east"] > east_stuck_at  # east's tenants appended during the outage too
        finally:
            os.kill(old_pid, signal.SIGKILL)  # kill -9 of the frozen worker: Ray restarts the actor
        new_pid = await asyncio.to_thread(retried, lambda: east.actor.ready.remote(60), retry_for_s=60)  # Ray restarts it
        for _ in range(2):
            await writer.round()
        last = (await bus.js.stream_info(bus.settings.name)).state.last_seq
        assert await clients["east"].wait_committed(writer.newest["east"], 60)
        assert await clients["west"].wait_committed(last, 60)  # west sees every subject: all of the stream
        reads = {key: {shard: [encode(event) for event in await client.read(key)] for shard, client in clients.items()}
                 for key in KEYS}
        stats = {shard: await client.stats() for shard, client in clients.items()}
        return {"writer": writer, "west": (west_before, west_during), "pids": (old_pid, new_pid),
                "reads": reads, "stats": stats}
    finally:
        await bus.close()


def stored(db: Path) -> dict[StreamKey, list[bytes]]:
    rows: dict[StreamKey, list[bytes]] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for tenant, conversation, seq, data in con.execute(
            "SELECT tenant, conversation, seq, data FROM events ORDER BY tenant, conversation, seq"
        ).fetchall():
            key = StreamKey(tenant, conversation)
            rows.setdefault(key, []).append(data)
            assert seq == len(rows[key]), f"gap or double in {key} at seq {seq} of {db.name}"
    return rows


def test_two_shards_each_event_in_one_file_and_one_shard_commits_while_the_other_is_killed(
        ray_cluster: None, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    asyncio.run(reset_stream(nats_server.url))
    files = {shard: tmp_path / f"{shard}.duckdb" for shard in SHARDS.shards}
    ingesters: dict[str, RayIngester] = {}
    try:
        for shard in SHARDS.shards:
            ingesters[shard] = RayIngester(nats_server.url, files[shard], settings=ingester_settings(shard),
                                           log_path=tmp_path / f"{shard}.log").start()
        seen = asyncio.run(outage(nats_server.url, ingesters["east"]))
    finally:
        for ingester in ingesters.values():
            ingester.stop()
    writer: Writer = seen["writer"]
    west_before, west_during = seen["west"]
    assert west_during > west_before  # west kept committing while east was dead
    assert seen["pids"][0] != seen["pids"][1]  # east came back as a new worker process
    east_events = sum(len(writer.acknowledged[key]) for key in KEYS if SHARDS.shard_of(key.tenant) == "east")
    assert seen["stats"]["west"].skipped == east_events  # every east message passed over, once
    assert seen["stats"]["east"].skipped == 0
    for key in KEYS:  # a reader routed by tenant finds everything; the other shard knows nothing of it
        home = SHARDS.shard_of(key.tenant)
        assert seen["reads"][key] == {home: writer.acknowledged[key], **{s: [] for s in SHARDS.shards if s != home}}
    contents = {shard: stored(path) for shard, path in files.items()}
    for shard, rows in contents.items():  # each file holds exactly its tenants' acknowledged events, once
        assert rows == {key: writer.acknowledged[key] for key in KEYS if SHARDS.shard_of(key.tenant) == shard}


def test_the_gateway_reads_each_tenant_from_its_shard(
        ray_cluster: None, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    """acme on the default shard 0, globex on shard 1: turns, lists, events, time travel, memory
    and recompute over HTTP each read the tenant's own shard; the files hold one tenant each."""
    with gateway_stack(nats_server.url, tmp_path, shard="0", latency="fixed:5", shard_map=("1=globex",)) as (url, tokens):
        for tenant, token in tokens.items():
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                for index in range(2):
                    response = http.post("/v1/conversations/chat/turns", params={"sync": "true"},
                                         json={"message": f"{tenant} says {index}"})
                    assert response.status_code == 200, response.text
                listed = http.get("/v1/conversations").json()["conversations"]
                assert [c["id"] for c in listed] == ["chat"] and listed[0]["events"] > 0
                events = http.get("/v1/conversations/chat/events", params={"limit": 1000}).json()["events"]
                turns = [e["payload"]["user_message"] for e in events if e["type"] == "turn"]
                assert turns == [f"{tenant} says 0", f"{tenant} says 1"]
                first = http.get("/v1/conversations/chat/state", params={"at": 1})
                assert first.status_code == 200 and first.json()["seq"] == 1 and first.json()["turns"] == 1
                memory = http.get("/v1/conversations/chat/memory", params={"query": "what did I say?"})
                assert memory.status_code == 200, memory.text
                recalled = {item["statement"] for item in memory.json()["items"]}
                assert recalled and all(statement.startswith(tenant) for statement in recalled), recalled
                done = http.post("/v1/recompute", params={"wait": "true"}, json={"conversations": ["chat"]})
                assert done.status_code == 200, done.text
                assert done.json()["report"]["completed"] == 1 and done.json()["report"]["failed"] == 0
    tenants = {}
    for shard in ("0", "1"):
        with duckdb.connect(str(shard_log(tmp_path, shard, "0")), read_only=True) as con:
            tenants[shard] = {row[0] for row in con.execute("SELECT DISTINCT tenant FROM events").fetchall()}
    assert tenants == {"0": {"acme"}, "1": {"globex"}}
