"""Options that more than one command group takes, each defined once.

An option defined here reads the same everywhere: flag, environment variable, default and help.
The config file finds them by flag name like any other option (``data``, ``nats_url``,
``log_level``, ``url``, ``token``, ``shard_map`` may also stand at the top of ``mirror.toml``: see
:mod:`.config_file`). Options that belong to one group only stay in that group's module.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mirror.events.ids import validate_identifier
from mirror.modes import Mode

if TYPE_CHECKING:
    from mirror.cli.gateway_client import GatewayClient

__all__ = [
    "ADVERTISE", "AFTER_SEQ", "BIND", "BRANCH", "CONVERSATION", "DATA_DIR", "GATEWAY_TOKEN", "GATEWAY_URL", "LLM_MODEL", "LOG_LEVEL", "LogLevel",
    "MODE", "Mode", "NATS_URL", "Placement", "QUIET_LOG_LEVEL", "SHARD_MAP", "SYNC_HELP", "TENANT", "gateway_client",
    "identifier", "sync_interval",
]


class LogLevel(enum.StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class Placement(enum.StrEnum):
    """Where live conversations run (mirror.actors.settings.PLACEMENTS, spelt out: importing actors costs every command Ray's import)."""

    hosted = "hosted"
    dedicated = "dedicated"


def identifier(kind: str) -> Callable[[Any], Any]:
    """The callback of every parameter that names a ``kind`` (conversation, branch, tenant, persona): each value
    (of a repeatable option, every one) passes :func:`mirror.events.ids.validate_identifier` while click reads
    the command line, so a bad one is refused before the command runs, and so before any request or connection.

    The refusal is the :class:`~mirror.events.errors.InvalidIdentifier` itself, not a usage error: ``main`` prints
    it as the one line a bad id gets everywhere (``mirror: error: invalid conversation 'a/b': …``, exit status 2),
    the same words the gateway answers with. ``None`` (an optional parameter not given) passes.
    """

    def check(value: str | list[str] | None) -> str | list[str] | None:
        for each in [value] if isinstance(value, str) else value or ():
            validate_identifier(kind, each)
        return value

    return check


CONVERSATION = typer.Argument(..., callback=identifier("conversation"), show_default=False)
"""A conversation id, required (the commands with a help text or a default of their own pass the same callback)."""
TENANT = typer.Argument(..., callback=identifier("tenant"), show_default=False)

DATA_DIR = typer.Option(Path("data"), "--data", envvar="MIRROR_DATA", help="Data directory of the embedded stack.")
NATS_URL = typer.Option(..., "--nats-url", envvar="MIRROR_NATS_URL", help="NATS server URL, e.g. nats://127.0.0.1:4222.")
"""Required: the command that has no other way to NATS (``ingest``). Those that can find NATS another
way (``bench ingest``, ``replay verify``, ``log``) define an optional --nats-url of their own."""
LOG_LEVEL = typer.Option(LogLevel.INFO, "--log-level", envvar="MIRROR_LOG_LEVEL", case_sensitive=False,
                         help="Log level, to stderr.")
QUIET_LOG_LEVEL = typer.Option(LogLevel.WARNING, "--log-level", envvar="MIRROR_LOG_LEVEL", case_sensitive=False,
                               help="Log level, to stderr.")
"""For commands whose output is the point (benchmarks, the demo): only warnings interleave with it."""
# Annotated ``Mode`` (the Literal of mirror.modes), an option with this default offers exactly the modes.
MODE = typer.Option("full", "--mode", envvar="MIRROR_MODE", metavar="MODE",
                    help="Thinking mode: baseline (the Talker alone), threads_only, controller_only, or full (both).")
LLM_MODEL = typer.Option("", "--model", envvar="MIRROR_LLM_MODEL", help="Model name for a URL endpoint.")
BRANCH = typer.Option("main", "--branch", callback=identifier("branch"))
SHARD_MAP = typer.Option(
    [], "--shard-map", help="SHARD=TENANT,TENANT: tenants whose log is that shard's (repeatable); "
                            "tenants listed nowhere are on shard 0. In mirror.toml: shard_map = [\"1=acme,globex\"].")
AFTER_SEQ = typer.Option(0, "--after", min=0, help="Only events with a greater seq.")
BIND = typer.Option("127.0.0.1", "--bind", envvar="MIRROR_BIND", metavar="ADDRESS",
                    help="IPv4 address the servers this command starts listen on (0.0.0.0: every interface).")
ADVERTISE = typer.Option(None, "--advertise", envvar="MIRROR_ADVERTISE", metavar="ADDRESS",
                         help="Address (or name) other machines reach this one at, put in the URLs it hands out; "
                              "default: --bind.", show_default=False)

SYNC_HELP = ("JetStream's sync_interval: 'always' fsyncs before every acknowledgement (an acknowledged turn survives "
             "a power failure); a duration such as 2m fsyncs that often: faster, but an OS crash or power failure "
             "loses up to that window of acknowledged writes (docs/operations.md, Durability).")


def sync_interval(value: str) -> str:
    """The callback of ``--nats-sync`` / ``--sync``: 'always' or a duration, else a usage error naming the value
    (the config file's check runs it too, so a bad ``nats_sync`` in mirror.toml is refused with its key)."""
    from mirror.events.errors import InvalidSyncInterval
    from mirror.events.nats.server import validate_sync_interval

    try:
        return validate_sync_interval(value)
    except InvalidSyncInterval as exc:
        raise typer.BadParameter(str(exc)) from None


# The client commands reach a stack only over HTTP: the one recorded in --data (by `mirror up`), or --url/--token.
GATEWAY_URL = typer.Option(None, "--url", envvar="MIRROR_URL",
                           help="Gateway URL; overrides the stack found in --data.")
GATEWAY_TOKEN = typer.Option(None, "--token", envvar="MIRROR_TOKEN",
                             help="Bearer token for --url (default: the token of the stack found in --data).")


def gateway_client(data: Path, url: str | None, token: str | None) -> GatewayClient:
    """The HTTP client of the stack that --data, --url and --token name (imported here: httpx and the stack cost)."""
    from mirror.cli.gateway_client import GatewayClient, find_stack

    return GatewayClient(find_stack(data, url, token))
