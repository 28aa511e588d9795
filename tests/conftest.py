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


@contextlib.contextmanager
def conversation_runtime(nats_url: str, directory: Path, *, shard: str, latency: str = "fixed:0",
                         **overrides: object) -> Iterator[object]:
    """What a live conversation needs: an empty stream, an ingester process, the simulator.

    Yields the ``RuntimeSettings`` for it; everything is stopped afterwards.
    """
    from mirror.actors.conversation import RuntimeSettings
    from mirror.actors.processes import IngesterProcess
    from mirror.actors.sim_llm import SimLLMServer, SimSettings
    from mirror.cognition.openai_client import LLMSettings

    asyncio.run(reset_stream(nats_url))
    with SimLLMServer(SimSettings(latency=latency)) as sim:
        ingester = IngesterProcess(nats_url, directory / "log.duckdb", shard=shard).start()
        try:
            yield RuntimeSettings(
                nats_url=nats_url, shard=shard,
                llm=LLMSettings(base_url=sim.base_url, model="mirror-sim", max_retries=1, backoff_initial_s=0.01),
                **overrides,  # type: ignore[arg-type]
            )
        finally:
            ingester.stop()


@contextlib.contextmanager
def gateway_stack(nats_url: str, directory: Path, *, shard: str, latency: str) -> Iterator[tuple[str, dict[str, str]]]:
    """Local Ray, a conversation runtime and the gateway on a free port, with tenants acme and
    globex; yields the gateway's URL and each tenant's token."""
    from mirror.actors.gateway import GatewayServer, GatewaySettings, create_app
    from mirror.actors.tenants import TenantRegistry

    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in ("acme", "globex")}
    with local_ray(), conversation_runtime(nats_url, directory, shard=shard, latency=latency) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))  # type: ignore[arg-type]
        with GatewayServer(app) as gateway:
            yield gateway.url, tokens


@contextlib.contextmanager
def local_ray() -> Iterator[None]:
    """A real local Ray cluster for one test module (2 CPUs, Mirror's namespace)."""
    import ray

    from mirror.actors.ray_actors import NAMESPACE

    ray.init(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
