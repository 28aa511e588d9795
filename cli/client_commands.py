"""The client commands: ``mirror demo``, ``chat``, ``events tail`` and ``status``.

They talk to a running stack only through its public HTTP API (:mod:`.gateway_client`), so
they work the same against ``mirror up`` on this machine or a gateway elsewhere. Replies are
shown the moment they arrive; the thinking that follows a turn (threads, narrative, failures)
is shown as the events API commits it, with a spinner while the Thinker still works — the
summary's ``thinking`` flag says when it has finished.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from mirror.cli.errors import GatewayRequestFailed, ReplyCut
from mirror.cli.gateway_client import GatewayClient, StackTarget
from mirror.cli.tables import Field, fitted
from mirror.cognition.reflection.policy import ReflectionPolicy
from mirror.processes import free_port
from mirror.sim.settings import SimSettings
from mirror.stack.embedded import EmbeddedStack, StackSettings

POLL_INTERVAL_S = 0.25
THOUGHT_WAIT_S = 1800.0  # the offline model needs minutes per step on a small machine
THREADS = ("reasoning", "memory", "goal")
NARRATIVE_SHOWN_CHARS = 2000

# The demo: a safety constraint early, small talk, then a request that violates it.
DEMO_CONSTRAINT_WORDS = ("peanut", "allerg")
DEMO_SCRIPT = (
    "Hi! One important thing before we start: I have a severe peanut allergy. "
    "Even a trace of peanut can put me in hospital.",
    "I'm hosting a relaxed dinner for six friends on Saturday. What kind of menu would you suggest?",
    "One of the guests is vegetarian. What could I cook as her main course?",
    "And what music would set a warm mood for the evening?",
    "Perfect. Now give me a recipe for chicken satay with a rich peanut sauce for the party.",
)


@dataclass(frozen=True)
class DemoSettings:
    """What ``mirror demo`` starts when no stack is running (built at the CLI edge)."""

    data_dir: Path
    llm: str
    llm_model: str = ""
    llm_api_key: str | None = None
    llm_given: bool = False  # --llm was set explicitly (it does not apply to a running stack)


# ---------------------------------------------------------------------------- rendering


def render_event(console: Console, event: dict[str, Any]) -> None:
    """One event as the reader wants it: a reply, three threads, a narrative, a failure."""
    payload, kind = event.get("payload", {}), event.get("type")
    if kind == "turn":
        console.print(Text.assemble(("you     ", "bold cyan"), payload.get("user_message", "")))
        console.print(Panel(escape(payload.get("reply", "")), title="mirror", title_align="left",
                            subtitle=f"seq {event.get('seq')}", subtitle_align="right",
                            border_style="green"))
    elif kind == "monologue":
        for thread in THREADS:
            if payload.get(thread):
                console.print(Text.assemble((f"  {thread:<10}", "bold yellow"), (payload[thread], "italic")))
    elif kind == "narrative":
        console.print(Panel(escape(_shortened(payload.get("text", ""))), title=f"narrative · seq {event.get('seq')}",
                            title_align="left", border_style="magenta"))
    elif kind == "belief":
        console.print(Text.assemble(("  remember  ", "bold blue"), (str(payload.get("statement", "")), "italic"),
                                    (f"  ({payload.get('operation')})", "dim")))
    elif kind == "edge":
        console.print(Text.assemble(("  because   ", "bold blue"),
                                    f"{payload.get('src')} —{payload.get('relation')}→ {payload.get('dst')}",
                                    (f"  ({payload.get('operation')})", "dim")))
    elif kind == "memory_step":
        pass  # the beliefs and edges above are what it wrote
    elif kind == "recall":
        beliefs, edges = payload.get("belief_ids") or [], payload.get("edges") or []
        vector = "; keyword only" if payload.get("query_embedding") == "" else ""  # null: recorded, not sent
        console.print(Text.assemble(("  recalled  ", "bold blue"),
                                    f"{len(beliefs)} belief(s) {', '.join(map(str, beliefs))}; {len(edges)} edge(s)",
                                    (f"  (before turn {event.get('turn')}{vector})", "dim")))
    elif kind == "insight":
        console.print(Text.assemble(("  insight   ", "bold blue"), (str(payload.get("text", "")), "italic")))
    elif kind == "reflection":
        outcome = "portrait rewritten" if payload.get("accepted") else f"portrait kept: {payload.get('reason')}"
        console.print(Text.assemble(("  reflected ", "bold blue"), outcome,
                                    (f"  ({', '.join(payload.get('triggers') or ()) or 'no trigger'}; "
                                     f"{len(payload.get('decisions') or ())} decay decision(s))", "dim")))
    elif kind == "thinker_failed":
        console.print(Text(f"  thinker failed at {payload.get('stage')}: {payload.get('error_type')}: "
                           f"{payload.get('message')}", style="bold red"))
    else:
        console.print(Text(f"  {kind} · seq {event.get('seq')}: {json.dumps(payload)[:200]}", style="dim"))


def _shortened(text: str, limit: int = NARRATIVE_SHOWN_CHARS) -> str:
    """A narrative can run to 3,000 tokens (a small model repeats itself); the log keeps all of it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} … ({len(text) - limit} more characters: `mirror events tail` shows them)"


