"""Fixtures: a real nats-server per session (and per crash test), real DuckDB files."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats.js.errors
import pytest

from mirror.events.bus import InMemoryBus
from mirror.events.jetstream import JetStreamBus, StreamSettings, connect_nats
from mirror.events.nats_server import EmbeddedNats


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


async def reset_stream(url: str, settings: StreamSettings = StreamSettings()) -> None:
    """Drop the event stream so a test starts from an empty broker (consumers go with it)."""
    nc = await connect_nats(url, name="mirror-test-reset")
    try:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(settings.name)
    finally:
        await nc.close()


@pytest.fixture
async def nats_url(nats_server: EmbeddedNats) -> str:
    await reset_stream(nats_server.url)
    return nats_server.url


@pytest.fixture(params=["memory", "jetstream"])
async def bus(request: pytest.FixtureRequest, nats_server: EmbeddedNats) -> AsyncIterator[object]:
    """Every adapter of the bus port; the contract suite runs against each."""
    if request.param == "memory":
        adapter: object = InMemoryBus()
    else:
        await reset_stream(nats_server.url)
        adapter = await JetStreamBus.connect(nats_server.url)
    yield adapter
    await adapter.close()  # type: ignore[attr-defined]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "log.duckdb"


def run(coroutine):  # type: ignore[no-untyped-def]
    """Run a coroutine from synchronous test code (stateful machines, process tests)."""
    return asyncio.run(coroutine)
