"""Errors of the ``mirror`` command line: its config file and its client of the HTTP gateway.

    MirrorError                      (mirror.events.errors)
    └── CLIError
        ├── ConfigError              a config file that is missing, not TOML, or sets an unknown or ill-typed key (also a ValueError)
        ├── NoStackRunning           no `mirror up` stack for the data directory, and no --url (or --nats-url)
        ├── MissingToken             a --url without a token (also a ValueError)
        ├── GatewayUnavailable       the gateway cannot be reached
        ├── GatewayRequestFailed     the gateway answered with an error status
        ├── ReplyCut                 a streamed turn failed after its reply began (an ``error`` event)
        └── PromptFilesExist         `prompts export` would overwrite templates (without --force)

(A prompt directory that cannot be read is the cognition layer's ``PromptSetError``.)
``mirror``'s entry point prints any of them as one line on stderr (exit status 2), so each
message names the file, key or address it is about and says how to fix the problem.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["CLIError", "ConfigError", "GatewayRequestFailed", "UNKNOWN_CONVERSATION", "GatewayUnavailable", "MissingToken", "NoStackRunning",
           "PromptFilesExist", "ReplyCut"]


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

    def __init__(self, data_dir: object, instead: str = "pass --url and --token") -> None:
        self.data_dir = data_dir
        super().__init__(f"no Mirror stack is running for data dir {data_dir} (no live {data_dir}/stack.json); "
                         f"start one with `mirror up --data {data_dir}`, or {instead}")


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


UNKNOWN_CONVERSATION = "no conversation "
"""How the gateway's 404 for a conversation without events begins (``GatewayRuntime.existing``)."""


class GatewayRequestFailed(CLIError):
    """The gateway answered with an error status; the message is its detail, and a fix where one is known.

    The gateway's detail says what was wrong (a seq past the end, an empty message, an unknown
    template, a fenced conversation, a model or log that does not answer), so it stands alone.
    A fix is added only where the gateway cannot know it: a bad token (401: where the token
    comes from), an unknown conversation (404 "no conversation …": where the ids are listed) and
    an unhandled server error (500, a bare "Internal Server Error": the cause is in the log).
    """

    def __init__(self, method: str, path: str, status: int, detail: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.detail = detail
        super().__init__(f"{method} {path} failed with HTTP {status}: {detail}" + "".join(f"; {fix}" for fix in self.fixes()))

    def fixes(self) -> list[str]:
        if self.status == 401:
            return ["check --token / MIRROR_TOKEN (a revoked or mistyped token?)"]
        if self.status == 404 and self.detail.startswith(UNKNOWN_CONVERSATION):
            return ["check the conversation id (`mirror status` lists them)"]
        if self.status == 500:
            return ["see the gateway's log"]
        return []


class ReplyCut(CLIError):
    """A streamed turn ended with an ``error`` event: the reply had begun, then the turn failed.

    The gateway answers a failure before the first piece with its HTTP status
    (:class:`GatewayRequestFailed`); after it, the response has begun, so the failure comes as an
    event. The log then holds the whole turn or none of it: the pieces shown may not be logged.
    """

    def __init__(self, path: str, error: str, detail: str) -> None:
        self.path = path
        self.error = error
        self.detail = detail
        super().__init__(f"POST {path}: the reply was cut off ({error}: {detail}); what was shown of it may not be "
                         f"logged (`/events` or `mirror events tail` shows what the log holds)")


class PromptFilesExist(CLIError):
    """``mirror prompts export`` would overwrite templates already in the directory."""

    def __init__(self, directory: object, names: list[str]) -> None:
        self.directory = directory
        self.names = names
        super().__init__(f"{directory} already holds {', '.join(names)}; pass --force to overwrite "
                         f"{'it' if len(names) == 1 else 'them'}, or export into another directory")