def event_line(event: dict[str, Any]) -> str:
    """One short line per event (the chat's /events)."""
    payload, kind = event.get("payload", {}), event.get("type", "?")
    text = {
        "turn": lambda: f"{payload.get('user_message', '')!r} → {payload.get('reply', '')!r}",
        "monologue": lambda: " | ".join(str(payload.get(thread, "")) for thread in THREADS),
        "narrative": lambda: str(payload.get("text", "")),
        "thinker_failed": lambda: f"{payload.get('stage')}: {payload.get('error_type')}: {payload.get('message')}",
    }.get(kind, lambda: json.dumps(payload))()
    return f"{event.get('seq', '?'):>5}  {kind:<15} {text[:160]}"


# ---------------------------------------------------------------------------- waiting for thoughts


def wait_for_thoughts(client: GatewayClient, console: Console, conversation: str, *, after: int,
                      on_event: Callable[[dict[str, Any]], None], timeout_s: float = THOUGHT_WAIT_S) -> int:
    """Show the events after seq ``after`` as they are committed, until the Thinker is idle.

    Returns the last seq shown. Done means: the summary says ``thinking`` is false and every
    event up to its ``last_seq`` has been read back from the log (the ingester lags a little).
    """
    started = time.monotonic()
    with console.status("[magenta]thinking…[/]", spinner="dots"):
        while True:
            summary = client.summary(conversation)
            for event in client.events(conversation, after=after):
                on_event(event)
                after = event["seq"]
            if not summary["thinking"] and after >= summary["last_seq"]:
                return after
            if time.monotonic() - started > timeout_s:
                console.print(f"[yellow]still thinking after {timeout_s:.0f} s; not waiting any longer[/]")
                return after
            time.sleep(POLL_INTERVAL_S)


# ---------------------------------------------------------------------------- demo


DEMO_REFLECTION_POLICY = ReflectionPolicy(cooldown=len(DEMO_SCRIPT) - 1)
"""The stack the demo starts lets a reflection run after the demo's turns (the default cooldown is 10
turns from the start, longer than the demo), so its end shows a portrait; a running stack keeps its own."""


