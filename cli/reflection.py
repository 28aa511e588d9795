"""`mirror portrait`, `mirror reflections` and `mirror reflect`: a conversation's portrait and its reflections.

Like ``mirror memory``, they ask a running stack's HTTP API (``--data``, or ``--url``/``--token``)
and print what it answers: text and tables that fit the terminal for people (:mod:`.tables`), or
with ``--json`` the API's own JSON unchanged. ``portrait`` and ``reflections`` read the log (any
``--at SEQ``, any ``--branch``); ``reflect`` forces one through the live conversation, which may
refuse (the cooldown, the hourly cap): the refusal is one line naming the turns left or when.

The rendering functions take the API's JSON and a console, so they are tested without a stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group, RenderableType
from rich.text import Text

from mirror.cli.options import BRANCH, CONVERSATION, DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client
from mirror.cli.tables import Field, fitted
from mirror.events.ids import MAIN_BRANCH

__all__ = [
    "DECISION_FIELDS", "REFLECTION_FIELDS", "follow_up", "portrait", "portrait_text", "reflect", "reflection_detail",
    "reflections", "reflections_table",
]

AT = typer.Option(None, "--at", min=0, help="The seq to look at (default: the last).")
AS_JSON = typer.Option(False, "--json", help="Print the API's JSON instead of text and tables.")


def portrait(
    conversation: str = CONVERSATION, at: int = AT, branch: str = BRANCH, as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """The portrait: who the user is and how the relationship stands, as the last accepted
    reflection wrote it by event --at (the Talker reads it before replying)."""
    with gateway_client(data, url, token) as client:
        result = client.portrait(conversation, at=at, branch=branch)
    if as_json:
        _print_json(result)
        return
    _console().print(portrait_text(result))


def reflections(
    conversation: str = CONVERSATION,
    number: int = typer.Argument(None, min=1, help="Show what reflection NUMBER (1-based) changed, in full."),
    at: int = AT, branch: str = BRANCH, as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Each reflection: why it ran, whether its portrait was accepted, the beliefs it decayed or
    forgot, the model's proposals the rules overruled, and its cost in tokens and milliseconds.

    With NUMBER, that reflection in full: the portrait's diff, every decay decision, the beliefs
    decayed and forgotten with their statements.
    """
    with gateway_client(data, url, token) as client:
        result = (client.reflection(conversation, number, branch=branch) if number is not None
                  else client.reflections(conversation, at=at, branch=branch))
    if as_json:
        _print_json(result)
        return
    console = _console()
    if number is not None:
        console.print(reflection_detail(console, result))
        return
    console.print(f"{result['conversation']} ({result['branch']}) at seq {result['seq']}: "
                  f"{result['count']} reflection(s), {len(result['failures'])} failed attempt(s)")
    if result["reflections"]:
        console.print(reflections_table(console, result["reflections"]))
        console.print(f"`{follow_up(result)}` shows what reflection N changed", style="dim", markup=False)
    for failure in result["failures"]:
        console.print(Text(f"failed at seq {failure['seq']} (turn {failure['turn']}): {failure['error_type']}: "
                           f"{failure['message']}", style="red"))


