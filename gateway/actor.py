"""Gateway processes: the gateway app served by uvicorn inside Ray actors, N of them on one port.

Each :class:`GatewayActor` is its own process with its own GIL, so HTTP parsing, routing and
the actor calls it makes never queue behind the caller's or the LLM's work. All of them listen
on the same address (SO_REUSEPORT) and the kernel spreads connections over them; on several
nodes, put any load balancer in front of one gateway per node. Calls to conversation actors go
straight from the gateway's event loop through cached actor handles — no proxy hop (measured
~1.8 ms p50 for uvicorn → actor here against ~7.5 ms through Ray Serve's proxy and replica).

Being Ray actors, the gateways get their settings as a constructor argument (no file holding an
API key), restart after a crash, and go away with the cluster. Ray restarts a crashed gateway's
process and runs its constructor again, but not ``start()``: whoever started the gateways asks
:func:`gateway_serving` and calls :func:`serve_again` (``mirror up``'s supervisor does, every
0.25 s), so a restarted gateway listens again.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import ray
import uvicorn
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mirror import metrics
from mirror.actors.directory import NAMESPACE
from mirror.actors.log_file import append_warnings_to
from mirror.actors.metrics_targets import metrics_target
from mirror.gateway.app import KEEP_ALIVE_S, GatewaySettings, create_app
from mirror.serving import bind_socket, reserve_port

GATEWAY_NAME = "gateway-{index}"


@ray.remote(max_restarts=-1, max_concurrency=10_000, num_cpus=0)  # type: ignore[call-overload]  # Ray's typed overloads omit actor options such as max_concurrency
class GatewayActor:
    """One gateway process: ``start()`` returns once it listens; ``stop()`` closes it."""

    def __init__(self, settings: GatewaySettings, host: str, port: int) -> None:
        append_warnings_to(settings.warnings_log or settings.runtime.warnings_log)  # a failed request's line reaches `mirror up` (or `node`)
        self.settings = settings
        self.host = host
        self.port = port
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    async def start(self) -> str:
        if self._task is None:
            self._socket = bind_socket(self.host, self.port, "mirror gateway", reuse_port=True)
            # Ray runs this actor's event loop; uvicorn serves on it (httptools parses HTTP when
            # installed). log_config=None keeps the worker's logging.
            config = uvicorn.Config(create_app(self.settings), log_config=None, log_level="warning",
                                    access_log=False, timeout_graceful_shutdown=1, timeout_keep_alive=KEEP_ALIVE_S)
            self._server = uvicorn.Server(config)
            self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
            while not self._server.started:
                if self._task.done():
                    self._task.result()  # raises what stopped it
                    raise RuntimeError("the gateway stopped before it started")
                await asyncio.sleep(0.01)
        return f"http://{self.host}:{self.port}"

    async def metrics_target(self) -> dict[str, Any] | None:
        """Where this process serves its own metrics (the shared port's ``/metrics`` is whichever answers)."""
        return metrics_target(metrics.serve(self.host), "gateway", ray.get_runtime_context().get_actor_name() or "")

    async def pid(self) -> int:
        return os.getpid()

    async def serving(self) -> tuple[bool, int]:
        """Whether this process serves HTTP (False in a process Ray restarted), and its pid."""
        return self._task is not None and not self._task.done(), os.getpid()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            await asyncio.wait_for(self._task, 10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._task = self._socket = None


def start_gateways(settings: GatewaySettings, *, host: str, port: int, count: int,
                   timeout_s: float = 60.0, name: str = "gateway") -> tuple[str, list[Any]]:
    """``count`` gateway actors listening on ``host:port``; returns the URL and their handles.

    They are named ``<name>-<index>`` (:data:`GATEWAY_NAME` by default): each machine's gateways
    need a name of their own, or one machine would be handed another's (``get_if_exists``).

    Port 0 is resolved here first (a free port), so every gateway binds the same one. The gateways
    run on the caller's node: they listen on its ``host`` and the URL returned is that node's, and
    in a cluster of several nodes a gateway that Ray restarted on another node would not listen.
    """
    # Port 0: the kernel's choice, held bound (SO_REUSEPORT, not listening) until the gateways
    # listen, so no outgoing connection is handed it in between.
    reservation = reserve_port(host, 0) if port == 0 else None
    try:
        if reservation is not None:
            port = reservation.getsockname()[1]
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        handles = [
            GatewayActor.options(name=f"{name}-{index}", namespace=NAMESPACE,  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
                                 get_if_exists=True, scheduling_strategy=here).remote(settings, host, port)
            for index in range(count)
        ]
        urls = ray.get([handle.start.remote() for handle in handles], timeout=timeout_s)
    finally:
        if reservation is not None:
            reservation.close()
    return urls[0], handles


def gateway_serving(handle: Any, timeout_s: float = 2.0) -> tuple[bool, int | None]:
    """(serving, pid) of one gateway; (False, None) when it does not answer within ``timeout_s``
    (its process is being restarted, or too busy to say: :func:`serve_again` is harmless then)."""
    try:
        serving, pid = ray.get(handle.serving.remote(), timeout=timeout_s)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
        return False, None
    return bool(serving), int(pid)


def serve_again(handle: Any, timeout_s: float = 60.0) -> str:
    """Make a gateway listen again (after Ray restarted its process); a serving one just says where."""
    return str(ray.get(handle.start.remote(), timeout=timeout_s))


def stop_gateways(handles: list[Any], timeout_s: float = 15.0) -> None:
    try:
        ray.get([handle.stop.remote() for handle in handles], timeout=timeout_s)
    finally:
        for handle in handles:
            ray.kill(handle)


__all__ = ["GATEWAY_NAME", "GatewayActor", "gateway_serving", "serve_again", "start_gateways", "stop_gateways"]
