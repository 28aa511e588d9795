"""The directory of live conversation actors: which are live on each Ray node, and whom to
passivate when a node holds more than its cap.

One detached named actor (``directory`` in the ``mirror`` namespace), got-or-created by every
conversation actor as it activates. May import ``ray`` and nothing else of Mirror's runtime.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

NAMESPACE = "mirror"
DIRECTORY_NAME = "directory"
TOUCH_EVERY_S = 1.0
"""How often a busy actor tells the directory it was used (its LRU position)."""


@ray.remote(max_restarts=-1, max_concurrency=1000)  # type: ignore[call-overload]  # ray's typed overloads know task options only; max_concurrency is an actor's
class Directory:
    """Which conversation actors are live on each Ray node, least recently used first.

    The cap ``max_live`` is per node: a Ray actor is a process, so what runs out is a node's
    memory and processes, not the cluster's. When a registration takes a node over the cap, the
    least recently used actors *of that node* are asked to passivate (fire and forget: they
    finish their thinking and snapshot first); other nodes are not touched.

    Invariant: every live name is in exactly one node's LRU (``node_of`` says which), so an
    actor restarted on another node moves rather than counting twice.
    """

    def __init__(self, max_live: int) -> None:
        self.max_live = max_live
        self.live: dict[str, OrderedDict[str, None]] = {}
        self.node_of: dict[str, str] = {}
        self.passivations = 0
        # Plain methods on an actor with max_concurrency > 1 run on a thread pool: one lock
        # keeps the LRUs and node_of in step.
        self._lock = threading.Lock()

    def register(self, name: str, node_id: str) -> list[str]:
        """Record ``name`` as live and most recently used on ``node_id``; returns whom it crowded out."""
        with self._lock:
            self._forget(name)
            node = self.live.setdefault(node_id, OrderedDict())
            node[name] = None
            self.node_of[name] = node_id
            victims = []
            while len(node) > self.max_live:
                victim, _ = node.popitem(last=False)
                del self.node_of[victim]
                victims.append(victim)
            self.passivations += len(victims)
        for victim in victims:  # outside the lock: each is a round trip to Ray's control store
            try:
                ray.get_actor(victim, namespace=NAMESPACE).passivate.remote()
            except ValueError:
                pass  # already gone
        return victims

    def touch(self, name: str) -> None:
        with self._lock:
            node_id = self.node_of.get(name)
            if node_id is not None:
                self.live[node_id].move_to_end(name)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._forget(name)

    def _forget(self, name: str) -> None:
        node_id = self.node_of.pop(name, None)
        if node_id is not None:
            self.live[node_id].pop(name, None)
            if not self.live[node_id]:
                del self.live[node_id]

    def live_on(self, node_id: str) -> list[str]:
        """The live actors of a node, least recently used first."""
        with self._lock:
            return list(self.live.get(node_id, ()))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"live": len(self.node_of), "max_live_per_node": self.max_live, "passivations": self.passivations,
                    "live_per_node": {node_id: len(names) for node_id, names in self.live.items()}}


def directory(max_live: int, *, node_id: str | None = None) -> Any:
    """The directory, created if there is none; ``node_id`` pins a new one to that node.

    A stack pins it beside itself (the node that lives as long as the stack): a directory that Ray
    restarted on another node after its node died would start empty, and count nobody against the cap.
    """
    placement = {} if node_id is None else {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}
    return Directory.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
        name=DIRECTORY_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", **placement,
    ).remote(max_live)


__all__ = ["DIRECTORY_NAME", "Directory", "NAMESPACE", "TOUCH_EVERY_S", "directory"]
