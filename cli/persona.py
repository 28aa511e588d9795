"""``mirror persona show|export``: check a persona file and see what Mirror will use, or write it as a V3 card.

A persona file is a Character Card V2/V3 (JSON, or a PNG carrying it) or a native TOML file; the
schema is in docs/persona.md. Both commands validate the whole file first: a wrong key is
``mirror: error: persona file FILE: KEY: ...`` and exit status 2, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

# The commands import cognition (~0.4 s) in their bodies: see app.py.
__all__ = ["persona_app"]

persona_app = typer.Typer(help="Persona files (character cards V2/V3, JSON or PNG, or TOML): check, show, export.",
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