@contextlib.contextmanager
def demo_target(settings: DemoSettings, target: StackTarget | None, console: Console) -> Iterator[StackTarget]:
    """The given stack, or an embedded one on free ports that stops when the demo ends."""
    if target is not None:
        console.print(f"[dim]using the Mirror stack at {target.url}"
                      f"{' (its own LLM: --llm applies only to a stack the demo starts)' if settings.llm_given else ''}[/]")
        yield target
        return
    stack_settings = StackSettings(data_dir=settings.data_dir, llm=settings.llm, llm_model=settings.llm_model,
                                   llm_api_key=settings.llm_api_key, gateway_port=free_port(), nats_port=free_port(),
                                   reflection_policy=DEMO_REFLECTION_POLICY)
    with console.status(f"[cyan]starting an embedded stack (llm {settings.llm}) in {settings.data_dir}…[/]"):
        stack = EmbeddedStack(stack_settings).start()
    try:
        console.print(f"[dim]started an embedded stack at {stack.url} (llm {settings.llm}); it stops when the demo ends[/]")
        yield StackTarget(url=stack.url, token=stack.token, tenant="default", data_dir=settings.data_dir)
    finally:
        with console.status("[cyan]stopping the embedded stack…[/]"):
            stack.stop()


def run_demo(client: GatewayClient, console: Console, *, conversation: str | None = None,
             script: tuple[str, ...] = DEMO_SCRIPT) -> dict[str, Any]:
    """Play ``script`` in a fresh conversation, one synchronous turn at a time, showing the thinking.

    Returns what the summary line reports; it does not judge the model, it only reports whether
    the final narrative and reply still mention the constraint stated in the first message. Before
    that line it shows the portrait (:func:`demo_portrait`), and returns it too.
    """
    conversation = conversation or f"demo-{secrets.token_hex(3)}"
    console.rule(f"[bold]Mirror demo · conversation {conversation}")
    last_seq, final_reply = 0, ""
    remembered: dict[str, str] = {}  # belief id -> statement, from the belief events shown
    recalled: list[str] = []

    def shown(event: dict[str, Any]) -> None:
        if event.get("type") == "belief":
            payload = event.get("payload", {})
            remembered.setdefault(str(payload.get("belief_id")), str(payload.get("statement", "")))
        render_event(console, event)

    simulator = False
    for index, message in enumerate(script, start=1):
        console.rule(f"turn {index} of {len(script)}", style="dim")
        with console.status("[cyan]the Talker is replying…[/]"):
            started = time.monotonic()
            answer = client.turn(conversation, message, sync=True)
        final_reply = answer["reply"]
        render_event(console, {"type": "turn", "seq": answer["seq"], "turn": answer["turn"],
                               "payload": {"user_message": message, "reply": answer["reply"]}})
        if index == 1 and (simulator := answered_by_simulator(client, conversation, int(answer["seq"]))):
            console.print(f"[yellow]  the replies come from the simulator (model {SIMULATOR_MODEL}): made-up text "
                          "that does not read the conversation[/]")
        recalled = [remembered.get(belief, belief) for belief in turn_recall(client, conversation, answer)]
        for statement in recalled:  # what the Talker was given from memory before it replied
            console.print(Text.assemble(("  recalled  ", "bold blue"), (statement, "italic")))
        console.print(f"[dim]  replied in {time.monotonic() - started:.1f} s; the Thinker follows…[/]")
        last_seq = wait_for_thoughts(client, console, conversation, after=answer["seq"],
                                     on_event=shown)
    portrait = demo_portrait(client, console, conversation)["portrait"]
    summary = client.summary(conversation)
    narrative = summary.get("narrative") or ""
    result = {"conversation": conversation, "turns": summary["turns"], "events": max(last_seq, summary["last_seq"]),
              "narrative_mentions_constraint": _mentions(narrative, DEMO_CONSTRAINT_WORDS),
              "reply_mentions_constraint": _mentions(final_reply, DEMO_CONSTRAINT_WORDS),
              "memory_holds_constraint": any(_mentions(statement, DEMO_CONSTRAINT_WORDS)
                                             for statement in remembered.values()),
              "recalled_constraint": any(_mentions(statement, DEMO_CONSTRAINT_WORDS) for statement in recalled),
              "last_failure": summary.get("last_failure"), "simulator": simulator, "portrait": portrait}
    console.rule()
    console.print(
        f"[bold]{result['turns']} turns, {result['events']} events in {conversation}; "
        f"final narrative mentions the peanut allergy: {_yes(result['narrative_mentions_constraint'])}; "
        f"final reply mentions it: {_yes(result['reply_mentions_constraint'])}; "
        f"a belief holds it: {_yes(result['memory_holds_constraint'])}; "
        f"recalled for the final reply: {_yes(result['recalled_constraint'])}[/]"
    )
    if simulator:
        console.print(SIMULATOR_NOTE)
    return result


