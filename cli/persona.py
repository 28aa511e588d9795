"""``mirror persona show|export|push|list``: check a persona file and see what Mirror will use, write it
as a V3 card, or store it in (and list) the tenant's persona store of a running stack.

A persona file is a Character Card V2/V3 (JSON, or a PNG carrying it) or a native TOML file; the
schema is in docs/persona.md. Both commands validate the whole file first: a wrong key is
``mirror: error: persona file FILE: KEY: ...`` and exit status 2, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from mirror.cli.options import DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client, identifier

# The commands import cognition (~0.4 s) in their bodies: see app.py.
__all__ = ["persona_app"]

persona_app = typer.Typer(help="Persona files (character cards V2/V3, JSON or PNG, or TOML): check, show, export; "
                               "the tenant's persona store: push, list.",
                          rich_markup_mode="markdown")


@persona_app.command("show")
def persona_show(
    file: Path = typer.Argument(..., help="A card (.json or .png, V2 or V3) or a native .toml persona."),
    as_json: bool = typer.Option(False, "--json", help="Print the persona as one JSON object."),
) -> None:
    """Validate FILE and print the persona as Mirror will use it (name, Big Five, goals, biography, ...)."""
    from mirror.cognition.persona import read_persona

    persona = read_persona(file)
    view = persona.view()
    if as_json:
        typer.echo(json.dumps(view, ensure_ascii=False, indent=2))
        return
    typer.echo(f"{persona.name}  ({persona.source_format}, version {persona.version[:12]})")
    typer.echo("big five:     " + ", ".join(f"{trait} {score:g}" for trait, score in persona.big_five.items()))
    typer.echo("emotions:     " + ", ".join(persona.emotions))
    typer.echo("relationship: " + (", ".join(f"{name} {value:g}" for name, value in persona.relationship.items())
                                   or "(none)"))
    typer.echo("hard goals (in order):" + ("" if persona.hard_goals else " (none)"))
    for index, goal in enumerate(persona.hard_goals, 1):
        typer.echo(f"  {index}. {goal}")
    typer.echo("soft goals:" + ("" if persona.soft_goals else " (none)"))
    for goal in persona.soft_goals:
        typer.echo(f"  - {goal}")
    typer.echo("biography:" + ("" if persona.biography else " (none)"))
    for entry in persona.biography:
        typer.echo(f"  [{entry.importance:.2f} {entry.source}] {entry.text}")


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
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    token: str = GATEWAY_TOKEN,
) -> None:
    """Validate FILE here, then store it in the tenant's persona store of the running stack
    (`POST /v1/personas`); a conversation then names it (`mirror chat --persona NAME`)."""
    from mirror.cognition.persona import read_persona

    persona = read_persona(file)  # the whole file is checked before anything is sent
    with gateway_client(data, url, token) as client:
        stored = client.push_persona(file.read_bytes(), name=name, toml=file.suffix.lower() == ".toml")
    typer.echo(f"stored {persona.name} as {stored['name']} (version {stored['version'][:12]})")


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
