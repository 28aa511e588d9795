"""The config file: TOML read with ``tomllib`` and handed to the CLI as click's ``default_map``.

Typer (click underneath) looks a parameter up on the command line, then in its environment
variable, then in the context's ``default_map``, then takes its built-in default — so putting the
file there gives
``flag > environment > file > default`` without Mirror re-implementing any of it. Each command
reads the table named after it (``[up]``, ``[bench.turns]``, ``[log.read]``); a few shared keys
may stand at the top of the file and then apply to every command that has that option, unless
the command's own table sets it::

    data = "/srv/mirror"          # shared: every command with --data
    log_level = "INFO"
    shard_map = ["1=acme,globex"] # shared: which tenants' log is not shard 0's

    [up]
    llm = "sim"
    port = 8080
    max_live_actors = 64

Keys are the flags' names with ``_`` (``nats_port`` for ``--nats-port``; ``nats-port`` is read the
same; ``subject`` and ``subjects`` both set the repeatable ``--subject``). The file is
checked whole before any command runs: an unknown table or key, or a value of the wrong TOML
type or out of range, is a :class:`ConfigError` naming the file and the key. Paths in the file
are taken as written, relative to the working directory.
"""

from __future__ import annotations

import enum
import tomllib
import typing
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption

from mirror.cli.errors import ConfigError

DEFAULT_CONFIG_FILE = Path("mirror.toml")
SHARED_KEYS = frozenset({"data", "nats_url", "log_level", "llm", "model", "url", "token", "shard",
                         "shard_map"})
"""Top-level keys: they mean the same thing for every command that has them."""
COMMAND_LINE_ONLY = frozenset({"show_config"})
"""Options that ask for something once rather than configure: a file that set them would change what a command does."""


def find_config_file(given: Path | None) -> Path | None:
    """``--config`` / ``MIRROR_CONFIG`` if given (it must exist), else ``./mirror.toml`` if present."""
    if given is not None:
        if not given.is_file():
            raise ConfigError(given, None, "no such file")
        return given
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def load_default_map(path: Path, root: TyperGroup) -> dict[str, Any]:
    """The file as the ``default_map`` of the ``mirror`` group: checked against every command's options."""
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"not valid TOML ({exc})") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot be read ({exc.strerror})") from None
    shared = {}
    for key, value in document.items():
        if not isinstance(value, dict):
            if _normal(key) not in SHARED_KEYS:
                raise ConfigError(path, key, f"unknown top-level key; shared keys are {', '.join(sorted(SHARED_KEYS))}, "
                                             "everything else goes in a command's table such as [up]")
            shared[_normal(key)] = value
    for name, value in shared.items():  # a shared key must make sense for every command it reaches
        for command in _commands(root):
            if name in _options(command):
                _check(path, name, command, _options(command)[name], value)
    return _section(path, root, (), document, shared)


def _section(path: Path, group: TyperGroup, at: tuple[str, ...], table: dict[str, Any],
             shared: dict[str, Any]) -> dict[str, Any]:
    default_map: dict[str, Any] = {}
    for name, command in group.commands.items():
        own = table.get(name, {})
        where = ".".join((*at, name))
        if not isinstance(own, dict):
            raise ConfigError(path, where, "must be a table of that command's options")
        if isinstance(command, TyperGroup):
            default_map[name] = _section(path, command, (*at, name), own, shared)
            continue
        options = _options(command)
        values = {options[key].name: value for key, value in shared.items() if key in options}
        for key, value in own.items():
            option = options.get(_normal(key))
            if option is None:
                raise ConfigError(path, f"{where}.{key}", f"`mirror {' '.join((*at, name))}` has no such option "
                                                         f"(it has {_flag_names(command)})")
            _check(path, f"{where}.{key}", command, option, value)
            values[option.name] = value  # the default map is keyed by parameter name
        default_map[name] = values
    for key, value in table.items():
        if isinstance(value, dict) and key not in group.commands:
            raise ConfigError(path, ".".join((*at, key)), f"no such command `mirror {' '.join((*at, key))}`; "
                                                          "tables are named after commands, e.g. [up] or [bench.turns]")
        if at and not isinstance(value, dict):  # top-level scalars are the shared keys, checked above
            raise ConfigError(path, ".".join((*at, key)), f"`mirror {' '.join(at)}` has subcommands, not options")
    return default_map


def _commands(group: TyperGroup) -> list[Any]:
    found: list[Any] = []
    for command in group.commands.values():
        found.extend(_commands(command) if isinstance(command, TyperGroup) else [command])
    return found


def _options(command: Any) -> dict[str, TyperOption]:
    """The options a file may set, by flag name (``nats_port`` for ``--nats-port``, ``json`` for
    ``--json``) and by parameter name: not arguments (what to act on), not --help."""
    options: dict[str, TyperOption] = {}
    for param in command.params:
        if isinstance(param, TyperOption) and param.name and not param.is_eager and param.name not in COMMAND_LINE_ONLY:
            for flag in param.opts:
                if flag.startswith("--"):
                    options[_normal(flag[2:])] = param
            options.setdefault(param.name, param)
    return options


def _flag_names(command: Any) -> str:
    options = _options(command).values()
    return ", ".join(sorted({_normal(flag[2:]) for option in options for flag in option.opts if flag.startswith("--")}))


def _normal(key: str) -> str:
    return key.replace("-", "_")


def _toml_types(annotation: Any) -> tuple[tuple[type, ...], str]:
    """Which TOML values an option of this Python type takes: no 1.5 for an integer, no true for a port."""
    if annotation is bool:
        return (bool,), "true or false"
    if annotation is int:
        return (int,), "an integer"
    if annotation is float:
        return (int, float), "a number"
    if isinstance(annotation, type) and issubclass(annotation, (str, Path, enum.Enum)):
        return (str,), "a string"
    if typing.get_origin(annotation) is typing.Literal and all(isinstance(arg, str) for arg in typing.get_args(annotation)):
        return (str,), "a string"  # a choice of words (the thinking mode: mirror.modes.Mode)
    raise TypeError(f"no TOML mapping for option type {annotation!r}")  # a new option type: extend this


def _check(path: Path, where: str, command: Any, option: TyperOption, value: Any) -> None:
    """The TOML type must be the option's, and the value must pass the option's own checks."""
    annotation = option.type_descriptor.annotation
    if typing.get_origin(annotation) is list:
        if not isinstance(value, list):
            raise ConfigError(path, where, f"must be a list (the option is repeatable), not {value!r}")
        (annotation,) = typing.get_args(annotation)
        items = value
    else:
        items = [value]
    accepted, words = _toml_types(annotation)
    for item in items:
        if not isinstance(item, accepted) or (isinstance(item, bool) and bool not in accepted):
            raise ConfigError(path, where, f"must be {words}, not {item!r}")
    try:
        option.process_value(typer.Context(command), value)  # ranges (min=, max=) and choices
    except typer.BadParameter as exc:
        raise ConfigError(path, where, exc.message) from None


__all__ = [
    "COMMAND_LINE_ONLY", "DEFAULT_CONFIG_FILE", "SHARED_KEYS", "find_config_file",
    "load_default_map",
]
