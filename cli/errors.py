"""Errors of the ``mirror`` command line: its config file and its client of the HTTP gateway.

    MirrorError                      (mirror.events.errors)
    └── CLIError
        ├── ConfigError              a config file that is missing, not TOML, or sets an unknown or ill-typed key (also a ValueError)
        ├── NoStackRunning           no `mirror up` stack for the data directory, and no --url
        ├── MissingToken             a --url without a token (also a ValueError)
        ├── GatewayUnavailable       the gateway cannot be reached
        └── GatewayRequestFailed     the gateway answered with an error status

``mirror``'s entry point prints any of them as one line on stderr (exit status 2), so each
message names the file, key or address it is about and says how to fix the problem.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["CLIError", "ConfigError", "GatewayRequestFailed", "GatewayUnavailable", "MissingToken", "NoStackRunning"]


class CLIError(MirrorError):
    """Something the command line was given or asked cannot be done."""


class ConfigError(CLIError, ValueError):
    """The config file cannot be used; names the file and, where there is one, the key."""

    def __init__(self, path: object, key: str | None, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = f"config file {path}" + (f", key {key}" if key else "")
        super().__init__(f"{where}: {problem}")


class NoStackRunning(CLIError):
    """No `mirror up` stack runs for the data directory and no --url was given."""

    def __init__(self, data_dir: object) -> None:
        self.data_dir = data_dir
        super().__init__(f"no Mirror stack is running for data dir {data_dir} (no live {data_dir}/stack.json); "
                         f"start one with `mirror up --data {data_dir}`, or pass --url and --token")


class MissingToken(CLIError, ValueError):
    """A gateway URL was given without a bearer token."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(f"--url {url} needs a bearer token: pass --token (or set MIRROR_TOKEN); "
                         f"`mirror tenants add TENANT` creates one")


class GatewayUnavailable(CLIError):
    """The gateway could not be reached."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach the Mirror gateway at {url}: {reason}; "
                         f"is `mirror up` running? (`mirror status` shows what runs)")


class GatewayRequestFailed(CLIError):
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
