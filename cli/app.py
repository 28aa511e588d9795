"""The `mirror` command line (Typer: typed options, env-var fallbacks, generated --help).

This module is the table of contents: the root app, its ``--config`` callback, and every
command and group registered in the order ``mirror --help`` lists them. The commands live one
module per group (:mod:`.serve`, :mod:`.client`, :mod:`.replay`, :mod:`.tenants`,
:mod:`.bench`, :mod:`.log`, :mod:`.evals`, :mod:`.memory`, :mod:`.reflection`, :mod:`.prompts`, :mod:`.persona`, :mod:`.chaos`, :mod:`.forget`); the options they share are defined once in :mod:`.options`.

Commands import what they run inside their bodies, not at the top of their modules: importing
the stack, Ray and the pipelines up front would make every command, ``mirror --help`` included,
take ~0.8 s instead of ~0.2 s (measured with ``time mirror --help``, November 2026). At the top
of the command modules are only the standard library, rich's console and tables (the help loads
rich anyway) and Mirror's own light modules (ids, errors, the config file, the nats-server launcher):
~15 ms together under ``-X importtime``, lost in the noise of ``time mirror --help``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer
import typer.main

try:  # Typer ≥ 0.2x runs on its own copy of click (typer._click); older ones on click itself
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - depends on the installed Typer
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment]

from mirror.cli import (
    bench,
    chaos,
    client,
    evals,
    forget,
    help_layout,
    lifecycle,
    log,
    memory,
    persona,
    prompts,
    reflection,
    replay,
    serve,
    tenants,
    top,
)
from mirror.cli.config_file import find_config_file, load_default_map
from mirror.events.errors import MirrorError

__all__ = ["app", "command_path", "main", "one_line"]

app = typer.Typer(
    help="Mirror: an event-sourced runtime for LLM conversations that think between turns.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",  # docstrings are wrapped paragraphs: markdown joins their lines
)

app.command()(serve.ingest)
app.command()(serve.nats)
app.command()(serve.up)
app.command()(serve.node)
app.command("sim-llm")(serve.sim_llm)
app.command()(client.demo)
app.command()(client.chat)
app.command()(client.status)
app.command()(top.top)
app.command("recompute")(replay.recompute)
app.command()(reflection.portrait)
app.command()(reflection.reflections)
app.command()(reflection.reflect)
app.command()(forget.forget)
app.command("export")(lifecycle.export)
app.command("import")(lifecycle.import_)
app.command()(chaos.chaos)
app.add_typer(tenants.tenants_app, name="tenants")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(log.log_app, name="log")
app.add_typer(client.events_app, name="events")
app.add_typer(replay.replay_app, name="replay")
app.add_typer(evals.eval_app, name="eval")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(prompts.prompts_app, name="prompts")
app.add_typer(persona.persona_app, name="persona")


@app.callback()
def root(
    ctx: typer.Context,
    config: Path = typer.Option(
        None, "--config", envvar="MIRROR_CONFIG", show_default="./mirror.toml if present", dir_okay=False,
        help="TOML file of defaults, one table per command (\\[up], \\[bench.turns]); flags and environment variables win over it.",
    ),
) -> None:
    """Read the config file before any command runs, so a bad one changes nothing."""
    found = find_config_file(config)
    if found is not None:
        ctx.default_map = load_default_map(found, ctx.command)  # type: ignore[arg-type]  # a Typer app's root command is a TyperGroup; click types it Command


def main() -> None:
    """Entry point: every error is one line on stderr, not a traceback and not a box.

    A Mirror error (or a ValueError from a setting) and a usage error (an unknown option, a
    missing argument, a value click refuses) are ``mirror: error: …`` and exit status 2; a usage
    error keeps click's message (which names the option, with its "Possible options" hint) and
    ends with the command's ``--help``. Click runs with ``standalone_mode=False`` so that its
    errors reach this function instead of Typer's boxed rendering.
    """
    if len(sys.argv) == 1 or "--help" in sys.argv[1:]:  # help is drawn (only then: Typer's rich help costs ~0.1 s)
        help_layout.install()  # options panels that fit 80 columns, which Typer's do not
    try:
        result = app(prog_name="mirror", standalone_mode=False)
    except UsageError as exc:
        _usage_error(exc)
    except ClickException as exc:  # e.g. a file click could not open
        typer.echo(f"mirror: error: {one_line(exc.format_message())}", err=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:  # end of input at a prompt
        typer.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except (MirrorError, ValueError) as exc:
        typer.echo(f"mirror: error: {one_line(str(exc))}", err=True)
        raise SystemExit(2) from None
    # Without standalone mode click returns typer.Exit's code (Ctrl-C is 130) or the command's
    # return value (None: the commands return nothing).
    if isinstance(result, int) and result:
        raise SystemExit(result)


def _usage_error(exc: UsageError) -> NoReturn:
    if type(exc).__name__ == "NoArgsIsHelpError":  # `mirror` or a group alone: the help was printed
        raise SystemExit(exc.exit_code)
    message = one_line(exc.format_message()).rstrip(".")
    ctx = exc.ctx
    if ctx is not None and ctx.command.get_help_option(ctx) is not None:
        message += f"; see `{ctx.command_path} {ctx.help_option_names[0]}`"
    elif ctx is None:  # click's parser leaves it out of some errors ("Option '--mode' requires an argument")
        message += f"; see `{command_path(sys.argv[1:])} --help`"
    typer.echo(f"mirror: error: {message}", err=True)
    raise SystemExit(exc.exit_code)


def command_path(args: list[str]) -> str:
    """The command that ``args`` name (``mirror replay state`` for ``replay state --at``): the
    subcommand names among them, followed from the root for as long as they name one."""
    command, path = typer.main.get_command(app), ["mirror"]
    for arg in args:
        subcommands = getattr(command, "commands", None)  # a group's
        if subcommands is None:
            break
        if arg in subcommands:
            command = subcommands[arg]
            path.append(arg)
    return " ".join(path)


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces."""
    return " ".join(text.split())
