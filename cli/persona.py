"""``mirror persona show|export|push|import-lorebook|list``: check a persona file and see what Mirror
will use, write it as a V3 card, or store it in (and list) the tenant's persona store of a running
stack, and attach a SillyTavern World Info lorebook to a stored persona.

A persona file is a Character Card V2/V3 (JSON, or a PNG carrying it) or a native TOML file; the
schema is in docs/persona.md. Both commands validate the whole file first: a wrong key is
``mirror: error: persona file FILE: KEY: ...`` and exit status 2, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from mirror.cli.options import DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client, identifier

# The commands import cognition (~0.4 s) in their bodies: see app.py.
__all__ = ["persona_app"]

persona_app = typer.Typer(help="Persona files (character cards V2/V3, JSON or PNG, or TOML): check, show, export; "
                               "the tenant's persona store: push, import-lorebook, list.",
                          rich_markup_mode="markdown")


@persona_app.command("show")
def persona_show(
    file: Path = typer.Argument(..., help="A card (.json or .png, V2 or V3) or a native .toml persona."),
    user_name: str = typer.Option(None, "--user-name",
                                  help="Who the character talks to: what the card's {{user}} becomes (default User)."),
    lorebook: Path = typer.Option(None, "--lorebook", help="A World Info lorebook (.json) to show attached to it."),
    as_json: bool = typer.Option(False, "--json", help="Print the persona as one JSON object."),
) -> None:
    """Validate FILE and print the persona as Mirror will use it: the card's description, personality,
    scenario, greeting and example messages (macros substituted for the user), the Big Five, goals and
    biography (lorebook entries included)."""
    from mirror.cognition.persona import read_lorebook, read_persona, with_lorebook

    persona = read_persona(file)
    if lorebook is not None:
        persona = with_lorebook(persona, read_lorebook(lorebook), str(lorebook))
    view = persona.view(user_name)
    if as_json:
        typer.echo(json.dumps(view, ensure_ascii=False, indent=2))
        return
    print_persona(view)


def print_persona(view: dict[str, Any]) -> None:
    """The persona ``view`` as sections (the card's text shown as text, never read as markup)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(soft_wrap=True, highlight=False)
    console.print(Text.assemble((view["name"], "bold"), f"  ({view['source_format']}, version {view['version'][:12]})"))
    console.print(Text(f"as said to: {view['user_name']}  ({{{{user}}}} and <USER> become this name)", style="dim"))
    for title, key in (("description", "description"), ("personality", "personality"), ("scenario", "scenario"),
                       ("greeting", "greeting"), ("example messages", "example_messages"),
                       ("system prompt", "system_prompt"), ("post-history instructions", "post_history_instructions")):
        text = view[key].strip()
        console.print(Text(f"{title}:", style="bold cyan") + Text(" (none)" if not text else ""))
        if text:
            console.print(Text("\n".join(f"  {line}" for line in text.splitlines())))
    console.print(Text("big five:     ", style="bold cyan")
                  + Text(", ".join(f"{trait} {score:g}" for trait, score in view["big_five"].items())))
    console.print(Text("emotions:     ", style="bold cyan") + Text(", ".join(view["emotions"])))
    console.print(Text("relationship: ", style="bold cyan")
                  + Text(", ".join(f"{name} {value:g}" for name, value in view["relationship"].items()) or "(none)"))
    console.print(Text("hard goals (in order):", style="bold cyan") + Text("" if view["hard_goals"] else " (none)"))
    for index, goal in enumerate(view["hard_goals"], 1):
        console.print(Text(f"  {index}. {goal}"))
    console.print(Text("soft goals:", style="bold cyan") + Text("" if view["soft_goals"] else " (none)"))
    for goal in view["soft_goals"]:
        console.print(Text(f"  - {goal}"))
    console.print(Text("biography:", style="bold cyan") + Text("" if view["biography"] else " (none)"))
    for entry in view["biography"]:
        first, *rest = entry["text"].splitlines() or [""]
        console.print(Text("\n".join([f"  [{entry['importance']:.2f} {entry['source']}] {first}",
                                       *(f"      {line}" for line in rest)])))


@persona_app.command("export")
def persona_export(
    file: Path = typer.Argument(..., help="A card (.json or .png, V2 or V3) or a native .toml persona."),
    out: Path = typer.Option(..., "--out", help="Where to write the V3 card (overwritten)."),
    format: str = typer.Option("json", "--format", help="json, or png (the card's own image if it came in one)."),
) -> None:
    """Write FILE as a Character Card V3, Mirror's keys under `data.extensions.mirror`, every other field kept."""
    from mirror.cognition.persona import read_persona, write_card

    if format not in ("json", "png"):
        raise typer.BadParameter(f"{format!r} is not json or png", param_hint="'--format'")
    persona = read_persona(file)
    write_card(persona, out, format)
    typer.echo(f"wrote {out} ({persona.name}, V3 {format}, version {persona.version[:12]})")


@persona_app.command("push")
def persona_push(
    file: Path = typer.Argument(..., help="A card (.json or .png, V2 or V3) or a native .toml persona."),
    name: str = typer.Option(None, "--name", help="The name to store it under (default: from the character's name).",
                             callback=identifier("persona")),
    lorebook: Path = typer.Option(None, "--lorebook", help="A World Info lorebook (.json) to attach to it "
                                                           "(replacing the card's own)."),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
) -> None:
    """Validate FILE here, then store it in the tenant's persona store of the running stack
    (`POST /v1/personas`, then `POST /v1/personas/{name}/lorebook` with `--lorebook`); a
    conversation then names it (`mirror chat --persona NAME`, or the name its card shows)."""
    from mirror.cognition.persona import read_lorebook, read_persona

    persona = read_persona(file)  # the whole file is checked before anything is sent
    book = None if lorebook is None else read_lorebook(lorebook)
    with gateway_client(data, url, token) as client:
        stored = client.push_persona(file.read_bytes(), name=name, toml=file.suffix.lower() == ".toml")
        if lorebook is not None:
            assert book is not None  # read above
            stored = client.attach_lorebook(stored["name"], lorebook.read_bytes(), book_name=book.get("name") or None)
    typer.echo(f"stored {persona.name} as {stored['name']} (version {stored['version'][:12]})"
               + ("" if lorebook is None else f" with the lorebook {lorebook.name}"))


@persona_app.command("import-lorebook")
def persona_import_lorebook(
    persona: str = typer.Argument(..., help="A persona of the store: its stored name or the name its card shows."),
    file: Path = typer.Argument(..., help="A SillyTavern World Info lorebook (.json), e.g. Eldoria.json."),
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
) -> None:
    """Attach the lorebook FILE to PERSONA in the tenant's persona store of the running stack
    (`POST /v1/personas/{name}/lorebook`), replacing the lorebook it had; its entries become the
    persona's lorebook biography. Conversations already running keep the persona they recorded."""
    from mirror.cognition.persona import read_lorebook

    book = read_lorebook(file)  # checked here before anything is sent
    with gateway_client(data, url, token) as client:
        stored = client.attach_lorebook(persona, file.read_bytes(), book_name=book.get("name") or None)
    entries = sum(1 for entry in stored["persona"]["biography"] if entry["source"] == "lorebook")
    typer.echo(f"attached {file.name} to {stored['persona']['name']} ({stored['name']}): {entries} lorebook entries, "
               f"version {stored['version'][:12]}")


@persona_app.command("list")
def persona_list(
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
    as_json: bool = typer.Option(False, "--json", help="Print the names as one JSON list."),
) -> None:
    """The names in the tenant's persona store of the running stack (`GET /v1/personas`)."""
    with gateway_client(data, url, token) as client:
        names = client.personas()
    if as_json:
        typer.echo(json.dumps(names))
        return
    typer.echo("\n".join(names) if names else "no personas stored for this tenant (mirror persona push FILE)")
