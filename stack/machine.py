"""What every machine of a Mirror deployment runs in the Ray cluster, shared by ``mirror up`` and ``mirror node``.

``mirror up`` (:mod:`.embedded`: the head, or the whole stack on one machine) and ``mirror node``
(:mod:`.node`: another machine) both join Ray as a driver (:func:`join_ray`), run the ingesters
of the shards whose DuckDB files are on this machine's disk (:func:`start_ingester`, pinned to
this node), serve the gateway on this machine (:func:`serve_gateways`, pinned to this node, its
URL the advertised address), record themselves in a JSON file in their data directory
(:func:`write_record`, :func:`live_record`), and hand the supervisor (:mod:`.supervisor`) how to
bring each part back (:func:`ingester_watch`, :func:`gateway_watch`).

Ray, the gateway and the ingester actor are imported inside the functions: the client commands
import :mod:`.embedded` (for ``running_stack``) without starting anything, and Ray costs ~0.5 s.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mirror.events.shards import DEFAULT_SHARD, ShardMap
from mirror.gateway.settings import GatewaySettings
from mirror.stack.errors import RayUnreachable, StackError
from mirror.stack.supervisor import Watched
from mirror.tracing import TraceSettings

log = logging.getLogger(__name__)

__all__ = [
    "NAME_WAIT_S", "RAY_AUTH_MODE", "ShardIngestedElsewhere", "enable_ray_token_auth", "gateway_watch",
    "ingester_log", "ingester_watch", "join_ray", "live_record", "log_file", "serve_gateways", "start_ingester",
    "write_record",
]

RAY_AUTH_MODE = "RAY_AUTH_MODE"
"""Ray's switch of token authentication (``token`` or ``disabled``), read from the environment."""
NAME_WAIT_S = 90.0
"""How long a shard's ingester waits for its name to be free: the previous one, on a machine that
died or a driver that was killed, keeps it until Ray has noticed (its health checks: ~15 s; a
killed driver's owned actors: at once)."""


class ShardIngestedElsewhere(StackError):
    """A shard's ingester already runs elsewhere: each shard has one, on the machine with its file."""

    def __init__(self, shard: str, pid: object) -> None:
        self.shard = shard
        self.pid = pid
        super().__init__(f"shard {shard!r}'s ingester already runs (Ray worker pid {pid}, maybe on another machine): "
                         "a shard's ingester runs on the one machine that holds its DuckDB file; give its --ingest "
                         "to that machine only")


def log_file(data_dir: Path, shard: str) -> Path:
    """The DuckDB file of a shard: ``mirror.duckdb`` for shard 0 (the single-log layout), else ``mirror-<shard>.duckdb``."""
    return Path(data_dir) / ("mirror.duckdb" if shard == DEFAULT_SHARD else f"mirror-{shard}.duckdb")


def ingester_log(data_dir: Path, shard: str) -> Path:
    """Where a shard's ingester logs: ``ingester.log`` for shard 0, else ``ingester-<shard>.log``."""
    return Path(data_dir) / ("ingester.log" if shard == DEFAULT_SHARD else f"ingester-{shard}.log")


def enable_ray_token_auth() -> None:
    """Token authentication for the local Ray head a stack starts, said explicitly.

    Ray 2.60 enables it for a new local cluster when ``RAY_AUTH_MODE`` is unset, and then warns
    "Token authentication is enabled for this Ray cluster…" on every start: a line about Ray's
    internals that a user of ``mirror up`` can do nothing with. Setting the mode to what Ray
    would choose anyway (before ``ray.init``; Ray's workers inherit it) keeps the protection and
    drops the warning. A mode the user set is left alone. Ray reads its config once at import,
    so it is read again here, as Ray itself does when it enables the mode.
    """
    if RAY_AUTH_MODE in os.environ:
        return
    from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's compiled module; ray._private.authentication calls it after setting the mode

    os.environ[RAY_AUTH_MODE] = "token"
    Config.initialize("")


