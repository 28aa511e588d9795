"""The ingester as a Ray actor on a real local Ray: killed mid-stream, restarted, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import ray

from mirror.actors.conversation import Conversation
from mirror.actors.errors import IngesterUnavailable
from mirror.actors.ingester_actor import RayIngester
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.codec import decode
from mirror.events.errors import LogUnavailable
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Turn
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.stack import REFLECTION, local_ray, nats_of, reset_stream, retried
from tests.support.waits import process_alive, until_gone

CONVERSATIONS = 6


def reply_of(data: bytes) -> str:
    payload = decode(data).payload
    assert isinstance(payload, Turn)
    return payload.reply


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A private cluster, not the session's: this module SIGKILLs Ray worker processes."""
    with local_ray():
        yield


@pytest.fixture
def nats_url(nats_server: EmbeddedNats) -> str:
    asyncio.run(reset_stream(nats_server.url))
    return nats_server.url


def wait_restarted(ingester: RayIngester, old_pid: int) -> int:
    """The pid of the next incarnation once it serves again, asked once the old worker is gone
    (asked before, the old incarnation could still answer)."""
    until_gone(old_pid, "the killed ingester's worker")
    new_pid = retried(lambda: ingester.actor.ready.remote(60), retry_for_s=60)
    assert new_pid != old_pid
    return new_pid


async def converse(settings: RuntimeSettings, ingester: RayIngester
                   ) -> tuple[dict[StreamKey, list[str]], dict[str, int], list[int]]:
    """Turns from several conversations; the ingester is killed twice while they flow.

    Returns the replies, each conversation's last seq, and the offset seen committed before each kill.
    """
    keys = [StreamKey("ia", f"c{index}") for index in range(CONVERSATIONS)]
    conversations = [await Conversation(key, settings).start() for key in keys]
    replies: dict[StreamKey, list[str]] = {key: [] for key in keys}
    flowing = asyncio.Event()
    done = False

    async def talk(conversation: Conversation) -> None:
        turn = 0
        while not done:
            answer = await conversation.turn(TurnRequest(f"message {turn}"))  # returns once the turn is acknowledged
            replies[conversation.key].append(answer.reply)
            turn += 1
            if turn == 3:
                flowing.set()

    talkers = [asyncio.create_task(talk(conversation)) for conversation in conversations]
    await flowing.wait()
    log_client = conversations[0].log
    committed_before_kills: list[int] = []

    async def something_committed() -> None:
        """Wait for a commit newer than the last kill's, so a restart has an offset to resume after."""
        floor = committed_before_kills[-1] if committed_before_kills else 0
        deadline = asyncio.get_running_loop().time() + 60
        while (offset := await committed_offset()) <= floor:
            assert asyncio.get_running_loop().time() < deadline, "the ingester committed nothing"
            await asyncio.sleep(0.05)
        committed_before_kills.append(offset)

    async def committed_offset() -> int:
        """The log's committed offset, or 0 while its owner is restarting (a 2 s read budget runs
        out on a loaded machine: not yet is what that means here)."""
        try:
            return await log_client.committed_offset()
        except LogUnavailable:
            return 0

    async def answered_again(more: int = 2) -> None:
        """Until every conversation has answered ``more`` turns after this call; a talker ends only
        by failing, so one that is done raises what stopped it."""
        floor = {key: len(said) + more for key, said in replies.items()}
        deadline = asyncio.get_running_loop().time() + 60
        while any(len(replies[key]) < count for key, count in floor.items()):
            for task in talkers:
                if task.done():
                    task.result()
                    raise AssertionError("a talker stopped")
            assert asyncio.get_running_loop().time() < deadline, "the conversations stopped answering"
            await asyncio.sleep(0.02)

    await something_committed()
    old_pid = await asyncio.to_thread(lambda: ingester.pid)
    os.kill(old_pid, signal.SIGKILL)  # kill -9 of the ingester's Ray worker, turns still flowing
    await answered_again()  # turns do not wait for the ingester
    second_pid = await asyncio.to_thread(wait_restarted, ingester, old_pid)
    await something_committed()
    ray.kill(ingester.actor, no_restart=False)  # Ray's own kill, restarted too
    await asyncio.to_thread(wait_restarted, ingester, second_pid)
    await answered_again()
    done = True
    await asyncio.gather(*talkers)
    for conversation in conversations:
        assert await conversation.wait_idle(60)
    bus = conversations[0].bus
    assert isinstance(bus, JetStreamBus)
    last = (await bus.js.stream_info(nats_of(settings).stream.name)).state.last_seq
    assert await conversations[0].log.wait_committed(last, timeout=60)
    heads = {conversation.key.conversation: conversation.state.last_seq for conversation in conversations}
    for conversation in conversations:
        await conversation.stop()
    return replies, heads, committed_before_kills


