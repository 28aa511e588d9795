"""Errors of the actor layer (the processes, servers and CLI that run Mirror).

    MirrorError                      (mirror.events.errors)
    └── ActorError
        ├── InvalidSimSetting        a `mirror sim-llm` setting that cannot be parsed (also a ValueError)
        ├── ConfigError              a config file that is missing, not TOML, or sets an unknown or ill-typed key (also a ValueError)
        ├── ServerUnavailable        the simulator or gateway HTTP server could not listen or come up
        ├── UnsatisfiableSchema      a response_format schema no instance can satisfy (also a ValueError)
        ├── LocalModelUnavailable    the offline llama.cpp model is missing or did not start
        ├── IngesterUnavailable      the ingester actor of a shard is not consuming and serving reads
        ├── Fenced                   a conversation lost the single-writer fence and stopped
        ├── Passivated               a conversation is passivating: ask its new incarnation
        ├── NoStackRunning           no `mirror up` stack for the data directory, and no --url
        ├── MissingToken             a --url without a token (also a ValueError)
        ├── GatewayUnavailable       the gateway cannot be reached
        └── GatewayRequestFailed     the gateway answered with an error status

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


class ConfigError(ActorError, ValueError):
    """The config file cannot be used; names the file and, where there is one, the key."""

    def __init__(self, path: object, key: str | None, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"config file {path}" + (f", key {key}" if key else "")
        super().__init__(f"{where}: {problem}")


class ServerUnavailable(ActorError):
    """An HTTP server of ours (simulator, gateway) could not listen or did not answer /healthz."""

    def __init__(self, name: str, url: str, reason: str, fix: str) -> None:
        self.name = name
        self.url = url
        self.reason = reason
        super().__init__(f"{name} at {url} is unavailable: {reason}; {fix}")


class UnsatisfiableSchema(ActorError, ValueError):
    """A response_format schema asks for something no instance can satisfy (or nests too deep)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"schema at {path or '/'} cannot be satisfied: {reason}; loosen the constraint")


class LocalModelUnavailable(ActorError):
    """The offline llama.cpp model is not installed or its server did not come up (see local_llm)."""


class IngesterUnavailable(ActorError):
    """The ingester actor of a shard did not start consuming and serving reads in time."""

    def __init__(self, shard: str, db_path: object, last_error: str) -> None:
        self.shard = shard
        self.db_path = db_path
        self.last_error = last_error
        super().__init__(f"the ingester of shard {shard!r} ({db_path}) is not serving: last error {last_error}; "
                         f"check that NATS is reachable and that no other process owns the file")

    def __reduce__(self) -> tuple[object, ...]:  # crosses Ray from the actor to its caller
        return type(self), (self.shard, self.db_path, self.last_error)


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


class NoStackRunning(ActorError):
    """No `mirror up` stack runs for the data directory and no --url was given."""

    def __init__(self, data_dir: object) -> None:
        self.data_dir = data_dir
        super().__init__(f"no Mirror stack is running for data dir {data_dir} (no live {data_dir}/stack.json); "
                         f"start one with `mirror up --data {data_dir}`, or pass --url and --token")


class MissingToken(ActorError, ValueError):
    """A gateway URL was given without a bearer token."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"--url {url} needs a bearer token: pass --token (or set MIRROR_TOKEN); "
                         f"`mirror tenants add TENANT` creates one")


class GatewayUnavailable(ActorError):
    """The gateway could not be reached."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach the Mirror gateway at {url}: {reason}; "
                         f"is `mirror up` running? (`mirror status` shows what runs)")


class GatewayRequestFailed(ActorError):
    """The gateway answered with an error status; the message says how to fix it."""

    _FIXES = {401: "check --token / MIRROR_TOKEN (a revoked or mistyped token?)",
              404: "check the conversation id (`mirror status` lists them)",
              409: "the conversation moved on elsewhere; send the turn again",
              503: "the event log is not answering; check the stack's ingester.log"}

    def __init__(self, method: str, path: str, status: int, detail: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.detail = detail
        fix = self._FIXES.get(status, "see the gateway's log")
        super().__init__(f"{method} {path} failed with HTTP {status}: {detail}; {fix}")