def join_ray(address: str | None) -> str:
    """Connect this process to Ray as a driver in Mirror's namespace: the cluster at ``address``
    (``HOST:PORT`` of its head; this machine must run a raylet of it, ``ray start --address``),
    or a local head started here (None). Returns the cluster's address, for ``mirror node``."""
    import ray

    if address is None and not ray.is_initialized():
        enable_ray_token_auth()
    elif address is not None:
        _check_reachable(address)
    # "local", not None: None would join whatever cluster /tmp/ray/ray_current_cluster names
    # (the last `ray start --head` on this machine, perhaps long gone), not start one here.
    ray.init(address=address or "local", namespace="mirror", include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    return str(ray.get_runtime_context().gcs_address)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """:class:`RayUnreachable` at once if nothing accepts a connection at ``HOST:PORT`` (Ray's own
    connection attempts go on for minutes before they give up)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise RayUnreachable(address, str(exc) or type(exc).__name__) from None


def start_ingester(nats_url: str, data_dir: Path, shards: ShardMap, shard: str, *,
                   metrics: bool, traces: TraceSettings = TraceSettings(), name_wait_s: float = NAME_WAIT_S,
                   tenants_file: Path | None = None) -> Any:
    """Shard ``shard``'s ingester actor on this node, its file in ``data_dir``, serving once this returns;
    it enforces the retention policies of ``tenants_file`` (None: ``data_dir/tenants.json``).

    While the name ``ingester-<shard>`` is held by an actor that does not answer (the previous
    one of a machine or driver that died, until Ray has noticed) it tries again, up to
    ``name_wait_s``; held by one that answers, it is :class:`ShardIngestedElsewhere`.
    """
    from mirror.actors.ingester_actor import RayIngester
    from mirror.events.duckdb.ingester import IngesterSettings
    from mirror.events.duckdb.retention import RetentionSettings

    tenants = tenants_file if tenants_file is not None else Path(data_dir) / "tenants.json"
    ingester = RayIngester(nats_url, log_file(data_dir, shard), log_path=ingester_log(data_dir, shard),
                           settings=IngesterSettings(shard=shard, filter_subjects=shards.filter_subjects(shard),
                                                     skip_tenants=shards.skipped_tenants(shard), metrics=metrics,
                                                     traces=traces, retention=RetentionSettings(str(tenants))))
    deadline = time.monotonic() + name_wait_s
    said = False
    while True:
        try:
            return ingester.start()
        except ValueError as exc:  # Ray: "The name ingester-<shard> (namespace=mirror) is already taken"
            holder = _answering_pid(ingester.name)
            if holder is not None:
                raise ShardIngestedElsewhere(shard, holder) from exc
            if time.monotonic() > deadline:
                raise ShardIngestedElsewhere(shard, "unknown: it does not answer") from exc
            if not said:
                log.warning("%s is still held by a previous ingester that does not answer (its machine or driver "
                            "died and Ray has not noticed yet); waiting for Ray to free it", ingester.name)
                said = True
            time.sleep(0.5)


def _answering_pid(name: str) -> int | None:
    """The pid of the named ingester if it answers within 2 s, else None (gone, or restarting)."""
    import ray

    from mirror.actors.directory import NAMESPACE

    try:
        holder: Any = ray.get_actor(name, namespace=NAMESPACE)
        return int(ray.get(holder.pid.remote(), timeout=2))
    except (ValueError, ray.exceptions.RayError):
        return None


def ingester_watch(ingester: Any) -> Watched:
    """A shard's ingester as the supervisor sees it: Ray restarts its process when it dies; this
    makes it again when the actor itself is gone for good (killed, or given up by Ray)."""
    import ray

    from mirror.actors.directory import NAMESPACE

    def alive() -> bool:
        try:
            ray.get_actor(ingester.name, namespace=NAMESPACE)
        except ValueError:  # no actor by that name: gone for good
            return False
        except Exception:  # Ray's control store not answering: nothing to tell, nothing to do
            return True
        return True

    def restart() -> None:
        ingester.actor = None  # the old handle names a dead actor
        ingester.start()

    return Watched(ingester.name, alive, lambda: None, restart)


def serve_gateways(settings: GatewaySettings, *, bind: str, advertise: str, port: int, count: int,
                   name: str = "gateway") -> tuple[str, list[Any]]:
    """``count`` gateway actors on this node listening on ``bind:port`` (0: a free port), named
    ``<name>-<index>``; returns the URL others reach them at (``advertise``) and their handles."""
    from mirror.gateway.actor import start_gateways

    url, handles = start_gateways(settings, host=bind, port=port, count=count, name=name)
    return f"http://{advertise}:{urlsplit(url).port}", handles


def gateway_watch(index: int, handles: list[Any]) -> Watched:
    """Gateway ``handles[index]`` as the supervisor sees it: Ray restarts its process; this makes it
    listen again. The list is read at each look, so its owner may replace the gateways in it."""
    from mirror.gateway.actor import gateway_serving, serve_again

    last_pid: list[int | None] = [None]

    def alive() -> bool:
        serving, pid = gateway_serving(handles[index])
        last_pid[0] = pid or last_pid[0]
        return serving

    def restart() -> None:
        serve_again(handles[index])
        last_pid[0] = gateway_serving(handles[index])[1] or last_pid[0]

    return Watched(f"gateway {index}", alive, lambda: last_pid[0], restart)


def write_record(path: Path, info: dict[str, Any]) -> None:
    """Write what runs (URL, pids, token) where the other commands look, readable by its owner only."""
    path.write_text(json.dumps(info))
    os.chmod(path, 0o600)


def live_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path`` if the process that wrote it (its ``pid``) is alive, else None."""
    try:
        info: dict[str, Any] = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError, KeyError, PermissionError):
        return None
    return info