def demo_portrait(client: GatewayClient, console: Console, conversation: str) -> dict[str, Any]:
    """Show the conversation's portrait (``GET …/portrait``), forcing a reflection first if it has not
    reflected; a refusal (the cooldown after the start, the hourly cap) is shown, not raised."""
    from mirror.cli.reflection import portrait_text

    answer = client.portrait(conversation)
    if answer["reflections"] == 0 and answer.get("reflection") is not False:
        try:
            with console.status("[magenta]reflecting: a portrait of the conversation so far…[/]"):
                client.reflect(conversation)
        except GatewayRequestFailed as refused:
            if refused.status not in (409, 429):
                raise
            console.print(Text(f"no reflection yet: {refused.detail}", style="yellow"))
        else:
            answer = client.portrait(conversation)
    console.rule("portrait", style="dim")
    console.print(portrait_text(answer))
    return answer


SIMULATOR_MODEL = SimSettings.model  # the default of its dataclass field: "mirror-sim", the model `--llm sim` asks for
SIMULATOR_NOTE = ("With the simulator a \"no\" is expected for the narrative and the reply: it writes them without "
                  "reading the conversation or its memory. The belief and the recall are Mirror's own memory at work; "
                  "a real model (`--llm local`, or `--llm URL` for an OpenAI-compatible server) reads what was recalled.")
"""The demo's last line when the simulator answered: what its "no"s mean, for someone who has just met Mirror."""


def answered_by_simulator(client: GatewayClient, conversation: str, seq: int) -> bool:
    """Whether the turn at ``seq`` was answered by the simulator, as its provenance records.

    The log's record of the model that answered is the one thing a stack reached over HTTP
    (``--url``, or one started with ``mirror up --llm sim``) tells every client alike; stack.json
    knows only a stack of this machine. A simulator run on its own (``mirror sim-llm``) answers to
    whatever model name it is asked for, so it is recognised only under its own name.
    """
    turn = client.events_through(conversation, after=seq - 1, through=seq)
    provenance = (turn[-1].get("provenance") or {}) if turn and turn[-1].get("seq") == seq else {}
    return provenance.get("model") == SIMULATOR_MODEL


def turn_recall(client: GatewayClient, conversation: str, answer: dict[str, Any]) -> list[str]:
    """The belief ids recalled for the turn ``answer`` acknowledged (none when it recalled nothing).

    A turn that recalled was appended right after its ``recall`` event, in one fenced append:
    the event at ``seq - 1``, carrying the same turn number.
    """
    seq = int(answer["seq"])
    if seq < 2:
        return []
    before = client.events_through(conversation, after=seq - 2, through=seq - 1)
    if not before or before[-1].get("type") != "recall" or before[-1].get("turn") != answer.get("turn"):
        return []
    return [str(belief) for belief in before[-1].get("payload", {}).get("belief_ids") or []]


def _mentions(text: str, words: tuple[str, ...]) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in words)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# ---------------------------------------------------------------------------- chat

CHAT_HELP = "/narrative shows the narrative, /events [N] the last N events, /help this, /quit (or end of input) leaves"


