"""Errors of the model simulator (``mirror sim-llm``).

    MirrorError                      (mirror.events.errors)
    └── SimError
        ├── InvalidSimSetting        a `mirror sim-llm` setting that cannot be parsed (also a ValueError)
        └── UnsatisfiableSchema      a response_format schema no instance can satisfy (also a ValueError)

A server that cannot listen raises :class:`mirror.serving.ServerUnavailable`, shared with the
gateway. Every error names the setting it is about and says how to fix it.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["InvalidSimSetting", "SimError", "UnsatisfiableSchema"]


class SimError(MirrorError):
    """Something the simulator was asked cannot be done."""


class InvalidSimSetting(SimError, ValueError):
    """A simulator setting is malformed; a ValueError too, so the CLI reports it as one line."""

    def __init__(self, setting: str, value: object, expected: str) -> None:
        self.setting = setting
        self.value = value
        self.expected = expected
        super().__init__(f"invalid {setting} {value!r}: expected {expected}")


class UnsatisfiableSchema(SimError, ValueError):
    """A response_format schema asks for something no instance can satisfy (or nests too deep)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"schema at {path or '/'} cannot be satisfied: {reason}; loosen the constraint")
