"""Errors of the actor layer (the processes, servers and CLI that run Mirror).

    MirrorError                      (mirror.events.errors)
    └── ActorError
        ├── InvalidSimSetting        a `mirror sim-llm` setting that cannot be parsed (also a ValueError)
        ├── SimServerUnavailable     the simulated LLM server could not listen or did not come up
        ├── UnsatisfiableSchema      a response_format schema no instance can satisfy (also a ValueError)
        ├── LocalModelUnavailable    the offline llama.cpp model is missing or did not start
        ├── Fenced                   a conversation lost the single-writer fence and stopped
        └── Passivated               a conversation is passivating: ask its new incarnation

Every error names the setting or address it is about and says how to fix the problem.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError


class ActorError(MirrorError):
    """Something went wrong running Mirror's processes and servers."""


class InvalidSimSetting(ActorError, ValueError):
    """A simulator setting is malformed; a ValueError too, so the CLI reports it as one line."""

    def __init__(self, setting: str, value: object, expected: str) -> None:
        self.setting = setting
        self.value = value
        self.expected = expected
        super().__init__(f"invalid {setting} {value!r}: expected {expected}")


class SimServerUnavailable(ActorError):
    """The simulator's HTTP server could not listen, or did not answer /healthz in time."""

    def __init__(self, url: str, reason: str, fix: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"mirror sim-llm at {url} is unavailable: {reason}; {fix}")


class UnsatisfiableSchema(ActorError, ValueError):
    """A response_format schema asks for something no instance can satisfy (or nests too deep)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"schema at {path or '/'} cannot be satisfied: {reason}; loosen the constraint")


class LocalModelUnavailable(ActorError):
    """The offline llama.cpp model is not installed or its server did not come up (see local_llm)."""


class Fenced(ActorError):
    """This conversation lost the single-writer fence: another writer appended. It stops for
    good and a new one must reload the conversation; it never forks the sequence."""

    def __init__(self, key: object, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(f"conversation {key} is fenced off and stopped: {detail}; reload it to continue")


class Passivated(ActorError):
    """The conversation actor is passivating; get a fresh handle and ask again."""

    def __init__(self, key: object) -> None:
        self.key = key
        super().__init__(f"conversation {key} is passivating; ask again to re-activate it")
