"""The directory of live conversation actors on a real local Ray: one LRU and one cap per node."""

from __future__ import annotations

import time

import ray

from mirror.actors.directory import NAMESPACE, Directory


@ray.remote(num_cpus=0)
class Probe:
    """Stands where a conversation actor would: records that it was asked to passivate."""

    def __init__(self) -> None:
        self.passivated = False

    def passivate(self) -> None:
        self.passivated = True

    def was_passivated(self) -> bool:
        return self.passivated


def test_each_node_keeps_its_own_least_recently_used_under_the_cap(ray_cluster: None) -> None:
    names = ["a1", "a2", "a3", "b1", "b2", "b3"]
    probes = {name: Probe.options(name=f"probe-{name}", namespace=NAMESPACE).remote() for name in names}  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
    directory = Directory.options(name="directory-per-node-test", namespace=NAMESPACE).remote(2)  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type

    def register(name: str, node: str) -> list[str]:
        return [victim.removeprefix("probe-") for victim in ray.get(directory.register.remote(f"probe-{name}", node))]

    assert register("a1", "node-a") == [] and register("a2", "node-a") == []
    assert register("b1", "node-b") == [] and register("b2", "node-b") == []
    assert register("b3", "node-b") == ["b1"]  # node b is over its cap; node a is not touched
    ray.get(directory.touch.remote("probe-a1"))
    assert register("a3", "node-a") == ["a2"]  # a1 was used more recently than a2
    assert ray.get(directory.live_on.remote("node-a")) == ["probe-a1", "probe-a3"]
    assert ray.get(directory.live_on.remote("node-b")) == ["probe-b2", "probe-b3"]

    # Restarted on another node, an actor moves: it counts once, on the node it now runs on.
    assert register("b2", "node-a") == ["a1"]
    assert ray.get(directory.live_on.remote("node-b")) == ["probe-b3"]
    ray.get(directory.unregister.remote("probe-b3"))
    stats = ray.get(directory.stats.remote())
    assert stats == {"live": 2, "max_live_per_node": 2, "passivations": 3, "live_per_node": {"node-a": 2}}

    # The directory asks fire and forget: wait for the asked ones, then nobody else may have been asked.
    deadline = time.monotonic() + 30
    while True:
        passivated = {name: ray.get(probe.was_passivated.remote()) for name, probe in probes.items()}
        if all(passivated[name] for name in ("a1", "a2", "b1")) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert passivated == {"a1": True, "a2": True, "a3": False, "b1": True, "b2": False, "b3": False}
    for probe in probes.values():
        ray.kill(probe)
    ray.kill(directory)