def reflect(
    conversation: str = CONVERSATION, as_json: bool = AS_JSON,
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Force a reflection now, then show what it changed.

    It waits for the thinking behind it, then decays old beliefs and rewrites the portrait. Refused
    (exit status 2, one line) during the cooldown (counted from the start until the first reflection,
    then from the last one), naming the turns left, and at the hourly cap, naming when the next may run.
    """
    with gateway_client(data, url, token) as client:
        result = client.reflect(conversation)
        found = client.reflections(conversation, at=result["seq"])
    views = [view for view in found["reflections"] if view["seq"] == result["seq"]]
    if as_json:
        _print_json({**result, "reflection": views[0] if views else None})
        return
    console = _console()
    if views:
        console.print(reflection_detail(console, {**found, **views[0]}))
    else:  # not expected: the log answers up to the seq the bus acknowledged
        console.print(f"reflected at seq {result['seq']}: {'accepted' if result['accepted'] else 'rejected'}")


# ------------------------------------------------------------------------------------ rendering

def follow_up(result: dict[str, Any]) -> str:
    """The command that shows one of the listed reflections: on the branch they were listed from."""
    branch = "" if result["branch"] == MAIN_BRANCH else f" --branch {result['branch']}"
    return f"mirror reflections {result['conversation']} N{branch}"


REFLECTION_FIELDS = (Field("#", "number"), Field("seq", "number", drop=3), Field("turn", "number", drop=4),
                     Field("triggers", "id", drop=2), Field("portrait"), Field("beliefs", "id"),
                     Field("cost", "id", drop=1))
"""The beliefs column lists, one a line, how many the reflection decayed, forgot and kept against the
model's proposal (overruled); the cost column its tokens and milliseconds (both calls together)."""
DECISION_FIELDS = (Field("belief", "id"), Field("statement"), Field("proposed", "id", drop=2),
                   Field("applied", "id"), Field("overruled by", "id", drop=1))


def portrait_text(result: dict[str, Any]) -> RenderableType:
    """The portrait answer (``GET …/portrait``) for a reader: where, the portrait, the last reflection."""
    where = f"{result['conversation']} ({result['branch']}) at seq {result['seq']}"
    counts = f"{result['reflections']} reflection(s), {result['rejected']} rejected"
    lines: list[RenderableType] = []
    if result["portrait"] is None:
        lines.append(Text(f"{where}: no portrait yet ({counts}; {result['turns_since_reflection']} turn(s) since the "
                          f"last reflection or the start)"))
        if result.get("reflection") is False:
            lines.append(Text("this conversation does not reflect (its first turn, or the stack, turned it off)",
                              style="dim"))
    else:
        lines += [Text(f"{where}: the portrait of seq {result['portrait_seq']} ({counts})", style="bold"),
                  Text(result["portrait"])]
    last = result.get("last_reflection")
    if last is not None:
        outcome = "accepted" if last["accepted"] else f"rejected: {last['reason']}"
        warning = f"; {last['warning']}" if last.get("warning") else ""
        lines.append(Text(f"last reflection: seq {last['seq']}, {', '.join(last['triggers']) or 'no trigger'}: "
                          f"{outcome}{warning}", style="dim"))
    if result["pending_insights"]:
        lines.append(Text(f"{len(result['pending_insights'])} insight(s) pending for the next reflection", style="dim"))
    return Group(*lines)


def _outcome(view: dict[str, Any]) -> str:
    outcome = "accepted" if view["accepted"] else f"rejected: {view['reason']}"
    return f"{outcome}; {view['warning']}" if view.get("warning") else outcome


def reflections_table(console: Console, views: list[dict[str, Any]]) -> RenderableType:
    """The reflections (``GET …/reflections``) as a table that fits ``console``."""
    rows = [[str(view["number"]), str(view["seq"]), _turn(view), "\n".join(view["triggers"]) or "-", _outcome(view),
             _belief_counts(view), f"{view['cost']['tokens']:,} tok\n{view['cost']['ms']:,.0f} ms"] for view in views]
    return fitted(console, f"reflections ({len(views)})", REFLECTION_FIELDS, rows)


def reflection_detail(console: Console, view: dict[str, Any]) -> RenderableType:
    """One reflection (``GET …/reflections/{n}``) in full: what it changed, what it decided, what it cost."""
    cost = view["cost"]
    triggers = ", ".join(view["triggers"]) or "no trigger"
    parts: list[RenderableType] = [
        Text(f"reflection {view['number']} of {view['conversation']} ({view['branch']}) · seq {view['seq']} · "
             f"turn {_turn(view)} · {triggers}", style="bold"),
        Text(f"{_outcome(view)} · unique-word ratio {view['unique_ratio']:.2f} · {view['insights_used']} insight(s), "
             f"{view['episodes_used']} episode(s)"),
        Text(f"cost: {cost['tokens']:,} tokens (consolidation {cost['consolidation_prompt_tokens']:,} + "
             f"{cost['consolidation_completion_tokens']:,}, decay {cost['decay_tokens']:,}), {cost['ms']:,.0f} ms "
             f"(consolidation {cost['consolidation_ms']:,.0f}, decay {cost['decay_ms']:,.0f})"
             + (f" · model {cost['model']}" if cost["model"] else ""), style="dim"),
    ]
    if view["diff"]:
        parts.append(Text("portrait:", style="bold"))
        parts.extend(Text(f"  {line}", style=_diff_style(line)) for line in view["diff"])
    elif not view["accepted"]:
        parts.append(Text(f"portrait unchanged; the rejected one read: {view['proposed']!r}", style="dim"))
    else:
        parts.append(Text("portrait unchanged", style="dim"))
    if view["decisions"]:
        parts.append(fitted(console, f"decay decisions ({len(view['decisions'])}, {view['overruled']} overruled)",
                            DECISION_FIELDS, [[d["belief_id"], d["statement"] or "(not held)", d["proposed"],
                                               d["applied"], d["rule"] or "-"] for d in view["decisions"]]))
    for change in view["decayed"]:
        parts.append(Text(f"  decayed   {change['belief_id']}  {change['statement']}  "
                          f"(confidence {change['before']:.2f} → {change['after']:.2f})"))
    for change in view["forgotten"]:
        parts.append(Text(f"  forgot    {change['belief_id']}  {change['statement']}  "
                          f"({change['memory_type']}, confidence {change['before']:.2f}; still in the log)"))
    return Group(*parts)


def _belief_counts(view: dict[str, Any]) -> str:
    counts = ((len(view["decayed"]), "decayed"), (len(view["forgotten"]), "forgotten"), (view["overruled"], "overruled"))
    return "\n".join(f"{count} {what}" for count, what in counts if count) or "-"


def _turn(view: dict[str, Any]) -> str:
    return str(view["turn"] if view.get("for_turn") is None else view["for_turn"])


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---", "@@")):
        return "dim"
    return {"+": "green", "-": "red"}.get(line[:1], "")


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _console() -> Console:
    return Console(highlight=False)
