"""Where Prometheus finds every process of a deployment: the ``http_sd`` list a gateway serves.

Each Ray actor that does Mirror's work (gateway processes, conversation hosts, ingesters) serves
its own metrics on a port of its own (:func:`mirror.metrics.serve`) and says where through its
``metrics_target()`` method. Ray's named actors are the registry: :func:`metrics_targets` asks
every named actor of the ``mirror`` namespace that has the method (a dedicated conversation's
actor, named ``tenant/conversation/branch``, is not asked: there may be thousands), so one scrape
config, ``http_sd_configs`` pointing at any gateway's ``/metrics/targets``, finds them all, on
every node, after every restart (a restarted process serves on a new port and says so).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .directory import NAMESPACE

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 2.0
"""How long one actor may take to say where it serves; one that is slower is left out this time."""


def metrics_target(address: str | None, component: str, name: str) -> dict[str, Any] | None:
    """One ``http_sd`` entry: the process's ``HOST:PORT`` and its labels (None: it serves none)."""
    if address is None:
        return None
    return {"targets": [address], "labels": {"component": component, "actor": name}}


def _named_actors() -> list[Any]:
    import ray

    handles = []
    for named in ray.util.list_named_actors(all_namespaces=True):
        if named["namespace"] != NAMESPACE or "/" in named["name"]:
            continue
        try:
            handle = ray.get_actor(named["name"], namespace=NAMESPACE)
        except ValueError:  # gone since it was listed
            continue
        if hasattr(handle, "metrics_target"):
            handles.append(handle)
    return handles


async def metrics_targets() -> list[dict[str, Any]]:
    """The ``http_sd`` list of every Mirror process serving metrics; empty without Ray."""
    import ray

    if not ray.is_initialized():
        return []
    handles = await asyncio.to_thread(_named_actors)

    async def ask(handle: Any) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(handle.metrics_target.remote(), ASK_TIMEOUT_S)
        except Exception as exc:  # restarting, or gone: Prometheus keeps the last list meanwhile
            log.debug("no metrics target from %r: %r", handle, exc)
            return None

    found = await asyncio.gather(*(ask(handle) for handle in handles))
    return sorted((target for target in found if target is not None), key=lambda target: target["targets"][0])


__all__ = ["ASK_TIMEOUT_S", "metrics_target", "metrics_targets"]