def test_kill_9_of_the_ingester_actor_loses_and_doubles_nothing(ray_cluster: None, nats_url: str, tmp_path: Path) -> None:
    db = tmp_path / "log.duckdb"
    with SimLLMServer(SimSettings(latency="fixed:5")) as sim:
        settings = RuntimeSettings(infrastructure=NatsInfrastructure(nats_url, shard="ia"), mode="full",
                                   llm=LLMSettings(base_url=sim.base_url, model="mirror-sim", max_retries=1), reflection=REFLECTION)
        ingester = RayIngester(nats_url, db, shard="ia", log_path=tmp_path / "ingester.log").start()
        try:
            replies, heads, committed_before_kills = asyncio.run(converse(settings, ingester))
        finally:
            ingester.stop()
    assert sum(map(len, replies.values())) > CONVERSATIONS * 5

    with duckdb.connect(str(db), read_only=True) as con:  # the lock was released by stop()
        assert con.execute("SELECT count(*) FROM rejected_events").fetchone() == (0,)
        for key, said in replies.items():
            seqs = [row[0] for row in con.execute(
                "SELECT seq FROM events WHERE tenant = 'ia' AND conversation = ? ORDER BY seq", [key.conversation]
            ).fetchall()]
            assert seqs == list(range(1, heads[key.conversation] + 1)), f"gap or double in {key}"
            turns = con.execute(
                "SELECT data FROM events WHERE tenant = 'ia' AND conversation = ? AND type = 'turn' ORDER BY seq",
                [key.conversation],
            ).fetchall()
            assert [reply_of(row[0]) for row in turns] == said  # every acknowledged turn, once
    # The first start and two restarts, each resuming after the offset committed before it.
    starts = [int(match) for match in re.findall(r"ingester ia started: \S+ from stream seq (\d+)",
                                                  (tmp_path / "ingester.log").read_text())]
    assert len(starts) == 3 and starts[0] == 1, starts
    assert starts[1] > committed_before_kills[0] and starts[2] > committed_before_kills[1], (starts, committed_before_kills)


def test_one_ingester_per_shard_and_per_file(ray_cluster: None, nats_url: str, tmp_path: Path) -> None:
    db = tmp_path / "log.duckdb"
    first = RayIngester(nats_url, db, shard="one").start()
    try:
        with pytest.raises(ValueError, match="ingester-one"):  # the name is taken: one actor per shard
            RayIngester(nats_url, tmp_path / "other.duckdb", shard="one").start()
        assert first.pid  # the rejected twin did not harm the first
        started = time.monotonic()
        with pytest.raises(IngesterUnavailable, match="another process holds its lock"):
            RayIngester(nats_url, db, shard="two").start(timeout=3)  # another shard, the same file
        # It gives up rather than hangs: 3 s of waiting, plus a Ray worker's start, which takes
        # half a minute on a loaded two-core machine (seen: 32 s at load 9).
        assert time.monotonic() - started < 120
    finally:
        first.stop()


def test_stop_releases_the_file_while_the_worker_lives(ray_cluster: None, nats_url: str, tmp_path: Path) -> None:
    db = tmp_path / "log.duckdb"
    ingester = RayIngester(nats_url, db, shard="rel").start()
    try:
        pid = ingester.pid
        ray.get(ingester.actor.stop.remote(), timeout=30)
        assert process_alive(pid)
        duckdb.connect(str(db)).close()  # a writer can open it now
    finally:
        ingester.kill()
