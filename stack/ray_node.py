"""Whether this machine's Ray node is still in the cluster: ``mirror node`` ends when it is not.

Ray's head declares a node dead when its raylet stops answering the health checks (a machine
cut off the network, after ``RAY_health_check_*``; ~15 s when its processes died and connections
are refused) and never takes it back: that raylet exits, the actors on it die, and the actors a
driver on it owns are gone with "owner's node has crashed". The driver itself (``mirror node``)
would run on, its supervisor restarting gateways in a cluster that no longer has its node. So it
looks every ``every_s``, two ways:

- the cluster's control store (the GCS, on the head) about this node's id: not alive is final
  (Ray never takes a dead node id back); no answer (the head unreachable, this machine cut off)
  tells nothing, and the node serves on;
- the local raylet's port: a refused connection means the raylet is gone (declared dead and
  exited, or killed), known here before the head has noticed.

Lost, it calls ``on_lost`` once with the reason and stops looking; ``mirror node`` then stops and
exits with an error, so that a service manager runs ``ray start`` and ``mirror node`` again.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["NodeLook", "RayNodeWatch", "lost_reason"]


@dataclass(frozen=True)
class NodeLook:
    """One look at this machine's Ray node."""

    node_id: str
    raylet: str
    """``IP:PORT`` of this machine's raylet."""
    alive_in_cluster: bool | None
    """The GCS's answer: True alive, False dead or unknown to it, None no answer in time."""
    raylet_refused: bool
    """The raylet's port refused a connection (a timeout or another error is not a refusal)."""


def lost_reason(look: NodeLook) -> str | None:
    """Why the node is lost for good, or None while it is (or may still be) in the cluster.

    Only final answers count: a head that does not answer may answer again (a restart, a short
    partition), and then nothing was lost.
    """
    if look.alive_in_cluster is False:
        return (f"Ray's head no longer counts this machine's node {look.node_id[:12]} alive (it declared it dead: the "
                "machine was cut off longer than the head's health checks allow, or its raylet died)")
    if look.raylet_refused:
        return (f"this machine's raylet ({look.raylet}) is gone (its node was declared dead, or it was stopped or "
                "killed)")
    return None


class RayNodeWatch:
    """A daemon thread that looks at the Ray node of this process's driver (see the module docstring).

    Build it after ``ray.init``: it reads the node's id, the raylet's address and the GCS client
    of the connected driver.
    """

    def __init__(self, on_lost: Callable[[str], object], *, every_s: float = 1.0, call_timeout_s: float = 2.0) -> None:
        import ray

        worker: Any = ray._private.worker.global_worker
        self.on_lost = on_lost
        self.every_s = every_s
        self.call_timeout_s = call_timeout_s
        self.node_id = ray.get_runtime_context().get_node_id()
        self.raylet = (str(worker.node.node_ip_address), int(worker.node.node_manager_port))
        self._gcs = worker.gcs_client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def look(self) -> NodeLook:
        import ray

        try:
            alive: bool | None = bool(self._gcs.check_alive([ray.NodeID.from_hex(self.node_id)],
                                                            timeout=self.call_timeout_s)[0])
        except Exception:  # no answer from the head (timeout, connection): nothing to tell
            alive = None
        try:
            with socket.create_connection(self.raylet, timeout=self.call_timeout_s):
                refused = False
        except ConnectionRefusedError:
            refused = True
        except OSError:  # a timeout or an unreachable address is no answer, not a refusal
            refused = False
        host, port = self.raylet
        return NodeLook(self.node_id, f"{host}:{port}", alive, refused)

    def start(self) -> RayNodeWatch:
        self._thread = threading.Thread(target=self._run, name="mirror-ray-node", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.call_timeout_s * 2 + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            reason = lost_reason(self.look())
            if reason is not None and not self._stop.is_set():
                log.error("this machine's Ray node is lost: %s", reason)
                self.on_lost(reason)
                return
