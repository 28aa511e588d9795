"""The head's settings, published in the Ray cluster for the ``mirror node`` of the other machines.

A node's gateway must hand conversations the *same* runtime settings as the head's, to the byte:
conversation hosts are named after a hash of them (:func:`~mirror.actors.placement.host.settings_tag`),
so a gateway whose settings differed in anything would make hosts of its own, and two hosts would
take turns at one conversation (the fence keeps its log whole, but every turn would move it).
So the settings are chosen once, by ``mirror up`` — the one place adapters are chosen — which
publishes its :class:`~mirror.gateway.settings.GatewaySettings` (the runtime's inside) as a small
actor, :data:`PUBLISHED_NAME`, on its node; ``mirror node`` reads them (:func:`head_settings`),
waiting while ``up`` starts. The actor belongs to ``up``'s driver: when ``up`` stops it is gone,
and a node started then waits for the next ``up``.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mirror.actors.directory import NAMESPACE
from mirror.gateway.settings import GatewaySettings
from mirror.stack.errors import HeadNotRunning

__all__ = ["PUBLISHED_NAME", "PublishedSettings", "head_settings", "publish_settings"]

PUBLISHED_NAME = "stack-settings"


@ray.remote(num_cpus=0, max_restarts=-1)
class PublishedSettings:
    """Holds the head's gateway settings and a few facts about the head (its URL, NATS, shards)."""

    def __init__(self, settings: GatewaySettings, head: dict[str, Any]) -> None:
        self.settings = settings
        self.head = head

    def get(self) -> tuple[GatewaySettings, dict[str, Any]]:
        return self.settings, self.head


def publish_settings(settings: GatewaySettings, head: dict[str, Any]) -> Any:
    """Publish the head's settings from this driver, on this node; returns the actor: hold it (Ray
    ends an actor once its owner holds no handle to it), kill it to withdraw them."""
    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    actor = PublishedSettings.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime
        name=PUBLISHED_NAME, namespace=NAMESPACE, scheduling_strategy=here,
    ).remote(settings, head)
    ray.get(actor.get.remote(), timeout=60)  # published once this returns
    return actor


def head_settings(ray_address: str, *, timeout_s: float = 120.0,
                  call_timeout_s: float = 10.0) -> tuple[GatewaySettings, dict[str, Any]]:
    """The settings ``mirror up`` published in the cluster this driver joined, waiting up to
    ``timeout_s`` for it (each ask at most ``call_timeout_s``); :class:`~mirror.stack.errors.HeadNotRunning`
    if none comes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            actor: Any = ray.get_actor(PUBLISHED_NAME, namespace=NAMESPACE)
            published: tuple[GatewaySettings, dict[str, Any]] = ray.get(actor.get.remote(), timeout=call_timeout_s)
            return published
        except (ValueError, ray.exceptions.RayError):
            if time.monotonic() > deadline:
                raise HeadNotRunning(ray_address, timeout_s) from None
            time.sleep(0.5)
