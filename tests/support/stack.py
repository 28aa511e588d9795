"""What the tests share besides fixtures: a clean stream, a conversation runtime, a gateway
stack and a local Ray cluster, all real processes on loopback ports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import nats.js.errors

from mirror.events.duckdb.ingester import Ingester, IngesterSettings
from mirror.events.duckdb.log import DuckDBEventLog
from mirror.events.nats.jetstream import StreamSettings, connect_nats

if TYPE_CHECKING:
    from mirror.actors.handle import ConversationHandle
    from mirror.actors.settings import RuntimeSettings
    from mirror.events.nats.infrastructure import NatsInfrastructure


T = TypeVar("T")

REFLECTION = False
"""Reflection in the stacks the tests start: off unless a test asks. It is on by default for users
(``mirror up``, ``StackSettings``, ``RuntimeSettings``) and costs an insight call after every turn
and more when a reflection is due, which a test whose subject is not reflection pays in CPU alone.
The default of :func:`conversation_runtime`, :func:`gateway_stack` and
``tests.support.up.start_up``; tests that build ``RuntimeSettings`` or ``StackSettings`` themselves
pass it too. Reflection's own tests pass ``reflection=True`` (tests/README.md lists them)."""


async def reset_stream(url: str, settings: StreamSettings = StreamSettings()) -> None:
    """Drop the event stream so a test starts from an empty broker (consumers go with it)."""
    nc = await connect_nats(url, name="mirror-test-reset")
    try:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_stream(settings.name)
    finally:
        await nc.close()


@contextlib.asynccontextmanager
async def ingesting(url: str, db_path: Path, settings: IngesterSettings, name: str = "test-ingester") -> AsyncIterator[Ingester]:
    """An ingester from the broker at ``url`` into the DuckDB file ``db_path``, for the block."""
    nc = await connect_nats(url, name=name)
    event_log = DuckDBEventLog(db_path)
    ingester = Ingester(nc, event_log, settings)
    await ingester.start()
    try:
        yield ingester
    finally:
        await ingester.stop()
        await event_log.close()
        await nc.close()


def nats_of(runtime: RuntimeSettings) -> NatsInfrastructure:
    """The NATS infrastructure of settings a test built with one (its URL, its default shard)."""
    from mirror.events.nats.infrastructure import NatsInfrastructure

    infrastructure = runtime.infrastructure
    assert isinstance(infrastructure, NatsInfrastructure), f"{infrastructure!r} is not NATS"
    return infrastructure


def run(coroutine):
    """Run a coroutine from synchronous test code (stateful machines, process tests)."""
    return asyncio.run(coroutine)


def shard_log(directory: Path, shard: str, default: str) -> Path:
    """The DuckDB file of a shard in a test directory: ``log.duckdb`` for the default shard."""
    return directory / ("log.duckdb" if shard == default else f"log-{shard}.duckdb")


@contextlib.contextmanager
def conversation_runtime(nats_url: str, directory: Path, *, shard: str, latency: str = "fixed:0",
                         shard_map: tuple[str, ...] = (), reflection: bool = REFLECTION,
                         token_delay_ms: float = 0.0, ingest_linger_ms: float | None = None,
                         **overrides: Any) -> Iterator[RuntimeSettings]:
    """What a live conversation needs: an empty stream, an ingester process per shard, the simulator.

    ``shard`` is the default shard; ``shard_map`` (``SHARD=TENANT,TENANT`` entries, as ``mirror
    ingest --shard-map`` takes them, so the default shard is then ``0``) adds more, each with its
    own file (:func:`shard_log`); ``token_delay_ms``: the simulator's, between streamed tokens;
    ``ingest_linger_ms``: the ingesters' ``--linger-ms`` (a long one keeps the log behind the stream). ``reflection`` is off unless the test asks (:data:`REFLECTION`);
    ``overrides``: the other RuntimeSettings fields. Yields the ``RuntimeSettings`` for it;
    everything is stopped afterwards.
    """
    from mirror.actors.settings import RuntimeSettings
    from mirror.cognition.openai_client import LLMSettings
    from mirror.events.nats.infrastructure import NatsInfrastructure
    from mirror.events.shards import ShardMap
    from mirror.sim.server import SimLLMServer, SimSettings
    from mirror.stack.processes import IngesterProcess

    if shard_map and shard != "0":
        raise ValueError(f"with a shard map the default shard is '0' (as for `mirror ingest`), not {shard!r}")
    shards = ShardMap.parse(shard_map, default=shard)
    asyncio.run(reset_stream(nats_url))
    with SimLLMServer(SimSettings(latency=latency, token_delay_ms=token_delay_ms)) as sim, contextlib.ExitStack() as ingesters:
        for name in shards.shards:
            ingester = IngesterProcess(nats_url, shard_log(directory, name, shard), shard=name, shard_map=shard_map,
                                       linger_ms=ingest_linger_ms)
            ingesters.callback(ingester.stop)
            ingester.start()
        yield RuntimeSettings(infrastructure=NatsInfrastructure(nats_url, shard=shard, shard_map=shards.assignments),
            llm=LLMSettings(base_url=sim.base_url, model="mirror-sim", max_retries=1, backoff_initial_s=0.01),
            reflection=reflection, **overrides,
        )


