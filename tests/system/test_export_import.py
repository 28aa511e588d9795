"""Export on one stack, import on another: two nats-servers and two DuckDB files, in-process.

A conversation thought by the simulator (turns, monologue, narrative, beliefs, recalls, with
their provenance) is written to stack A through its bus, exported from A's log, and imported
into stack B through B's bus. On B it verifies with zero model calls and its state at every
seq is A's — under the same tenant and under another. A second import is refused (the
conversation exists), so is one onto a tombstone unless forced, and a corrupted archive is
refused naming what is wrong, with nothing appended.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.archive import read_archive, write_archive
from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.envelope import make_event
from mirror.events.errors import ArchiveInvalid, ImportRefused
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings, connect_nats
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Fork, Turn
from mirror.events.transfer import export_conversations, import_archive
from mirror.replay.history import History
from mirror.replay.verify_log import verify_conversations
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL
from tests.support.stack import REFLECTION
from tests.support.waits import until_async

KEY = StreamKey("acme", "ada")
BRANCH = StreamKey("acme", "ada", "retry")


@dataclass
class Stack:
    bus: JetStreamBus
    log: LogClient
    ingester: Ingester


@contextlib.asynccontextmanager
async def stack(directory: Path) -> AsyncIterator[Stack]:
    """A nats-server, its ingester into a DuckDB file, a bus and a log client: one whole store.
    (A short duplicate window: a forced import after a forget waits for it to pass.)"""
    stream = StreamSettings(duplicate_window_s=1.0)
    with EmbeddedNats(directory / "nats") as server:
        nc = await connect_nats(server.url, name="test-transfer")
        event_log = DuckDBEventLog(directory / "log.duckdb")
        ingester = Ingester(nc, event_log, IngesterSettings(compact_interval_s=3600), stream=stream)
        await ingester.start()
        bus = await JetStreamBus.connect(server.url, stream)
        try:
            yield Stack(bus, LogClient(nc), ingester)
        finally:
            await bus.close()
            await ingester.stop()
            await event_log.close()
            await nc.close()


async def thought_conversation(sim: SimLLMServer) -> list:
    """A conversation the simulator thought through, in memory: the events a live stack writes."""
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=sim.base_url, model=SIM_MODEL, max_retries=1,
                                                           backoff_initial_s=0.01), reflection=REFLECTION)
    local = LocalPlacement(settings)
    try:
        conversation = local.handle(KEY)
        await conversation.turn(TurnRequest("My name is Ada and I am allergic to peanuts."))
        await conversation.turn(TurnRequest("Suggest a snack for me.", sync=True))
        await conversation.turn(TurnRequest("And something to drink?", sync=True))
        assert await conversation.wait_idle(timeout=60)
        return await infrastructure.event_log.read(KEY)
    finally:
        await local.close()


async def written(source: Stack, events: list) -> None:
    """``events`` (and a forked branch of them) appended to ``source`` as a writer would, committed."""
    await source.bus.append(KEY, events, Head(0, 0))
    fork = len(events) // 2
    branch = [make_event(BRANCH, fork + 1, Fork(parent_branch="main", fork_seq=fork, prompt_set="default"), turn=1,
                         timestamp=events[-1].timestamp + 1),
              make_event(BRANCH, fork + 2, Turn("on the branch", "a branch reply"), turn=2,
                         timestamp=events[-1].timestamp + 2)]
    await source.bus.append(BRANCH, branch, Head(0, 0).with_last_seq(fork))
    assert await source.log.wait_caught_up(5)


async def states(log: LogClient, key: StreamKey) -> list:
    history = History(log, materialize=False)
    last = await log.last_seq(key)
    return [await history.state_at(key, seq) for seq in range(1, last + 1)]


async def exported(stack_: Stack, tenant: str = "acme") -> bytes:
    found = await export_conversations(stack_.log, tenant, None)
    return write_archive(tenant, found.conversations, personas=found.personas)


async def test_a_conversation_moves_to_another_stack_and_verifies_there(sim: SimLLMServer, tmp_path: Path) -> None:
    events = await thought_conversation(sim)
    async with stack(tmp_path / "a") as source, stack(tmp_path / "b") as target:
        await written(source, events)
        archive = await exported(source)
        manifest = read_archive(archive).manifest
        assert manifest["conversations"]["ada"]["branches"]["retry"]["first_seq"] == len(events) // 2 + 1
        assert manifest["counts"]["events"] == len(events) + 2

        calls = sim.stats()["calls"]
        imported = await import_archive(target.bus, target.log, read_archive(archive))
        assert imported.conversations == {"ada": len(events) + 2}
        for key in (KEY, BRANCH):
            assert await target.log.read(key) == await source.log.read(key)
        assert await states(target.log, KEY) == await states(source.log, KEY)
        assert await states(target.log, BRANCH) == await states(source.log, BRANCH)
        reports = await verify_conversations(target.log, "acme", "ada")
        assert [report.ok for report in reports] == [True] and reports[0].steps > 0
        assert reports[0].model_calls == 0 and sim.stats()["calls"] == calls

        # The same archive under another tenant: ids and causations renamed, verifies as well.
        await import_archive(target.bus, target.log, read_archive(archive), tenant="globex")
        moved = StreamKey("globex", "ada")
        assert [(e.seq, e.payload) for e in await target.log.read(moved)] == [(e.seq, e.payload) for e in events]
        assert [report.ok for report in await verify_conversations(target.log, "globex", "ada")] == [True]

        with pytest.raises(ImportRefused, match="exists already"):
            await import_archive(target.bus, target.log, read_archive(archive))

        # Forgotten on the target: refused, unless forced (the tombstone lifted, the events back).
        await target.log.forget("acme", "ada")

        async def swept() -> bool:
            tombstone = await target.log.tombstone("acme", "ada")
            return tombstone is not None and tombstone["status"] == "forgotten"
        await until_async(swept, "the sweep to finish", timeout=60)
        with pytest.raises(ImportRefused, match="forgotten"):
            await import_archive(target.bus, target.log, read_archive(archive))
        async def forced() -> bool:
            # Within the broker's duplicate window the erased ids read as duplicates: refused, nothing appended.
            try:
                await import_archive(target.bus, target.log, read_archive(archive), force=True)
            except ImportRefused as refused:
                assert refused.reason == "refused" and await target.log.conversations("acme", "ada") == []
                assert (await target.bus.head(KEY)).last_seq is None  # nothing of it on the bus either
                assert await target.log.tombstone("acme", "ada") is not None  # still forgotten
                return False
            return True
        await until_async(forced, "the forced import to pass the duplicate window", timeout=30)
        assert await target.log.read(KEY) == await source.log.read(KEY)
        assert await target.log.tombstone("acme", "ada") is None


def _rewritten(archive: bytes, change: dict[str, bytes | None]) -> bytes:
    """``archive`` with members replaced (or, with None, left out), the manifest untouched."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as source, tarfile.open(fileobj=out, mode="w") as tar:
        for info in source:
            data = source.extractfile(info).read()  # type: ignore[union-attr]
            if info.name in change:
                replacement = change[info.name]
                if replacement is None:
                    continue
                data, info.size = replacement, len(replacement)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def test_a_corrupted_archive_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    key = StreamKey("acme", "short")
    events = [make_event(key, seq, Turn(f"said {seq}", f"heard {seq}"), turn=seq, timestamp=100.0 + seq)
              for seq in range(1, 6)]
    async with stack(tmp_path / "a") as source:
        await source.bus.append(key, events, Head(0, 0))
        assert await source.log.wait_caught_up(5)
        archive = await exported(source)
        member = "events/short/main.msgpack"
        original = read_archive(archive)
        body = b"".join(encode(event) for event in events)
        flipped = bytearray(body)
        flipped[len(flipped) // 2] ^= 0x01
        cases = {
            "not a tar": b"definitely not an archive",
            "flipped byte": _rewritten(archive, {member: bytes(flipped)}),
            "missing member": _rewritten(archive, {member: None}),
            "no manifest": _rewritten(archive, {"manifest.json": None}),
            "truncated": archive[: archive.index(body) + len(body) // 2],  # in the middle of the events
        }
        problems = {}
        for name, data in cases.items():
            with pytest.raises(ArchiveInvalid) as refused:
                read_archive(data)
            problems[name] = str(refused.value)
        assert "SHA-256" in problems["flipped byte"] and member in problems["flipped byte"]
        assert "missing" in problems["missing member"] and member in problems["missing member"]
        assert "no manifest.json" in problems["no manifest"]
        assert "not a readable tar" in problems["not a tar"] and "not a readable tar" in problems["truncated"]
        assert original.events == 5
    # Nothing of a refused archive reached any store: reading fails before the bus is touched.
    async with stack(tmp_path / "b") as target:
        with pytest.raises(ArchiveInvalid):
            await import_archive(target.bus, target.log, read_archive(cases["flipped byte"]))
        assert await target.log.conversations("acme") == []
