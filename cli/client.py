"""The client commands: ``mirror demo``, ``chat``, ``status`` and ``events tail``.

They reach a stack only over HTTP — the one recorded in --data by ``mirror up``, or the one
--url and --token name — so they work the same against this machine or a gateway elsewhere.
What they show and how is in :mod:`.client_commands`; this module turns options into calls.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

from mirror.cli.errors import NoStackRunning
from mirror.cli.logging_setup import configure_logging
from mirror.cli.options import (
    AFTER_SEQ,
    CONVERSATION,
    DATA_DIR,
    GATEWAY_TOKEN,
    GATEWAY_URL,
    LLM_MODEL,
    QUIET_LOG_LEVEL,
    LogLevel,
    gateway_client,
    identifier,
)

# The commands import the stack, the gateway client and the local model in their bodies: see app.py.
__all__ = ["chat", "demo", "events_app", "status"]

events_app = typer.Typer(help="A conversation's events, from the HTTP API of a running stack.", rich_markup_mode="markdown")


def demo(
    llm: str = typer.Option(None, "--llm", envvar="MIRROR_LLM_URL", show_default="local if installed, else sim",
                            help="LLM of the stack the demo starts when none runs: 'local', 'sim' or a base URL."),
    model: str = LLM_MODEL,
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    conversation: str = typer.Option(None, "--conversation", help="Conversation id (default: a fresh demo-RANDOM).",
                                     callback=identifier("conversation")),
    mind: str = typer.Option("mirror", "--mind", help="mirror (the memory demo) or persona (a scripted scene with a character)."),
    persona: Path = typer.Option(None, "--persona", help="With --mind persona: a persona file (card JSON/PNG or TOML; "
                                 "default: the shipped Wren, examples/wren.json, whom the scene is written for)."),
    order: str = typer.Option(None, "--order", help="With --mind persona: appraisal_first (default) or plan_first."),
    log_level: LogLevel = QUIET_LOG_LEVEL,
) -> None:
    """Play a short conversation that tests memory of a safety constraint, showing the thinking after each turn
    and the portrait at the end; with `--mind persona`, a short scripted scene with a character, showing each
    reply's interpretation, appraisal and plan, then the emotion, relationship and goal changes turn by turn.

    Uses the stack running for --data (or --url); otherwise starts an embedded one on free ports
    and stops it at the end. Turns are synchronous: each turn's thinking is done before the next.
    """
    from mirror.cli.client_commands import DemoSettings, demo_target, run_demo
    from mirror.cli.gateway_client import GatewayClient, find_stack
    from mirror.stack.local_model import local_model_installed

    configure_logging(log_level.value)
    if mind not in ("mirror", "persona"):
        raise typer.BadParameter(f"{mind!r} is not mirror or persona", param_hint="'--mind'")
    if mind == "mirror" and (persona is not None or order is not None):
        raise typer.BadParameter("--persona and --order go with --mind persona", param_hint="'--mind'")
    _check_order(order)
    persona_mind = None
    if mind == "persona":
        from mirror.cli.persona_client import mind_body
        from mirror.cognition.persona import EXAMPLES

        persona_mind = mind_body(str(persona or EXAMPLES / "wren.json"), order)  # a bad file fails before any stack starts
    try:
        target = find_stack(data, url, token)
    except NoStackRunning:
        target = None
    settings = DemoSettings(data_dir=data, llm=llm or ("local" if local_model_installed() else "sim"),
                            llm_model=model, llm_api_key=os.environ.get("MIRROR_LLM_API_KEY"), llm_given=bool(llm))
    console = Console()
    with demo_target(settings, target, console) as found, GatewayClient(found) as client:
        if persona_mind is None:
            run_demo(client, console, conversation=conversation)
        else:
            from mirror.cli.persona_client import run_persona_demo

            run_persona_demo(client, console, persona_mind, conversation=conversation)


PLAN_ORDERS = ("appraisal_first", "plan_first")


def _check_order(order: str | None) -> None:
    if order is not None and order not in PLAN_ORDERS:
        raise typer.BadParameter(f"{order!r} is not {' or '.join(PLAN_ORDERS)}", param_hint="'--order'")


def chat(
    conversation: str = typer.Argument(None, help="Conversation id to continue (default: a fresh chat-RANDOM).",
                                       callback=identifier("conversation")),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="After each reply, wait (with a spinner) for the Thinker "
                              "(for a persona: its background steps, so the mood line shows what they decided)."),
    persona: str = typer.Option(None, "--persona", help="Make a new conversation this persona: a file (card JSON/PNG "
                                "or TOML, sent as a card) or a persona of the tenant's store (`mirror persona push`), "
                                "by its stored name or the name its card shows."),
    order: str = typer.Option(None, "--order", help="With --persona: appraisal_first (default) or plan_first."),
    user_name: str = typer.Option(None, "--user-name", help="With --persona: your name, what the card's {{user}} "
                                  "becomes (default User)."),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="Print the reply's tokens as the model writes them "
                                "(`?stream=true`), or (--no-stream) the whole reply once the turn is answered."),
) -> None:
    """Chat with a running stack: the reply's tokens as they come, then a live indicator while the Thinker works.

    Lines come from stdin (so it can be piped); /narrative, /events [N], /help, /quit. When the
    conversation's mind is persona, a mood line follows each reply: the strongest emotions, the
    relationship and the active hard goal, read from `GET …/persona` after the background steps
    (with --no-wait: the state as it is, which the last turn's steps may not have updated yet).
    """
    from mirror.cli.client_commands import run_chat

    if order is not None and persona is None:
        raise typer.BadParameter("--order goes with --persona", param_hint="'--order'")
    if user_name is not None and persona is None:
        raise typer.BadParameter("--user-name goes with --persona", param_hint="'--user-name'")
    _check_order(order)
    mind = None
    if persona is not None:
        from mirror.cli.persona_client import mind_body

        mind = mind_body(persona, order, user_name)
    with gateway_client(data, url, token) as client:
        run_chat(client, Console(), conversation, wait=wait, mind=mind, stream=stream)


@events_app.command("tail")
def events_tail(
    conversation: str = CONVERSATION,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events as they are published."),
    after: int = AFTER_SEQ,
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
) -> None:
    """Print a conversation's events as JSON lines (committed ones; --follow then streams new ones until Ctrl-C)."""
    from mirror.cli.client_commands import tail_events

    with gateway_client(data, url, token) as client:
        try:
            tail_events(client, conversation, typer.echo, after=after, follow=follow)
        except KeyboardInterrupt:
            pass


def status(data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN) -> None:
    """Whether a stack runs for --data, its URL, and each conversation of the tenant with its events."""
    from mirror.cli.client_commands import show_status

    with gateway_client(data, url, token) as client:
        show_status(client, Console())
