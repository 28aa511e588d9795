"""The `mirror` command line (Typer: typed options, env-var fallbacks, generated --help).

This module is the table of contents: the root app, its ``--config`` callback, and every
command and group registered in the order ``mirror --help`` lists them. The commands live one
module per group (:mod:`.serve`, :mod:`.client`, :mod:`.replay`, :mod:`.tenants`,
:mod:`.bench`, :mod:`.log`, :mod:`.evals`, :mod:`.memory`, :mod:`.chaos`); the options they share are defined once in :mod:`.options`.

Commands import what they run inside their bodies, not at the top of their modules: importing
the stack, Ray and the pipelines up front would make every command, ``mirror --help`` included,
take ~0.8 s instead of ~0.2 s (measured with ``time mirror --help``, November 2026). At the top
of the command modules are only the standard library, rich's console and tables (the help loads
rich anyway) and Mirror's own light modules (ids, errors, the config file, the nats-server launcher):
~15 ms together under ``-X importtime``, lost in the noise of ``time mirror --help``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mirror.cli import bench, chaos, client, evals, log, memory, replay, serve, tenants
from mirror.cli.config_file import find_config_file, load_default_map
from mirror.events.errors import MirrorError

__all__ = ["app", "main"]

app = typer.Typer(
    help="Mirror: an event-sourced runtime for LLM conversations that think between turns.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",  # docstrings are wrapped paragraphs: markdown joins their lines
)

app.command()(serve.ingest)
app.command()(serve.nats)
app.command()(serve.up)
app.command("sim-llm")(serve.sim_llm)
app.command()(client.demo)
app.command()(client.chat)
app.command()(client.status)
app.command("recompute")(replay.recompute)
app.command()(chaos.chaos)
app.add_typer(tenants.tenants_app, name="tenants")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(log.log_app, name="log")
app.add_typer(client.events_app, name="events")
app.add_typer(replay.replay_app, name="replay")
app.add_typer(evals.eval_app, name="eval")
app.add_typer(memory.memory_app, name="memory")


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
    """Entry point: a Mirror error is one clear line on stderr and exit status 2, not a traceback."""
    try:
        app()
    except (MirrorError, ValueError) as exc:
        typer.echo(f"mirror: error: {exc}", err=True)
        raise SystemExit(2) from None