@contextlib.contextmanager
def gateway_stack(nats_url: str, directory: Path, *, shard: str, latency: str, placement: str = "hosted",
                  shard_map: tuple[str, ...] = (), reflection: bool = REFLECTION, token_delay_ms: float = 0.0,
                  ingest_linger_ms: float | None = None, **gateway: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A conversation runtime and the gateway on a free port, with tenants acme and globex, on
    the Ray cluster the caller started (fixture ``ray_cluster``); yields the gateway's URL and
    each tenant's token. ``ingest_linger_ms``: see :func:`conversation_runtime`; ``gateway``: GatewaySettings fields; ``reflection``: the stack's default,
    off unless the test asks (:data:`REFLECTION`)."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in ("acme", "globex")}
    with conversation_runtime(nats_url, directory, shard=shard, latency=latency, placement=placement, shard_map=shard_map,
                              reflection=reflection, token_delay_ms=token_delay_ms,
                              ingest_linger_ms=ingest_linger_ms) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json"), **gateway))
        with GatewayServer(app) as server:
            yield server.url, tokens


PLACEMENTS = ("hosted", "dedicated")
"""Both placements of a live conversation: the runtime tests run on each (``@pytest.fixture(params=PLACEMENTS)``)."""


def let_go(handle: ConversationHandle) -> None:
    """End a test's conversation: a dedicated actor is killed for good; a hosted one is
    passivated, since killing its host would take its neighbours with it."""
    import ray

    from mirror.actors.placement import DedicatedConversation

    if isinstance(handle, DedicatedConversation):
        ray.kill(handle.actor, no_restart=True)
    else:
        asyncio.run(handle.passivate())


def retried(call: Callable[[], Awaitable[T]], *, retry_for_s: float = 30.0) -> T:
    """``call()`` from synchronous test code, asked again while its actor is restarting after a
    crash (Ray's ``ActorUnavailableError``); after ``retry_for_s`` the last error is raised."""
    import ray
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    for attempt in Retrying(retry=retry_if_exception_type(ray.exceptions.ActorUnavailableError),
                            stop=stop_after_delay(retry_for_s), wait=wait_fixed(0.1), reraise=True):
        with attempt:
            return asyncio.run(_awaited(call))
    raise AssertionError("unreachable: tenacity returns or raises")


async def _awaited(call: Callable[[], Awaitable[T]]) -> T:
    return await call()


def start_ray() -> None:
    """Start the local Ray cluster the tests share (2 CPUs, Mirror's namespace), unless one runs."""
    import ray

    from mirror.actors.conversation_actor import NAMESPACE

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, namespace=NAMESPACE, include_dashboard=False,  # never another's cluster
                 log_to_driver=False)


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def clear_named_actors() -> None:
    """Kill every named actor of Mirror's namespace: the directory, conversation and ingester
    actors are detached singletons found by name, so a module must not meet another's."""
    import ray

    for name in ray.util.list_named_actors():
        with contextlib.suppress(ValueError):  # gone already
            ray.kill(ray.get_actor(name), no_restart=True)


@contextlib.contextmanager
def local_ray() -> Iterator[None]:
    """A private local Ray cluster for a module that needs a fresh one (it replaces the shared
    one, which the next module that asks for it starts again)."""
    stop_ray()
    start_ray()
    try:
        yield
    finally:
        stop_ray()
