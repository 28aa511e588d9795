"""The persona mind in the client commands: the chat's mood line, the mind a new conversation asks
for, and ``mirror demo --mind persona`` (a short scripted scene, its emotion and goal changes).

Everything goes through the gateway's HTTP API (:mod:`.gateway_client`): the choice of mind is
``POST /v1/conversations/{id}`` (or a first turn's ``mind``/``persona``/``order`` fields), the
character's state is ``GET /v1/conversations/{id}/persona``.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mirror.cli.client_commands import render_event, wait_for_thoughts
from mirror.cli.gateway_client import GatewayClient

__all__ = ["MOOD_EMOTIONS", "PERSONA_DEMO_SCRIPT", "changes", "mind_body", "mood_line", "run_persona_demo"]

MOOD_EMOTIONS = 3
"""The mood line names the strongest emotions, this many at most."""
SHOWN_STEP_TYPES = ("interpretation", "appraisal", "plan")
PERSONA_DEMO_SCRIPT = (
    "Good evening. Sorry to come in so late, I know you close at six.",
    "It's this pocket watch. My grandmother left it to me, and it stopped the night of the last big storm.",
    "She said it came off a fishing boat in the Elsie winter. Her brother was aboard, and he drowned that night.",
    "Thank you for listening, truly. I would love to see the lamp room, if you would show it to me.",
)
"""Written for the shipped Wren (``examples/wren.json``): the second, third and fourth messages hold the
words of her three hard goals in order, so a model that reads them (or the simulator, by its word rule)
meets each in turn, and the storm, the drowning and the thanks move her emotions."""


def mind_body(persona: str, order: str | None = None, user_name: str | None = None) -> dict[str, Any]:
    """The ``mind`` fields for ``persona``: a file (card JSON/PNG or TOML, validated here and sent as
    a V3 card object) or else a persona of the tenant's store (its stored name, or the name its card
    shows: the gateway looks it up); ``user_name``: who the character talks to."""
    from mirror.cognition.persona import read_persona, to_card

    body: dict[str, Any] = {"mind": "persona"}
    if Path(persona).is_file():
        body["persona"] = to_card(read_persona(persona))
    else:
        if not persona.strip():
            raise typer.BadParameter("is empty: give a persona file or a persona's name", param_hint="'--persona'")
        body["persona"] = persona
    if order is not None:
        body["order"] = order
    if user_name is not None:
        body["user_name"] = user_name
    return body


def mood_line(view: dict[str, Any]) -> str:
    """One line: the strongest emotions, the relationship, the active hard goal."""
    strongest = sorted(((value, name) for name, value in view.get("emotions", {}).items() if value > 0), reverse=True)
    emotions = ", ".join(f"{name} {value:.2f}" for value, name in strongest[:MOOD_EMOTIONS]) or "calm"
    relationship = ", ".join(f"{name} {value:.2f}" for name, value in view.get("relationship", {}).items()) or "-"
    goals = view.get("goals", {})
    hard = goals.get("hard") or []
    active = goals.get("active_hard_goal")
    goal = (f"goal {goals.get('hard_met', 0) + 1}/{len(hard)}: {active}" if active
            else "every hard goal met" if hard else "no hard goals")
    return f"  mood: {emotions} · {relationship} · {goal}"


def changes(before: dict[str, float], after: dict[str, float]) -> str:
    """``fear +0.30, joy -0.15`` for the values that moved (``-`` when none did)."""
    moved = [(name, value - before.get(name, 0.0)) for name, value in after.items()
             if abs(value - before.get(name, 0.0)) >= 0.005]
    moved.sort(key=lambda item: -abs(item[1]))
    return ", ".join(f"{name} {delta:+.2f}" for name, delta in moved) or "-"


def run_persona_demo(client: GatewayClient, console: Console, mind: dict[str, Any], *,
                     conversation: str | None = None, script: tuple[str, ...] = PERSONA_DEMO_SCRIPT) -> dict[str, Any]:
    """Play ``script`` as a persona conversation, one synchronous turn at a time: each reply, the
    steps on its path (interpretation, appraisal, plan), then — once the background steps are done —
    what moved; a table of the changes turn by turn at the end, and the active hard goal."""
    conversation = conversation or f"persona-demo-{secrets.token_hex(3)}"
    client.choose(conversation, mind)
    before = client.persona_state(conversation)
    console.rule(f"[bold]Mirror demo · {before['name']} · conversation {conversation} ({before['order']})")
    table = Table(title=f"{before['name']}: what moved, turn by turn", title_justify="left")
    for column in ("turn", "emotions", "relationship", "hard goal"):
        table.add_column(column, overflow="fold")
    rows: list[dict[str, Any]] = []
    for index, message in enumerate(script, start=1):
        console.rule(f"turn {index} of {len(script)}", style="dim")
        with console.status("[cyan]the persona is replying…[/]"):
            started = time.monotonic()
            answer = client.turn(conversation, message, sync=True)
        render_event(console, {"type": "turn", "seq": answer["seq"],
                               "payload": {"user_message": message, "reply": answer["reply"]}})
        for event in client.events_through(conversation, after=before_seq(answer), through=int(answer["seq"]) - 1):
            if event.get("type") in SHOWN_STEP_TYPES:
                console.print(Text.assemble((f"  {event['type']:<15}", "bold yellow"),
                                            (str(event["payload"].get("text", "")), "italic")))
        console.print(f"[dim]  replied in {time.monotonic() - started:.1f} s; the background steps follow…[/]")
        wait_for_thoughts(client, console, conversation, after=answer["seq"], on_event=_failures_only(console))
        after = client.persona_state(conversation)
        met = after["goals"]["hard_met"] > before["goals"]["hard_met"]
        row = {"turn": index, "emotions": changes(before["emotions"], after["emotions"]),
               "relationship": changes(before["relationship"], after["relationship"]),
               "goal_met": before["goals"]["active_hard_goal"] if met else None,
               "active_hard_goal": after["goals"]["active_hard_goal"], "reply": answer["reply"]}
        rows.append(row)
        table.add_row(str(index), row["emotions"], row["relationship"],
                      f"met: {row['goal_met']}" if met else "(unchanged)")
        console.print(Text(mood_line(after), style="dim"))
        before = after
    console.rule()
    console.print(table)
    goals = before["goals"]
    active = goals["active_hard_goal"]
    console.print(f"[bold]{goals['hard_met']} of {len(goals['hard'])} hard goals met; "
                  + (f"active hard goal: {active}[/]" if active else "every hard goal is met[/]"))
    return {"conversation": conversation, "persona": before["name"], "order": before["order"], "turns": rows,
            "emotions": before["emotions"], "relationship": before["relationship"], "hard_met": goals["hard_met"],
            "active_hard_goal": active}


def before_seq(answer: dict[str, Any]) -> int:
    """The seq before a persona turn's path events: they precede the ``turn`` in one append, one
    per step with a ``retrieval`` among them (the interpretation, retrieval, plan and appraisal)."""
    return max(0, int(answer["seq"]) - 5)


def _failures_only(console: Console) -> Any:
    def shown(event: dict[str, Any]) -> None:
        if event.get("type") == "thinker_failed":
            render_event(console, event)
        elif event.get("type") in ("emotion", "relationship", "goal") and event["payload"].get("reason"):
            console.print(Text.assemble((f"  {event['type']:<15}", "bold magenta"),
                                        (str(event["payload"]["reason"]), "italic")))
    return shown
