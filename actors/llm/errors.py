"""Errors of the model servers Mirror starts itself: the simulator and the offline local model.

    MirrorError                      (mirror.events.errors)
    └── ActorError                   (mirror.actors.errors)
        ├── InvalidSimSetting        a `mirror sim-llm` setting that cannot be parsed (also a ValueError)
        ├── UnsatisfiableSchema      a response_format schema no instance can satisfy (also a ValueError)
        └── LocalModelUnavailable    the offline llama.cpp model is missing or did not start

A server that cannot listen raises :class:`mirror.actors.errors.ServerUnavailable`, shared with
the gateway. Every error names the setting it is about and says how to fix it.
"""

from __future__ import annotations

from mirror.actors.errors import ActorError

__all__ = ["InvalidSimSetting", "LocalModelUnavailable", "UnsatisfiableSchema"]


class InvalidSimSetting(ActorError, ValueError):
    """A simulator setting is malformed; a ValueError too, so the CLI reports it as one line."""

    def __init__(self, setting: str, value: object, expected: str) -> None:
        self.setting = setting
        self.value = value
        self.expected = expected
        super().__init__(f"invalid {setting} {value!r}: expected {expected}")


class UnsatisfiableSchema(ActorError, ValueError):
    """A response_format schema asks for something no instance can satisfy (or nests too deep)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"schema at {path or '/'} cannot be satisfied: {reason}; loosen the constraint")


class LocalModelUnavailable(ActorError):
    """The offline llama.cpp model is not installed or its server did not come up (see mirror.actors.llm.local)."""
