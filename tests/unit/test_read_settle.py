"""The gateway's read-your-writes barrier (:meth:`GatewayRuntime.settled`) on the in-memory
infrastructure, whose ingestion a test can hold back and let go: a read waits for the log to
commit what the bus acknowledged and then includes it; past its bound it is a 503 with
``Retry-After``, never an answer missing an acknowledged seq.

(Over real NATS, an ingester process and HTTP, every route: tests/system/test_read_your_writes.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException

from mirror.actors.settings import RuntimeSettings
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Turn
from mirror.gateway.errors import UnknownConversation
from mirror.gateway.runtime import RETRY_AFTER_S, FinishedJobs, GatewayRuntime
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.tenants import TenantRegistry

KEY = StreamKey("acme", "chat")


class HeldIngest:
    """The in-memory log's ingestion, held back: what the bus stores waits here until :meth:`release`."""

    def __init__(self, infrastructure: InMemoryInfrastructure) -> None:
        self.infrastructure = infrastructure
        self.held: list[tuple[int, Event]] = []
        infrastructure.bus.on_stored.remove(infrastructure.event_log.ingest)
        infrastructure.bus.on_stored.append(self._hold)

    def _hold(self, position: int, event: Event) -> None:
        self.held.append((position, event))

    def release(self) -> None:
        for position, event in self.held:
            self.infrastructure.event_log.ingest(position, event)
        self.held.clear()


def no_conversations(key: StreamKey) -> Any:
    raise AssertionError("a read asks no conversation")


def runtime_of(infrastructure: InMemoryInfrastructure, tmp_path: Path, **settings: Any) -> GatewayRuntime:
    gateway = GatewaySettings(RuntimeSettings(infrastructure, None), str(tmp_path / "tenants.json"), **settings)  # type: ignore[arg-type]  # no LLM: nothing here calls one
    return GatewayRuntime(gateway, TenantRegistry(gateway.tenants_file), no_conversations, FinishedJobs(8))


async def append_turns(infrastructure: InMemoryInfrastructure, key: StreamKey, count: int) -> None:
    bus = infrastructure.bus
    head = await bus.head(key)
    if head.last_seq is None:
        head = head.with_last_seq(0)
    for _ in range(count):
        seq = head.next_seq(key)
        head = await bus.append(key, [make_event(key, seq, Turn(f"q{seq}", f"a{seq}"), turn=seq - 1)], head)


async def test_a_read_waits_for_the_log_and_then_includes_the_acknowledged_seq(tmp_path: Path) -> None:
    infrastructure = InMemoryInfrastructure()
    runtime = runtime_of(infrastructure, tmp_path)
    await append_turns(infrastructure, KEY, 2)
    assert await runtime.settled(KEY) == 2  # the log caught up: nothing to wait for
    ingest = HeldIngest(infrastructure)
    await append_turns(infrastructure, KEY, 1)
    assert await infrastructure.event_log.last_seq(KEY) == 2  # the log is behind the stream
    read = asyncio.create_task(runtime.existing(KEY))
    await asyncio.sleep(0.01)  # let the read start waiting (what it returns does not depend on it)
    assert not read.done(), "the read answered while the log was behind"
    ingest.release()
    assert await read == 3


async def test_past_its_bound_a_read_is_a_503_with_retry_after(tmp_path: Path) -> None:
    infrastructure = InMemoryInfrastructure()
    runtime = runtime_of(infrastructure, tmp_path, read_settle_timeout_s=0.05)
    await append_turns(infrastructure, KEY, 1)
    HeldIngest(infrastructure)
    await append_turns(infrastructure, KEY, 1)
    with pytest.raises(HTTPException) as refused:
        await runtime.settled(KEY)
    assert refused.value.status_code == 503 and refused.value.headers == {"Retry-After": str(RETRY_AFTER_S)}
    assert "seq 2 is acknowledged" in refused.value.detail
    with pytest.raises(HTTPException) as listed:
        await runtime.settled_tenant(KEY.tenant)  # a tenant's list: the same bound, the same answer
    assert listed.value.status_code == 503 and listed.value.headers == {"Retry-After": str(RETRY_AFTER_S)}


async def test_a_conversation_only_the_stream_holds_exists_and_an_unknown_one_is_a_404(tmp_path: Path) -> None:
    infrastructure = InMemoryInfrastructure()
    runtime = runtime_of(infrastructure, tmp_path, read_settle_timeout_s=0.05)
    with pytest.raises(UnknownConversation):  # the error table's 404
        await runtime.existing(KEY)
    await append_turns(infrastructure, KEY, 1)
    branch = StreamKey(KEY.tenant, KEY.conversation, "rc-1")
    assert await runtime.existing(branch) == 0  # the conversation exists; its branch has no events
    with pytest.raises(UnknownConversation):
        await runtime.existing(StreamKey(KEY.tenant, "other", "rc-1"))


@pytest.mark.parametrize("bound", [0.0, -1.0, 5.5])
def test_a_read_bound_outside_what_the_log_grants_is_refused(tmp_path: Path, bound: float) -> None:
    with pytest.raises(ValueError, match="read_settle_timeout_s"):
        runtime_of(InMemoryInfrastructure(), tmp_path, read_settle_timeout_s=bound)
