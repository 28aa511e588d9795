"""Errors of the embedded stack: the processes ``mirror up`` starts and watches.

    MirrorError                      (mirror.events.errors)
    └── StackError
        ├── InvalidSettings          settings that cannot work (an address, a URL, options that conflict); also a ValueError
        ├── HeadNotRunning           `mirror node` found no `mirror up` in the Ray cluster it joined
        ├── RayUnreachable           nothing answers at --ray-address
        ├── NodeLost                 the Ray node `mirror node` runs on left the cluster: it exits
        ├── LocalModelUnavailable    the offline llama.cpp model is missing or did not start
        └── ModelServerUnavailable   the model server at --llm failed the start's check (with --strict)

The ingester's own failure to start is :class:`mirror.actors.errors.IngesterUnavailable` (the
runtime raises it); a server that cannot listen is :class:`mirror.serving.ServerUnavailable`, a
port that another process serves :class:`mirror.serving.PortInUse`.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["HeadNotRunning", "InvalidSettings", "NodeLost", "RayUnreachable", "LocalModelUnavailable", "ModelServerUnavailable", "StackError"]


class StackError(MirrorError):
    """A part of the embedded stack could not be started or stopped."""


class InvalidSettings(StackError, ValueError):
    """Settings refused before anything starts: ``setting`` names the option, ``problem`` what is wrong and how to fix it."""

    def __init__(self, setting: str, problem: str) -> None:
        self.setting = setting
        self.problem = problem
        super().__init__(f"{setting}: {problem}")


class HeadNotRunning(StackError):
    """``mirror node`` joined a Ray cluster in which no ``mirror up`` has published its settings."""

    def __init__(self, ray_address: str, waited_s: float) -> None:
        self.ray_address = ray_address
        self.waited_s = waited_s
        super().__init__(f"no `mirror up` runs in the Ray cluster at {ray_address} (waited {waited_s:.0f} s for its "
                         f"settings): start `mirror up --ray-address {ray_address}` on the head first, or correct "
                         f"--ray-address")


class RayUnreachable(StackError):
    """Nothing accepts a connection at the Ray address to join (Ray itself would keep trying for minutes)."""

    def __init__(self, ray_address: str, reason: str) -> None:
        self.ray_address = ray_address
        self.reason = reason
        super().__init__(f"cannot reach Ray at {ray_address} ({reason}): is `ray start --head --port` running "
                         "there, and does this machine reach that port?")


class NodeLost(StackError):
    """The Ray node ``mirror node`` runs on is no longer in the cluster (:mod:`mirror.stack.ray_node`):
    its actors died with it, and Ray never takes a dead node back."""

    def __init__(self, ray_address: str, reason: str) -> None:
        self.ray_address = ray_address
        self.reason = reason
        super().__init__(f"this machine's Ray node is lost: {reason}; run `ray start --address {ray_address}` here "
                         f"again, then `mirror node` (a service manager does both: docs/operations.md, "
                         f"\"Several machines\")")


class LocalModelUnavailable(StackError):
    """The offline llama.cpp model is not installed or its server did not come up (see mirror.stack.local_model)."""


class ModelServerUnavailable(StackError):
    """The model server at ``--llm`` failed the check a stack makes when it starts (:mod:`mirror.stack.model_check`)."""

    def __init__(self, base_url: str, problem: str) -> None:
        self.base_url = base_url
        self.problem = problem
        super().__init__(f"the model server at {base_url} {problem}; start it or correct --llm "
                         f"(without --strict, mirror up starts anyway and warns)")
