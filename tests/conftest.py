"""Fixtures: a real nats-server per session (and per crash test), real DuckDB files, one simulator
per session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mirror.events.bus import EventBus, InMemoryBus
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings
from mirror.events.nats.server import EmbeddedNats
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.logs import ADAPTERS, WritableLog, writable_log
from tests.support.stack import clear_named_actors, reset_stream, start_ray, stop_ray


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def nats_url(nats_server: EmbeddedNats) -> str:
    await reset_stream(nats_server.url)
    return nats_server.url


@pytest.fixture(params=["memory", "jetstream", "jetstream-atomic"])
async def bus(request: pytest.FixtureRequest, nats_server: EmbeddedNats) -> AsyncIterator[EventBus]:
    """Every adapter of the bus port; the contract suite runs against each. ``jetstream-atomic``
    appends several events as one atomic batch even on this single server (by default only a
    replicated stream does), so the suite holds for both ways of appending."""
    if request.param == "memory":
        adapter: EventBus = InMemoryBus()
    else:
        await reset_stream(nats_server.url)
        settings = StreamSettings(atomic_appends=True) if request.param == "jetstream-atomic" else StreamSettings()
        adapter = await JetStreamBus.connect(nats_server.url, settings)
    yield adapter
    await adapter.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "log.duckdb"




@pytest.fixture(params=ADAPTERS)
async def event_log(request: pytest.FixtureRequest, tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[WritableLog]:
    """Every adapter of the log port (in-memory, DuckDB, the NATS client of a DuckDB log's
    service), each with its write path; the contract suite runs against each."""
    async with writable_log(request.param, tmp_path, nats_server.url) as adapter:
        yield adapter


@pytest.fixture(scope="session")
def sim_server() -> Iterator[SimLLMServer]:
    """The simulator with default settings, on a free loopback port, for the whole session."""
    with SimLLMServer(SimSettings()) as server:
        yield server


@pytest.fixture
def sim(sim_server: SimLLMServer) -> SimLLMServer:
    """The session's simulator with its counters zeroed and no fault scripted."""
    sim_server.reset()
    return sim_server


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Stops, at the end of the session, the one local Ray cluster the modules share."""
    yield
    stop_ray()


@pytest.fixture(scope="module")
def ray_cluster(ray_session: None) -> Iterator[None]:
    """The session's local Ray cluster (started by the first module that asks), with Mirror's
    namespace emptied of named actors before and after the module. Modules that kill Ray's
    processes use ``tests.support.stack.local_ray`` for a private cluster instead."""
    start_ray()
    clear_named_actors()
    yield
    clear_named_actors()