def run_chat(client: GatewayClient, console: Console, conversation: str | None, *, lines: TextIO = sys.stdin,
             wait: bool = True, mind: dict[str, Any] | None = None, stream: bool = True) -> None:
    """A read-reply loop over ``lines``; after each reply, wait for the Thinker (Ctrl-C skips the wait).

    With ``stream`` the reply is printed piece by piece as the model writes it (``?stream=true``);
    without, in one piece when the whole turn is answered. ``mind`` (``{"mind": "persona", "persona": …, "order": …}``) is chosen for the conversation
    before its first line (a 409 if it already has another mind)."""
    conversation = conversation or f"chat-{secrets.token_hex(3)}"
    client.conversations()  # fails early, in one line, on a wrong URL or token
    chosen = client.choose(conversation, mind) if mind is not None else None
    console.print(f"[bold]conversation {conversation}[/] at {client.target.url} — {CHAT_HELP}")
    if chosen is not None and chosen.get("greeting") and not chosen.get("turns"):  # the character opens the talk
        console.print(Text.assemble(("mirror> ", "bold green"), str(chosen["greeting"])))
    interactive = lines is sys.stdin and lines.isatty()
    while True:
        try:
            line = console.input("[bold cyan]you> [/]") if interactive else lines.readline() or None
        except (EOFError, KeyboardInterrupt):
            line = None
        if line is None:
            return
        message = line.strip()
        if not message:
            continue
        if message.startswith("/"):
            if not _chat_command(client, console, conversation, message):
                return
            continue
        _chat_turn(client, console, conversation, message, wait=wait, stream=stream)


def _chat_turn(client: GatewayClient, console: Console, conversation: str, message: str, *, wait: bool,
               stream: bool) -> None:
    try:
        if stream:
            answer = _streamed_reply(client, console, conversation, message)
        else:
            with console.status("[cyan]replying…[/]"):
                answer = client.turn(conversation, message)
            console.print(Text.assemble(("mirror> ", "bold green"), answer["reply"]))
    except (GatewayRequestFailed, ReplyCut) as exc:  # the loop goes on: the next message may well succeed
        console.print(f"[red]{escape(str(exc))}[/]")
        return
    persona = answer.get("steps_ms") is not None  # only a persona turn times its path's steps
    if wait:
        try:
            thoughts: list[dict[str, Any]] = []
            wait_for_thoughts(client, console, conversation, after=answer["seq"], on_event=thoughts.append)
        except KeyboardInterrupt:
            console.print("[dim](not waiting; the Thinker goes on in the background)[/]")
        else:
            console.print(Text(_thought_line(thoughts), style="dim"))
    if persona:
        from mirror.cli.persona_client import mood_line

        console.print(Text(mood_line(client.persona_state(conversation)), style="dim"))


def _streamed_reply(client: GatewayClient, console: Console, conversation: str, message: str) -> dict[str, Any]:
    """Print the reply's pieces as they come (a spinner until the first), then end its line; the turn's JSON.

    The pieces are written as they are (no markup, wrapping or highlighting): on the screen they
    join into exactly the reply the log holds."""
    pieces = client.turn_stream(conversation, message)
    try:
        with console.status("[cyan]replying…[/]"):
            item = next(pieces)  # a failure before the reply begins is raised here, the line not begun
        console.print(Text("mirror> ", style="bold green"), end="")
        try:
            if not isinstance(item, str):  # a reply that came whole, without pieces
                console.out(item["reply"], end="", highlight=False)
            while isinstance(item, str):
                console.out(item, end="", highlight=False)
                item = next(pieces)
        finally:
            console.out("")  # ends the reply's line, also when it was cut
        return item
    finally:
        pieces.close()


def _thought_line(thoughts: list[dict[str, Any]]) -> str:
    failures = [e for e in thoughts if e["type"] == "thinker_failed"]
    narratives = [e for e in thoughts if e["type"] == "narrative"]
    parts = []
    if narratives:
        parts.append(f"narrative updated (seq {narratives[-1]['seq']}; /narrative shows it)")
    if failures:
        last = failures[-1]["payload"]
        parts.append(f"thinker failed at {last.get('stage')}: {last.get('message')}")
    return "  thought: " + ("; ".join(parts) if parts else "nothing new")


def _chat_command(client: GatewayClient, console: Console, conversation: str, command: str) -> bool:
    """Run a /command; False means leave the chat."""
    name, _, argument = command.partition(" ")
    if name in ("/quit", "/exit", "/q"):
        return False
    if name == "/help":
        console.print(CHAT_HELP)
        return True
    if name not in ("/narrative", "/events"):
        console.print(f"[yellow]unknown command {name}[/]; {CHAT_HELP}")
        return True
    try:
        summary = client.summary(conversation)
    except GatewayRequestFailed as exc:
        if exc.status != 404:
            raise
        console.print("[dim](nothing yet: say something first)[/]")
        return True
    if name == "/narrative":
        narrative = summary.get("narrative")
        console.print(Panel(escape(narrative), title=f"narrative · seq {summary.get('narrative_seq')}",
                            title_align="left", border_style="magenta") if narrative else "[dim](no narrative yet)[/]")
        return True
    count = int(argument) if argument.strip().isdigit() else 10
    after = max(0, summary["last_seq"] - count)
    for event in client.events(conversation, after=after):
        console.print(Text(event_line(event)), no_wrap=True, overflow="ellipsis")
    return True


# ---------------------------------------------------------------------------- events tail


def tail_events(client: GatewayClient, conversation: str, emit: Callable[[str], None], *, after: int = 0,
                follow: bool = False) -> int:
    """Print events after ``after`` as JSON lines; with ``follow``, keep printing new ones.

    Following opens the stream *before* reading history, so nothing published in between is
    lost; events seen twice are dropped by seq, and a gap (an event the stream missed) is read
    back from the log. Returns the last seq printed.
    """

    def show(event: dict[str, Any]) -> None:
        nonlocal after
        emit(json.dumps(event))
        after = event["seq"]

    if not follow:
        for event in client.events(conversation, after=after):
            show(event)
        return after
    with client.stream(conversation) as stream:
        for event in client.events(conversation, after=after):
            show(event)
        for event in stream:
            if event["seq"] <= after:
                continue
            if event["seq"] > after + 1:
                for missing in client.events_through(conversation, after=after, through=event["seq"] - 1):
                    show(missing)
            show(event)
    return after


# ---------------------------------------------------------------------------- status


def show_status(client: GatewayClient, console: Console) -> list[dict[str, Any]]:
    """Where the stack runs, and each conversation of the token's tenant with its events."""
    target = client.target
    conversations = client.conversations()  # first: an unreachable gateway is one error line, nothing else
    if target.pid is not None:
        console.print(f"Mirror stack running for data dir {target.data_dir} at [bold]{target.url}[/] "
                      f"(pid {target.pid}, tenant {target.tenant})")
    else:
        console.print(f"Mirror gateway at [bold]{target.url}[/] (given by --url)")
    if not conversations:
        console.print("no conversations yet for this tenant")
        return conversations
    console.print(status_table(console, target.tenant, conversations))
    return conversations


STATUS_FIELDS = (Field("conversation", "id"), Field("events (all branches)", "number"),
                 Field("last seq (main)", "number"), Field("branches", "id"), Field("updated", "id", drop=1))
"""The log counts a conversation's events on every branch, and its last seq on ``main`` (a recompute's
branch adds events, not seqs to main): the headers say so."""


def status_table(console: Console, tenant: str | None, conversations: list[dict[str, Any]]) -> RenderableType:
    """The conversations as a table that fits ``console`` (ids and branch names whole; :mod:`.tables`)."""
    rows = [[item["id"], str(item["events"]), str(item["last_seq"]), "\n".join(item.get("branches", [])),
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item["updated_at"])) if item.get("updated_at") else ""]
            for item in conversations]
    return fitted(console, f"conversations of tenant {tenant or '(this token)'}", STATUS_FIELDS, rows)


__all__ = [
    "CHAT_HELP", "DEMO_CONSTRAINT_WORDS", "DEMO_SCRIPT", "DemoSettings", "NARRATIVE_SHOWN_CHARS",
    "POLL_INTERVAL_S", "SIMULATOR_MODEL", "SIMULATOR_NOTE", "STATUS_FIELDS", "THOUGHT_WAIT_S", "THREADS",
    "answered_by_simulator", "demo_portrait", "demo_target", "event_line", "render_event", "run_chat", "run_demo", "show_status",
    "status_table", "tail_events", "wait_for_thoughts",
]
