"""`mirror export` and `mirror import`: a conversation (or a whole tenant) as a portable archive.

Both go through a running stack's API (``GET …/export``, ``POST /v1/import``), so the archive is
read from the log after it has committed what the bus acknowledged, and an import takes the
bus like any writer. The archive's format is in docs/operations.md, "Export and import".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from mirror.cli.options import DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client, identifier

__all__ = ["export", "import_"]


def export(
    conversation: str | None = typer.Argument(None, callback=identifier("conversation"), show_default=False,
                                              help="The conversation (every branch); leave out with --tenant."),
    tenant: str | None = typer.Option(None, "--tenant", callback=identifier("tenant"),
                                      help="Export every conversation of TENANT (an admin token)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here instead of standard output."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Write CONVERSATION (or, with --tenant, a whole tenant) as an archive: a tar with every branch's
    events, the persona cards, the prompt sets and a manifest of SHA-256 digests.
    `mirror export ID > ID.tar`."""
    if (conversation is None) == (tenant is None):
        raise typer.BadParameter("name a CONVERSATION or --tenant TENANT (one of the two)")
    if output is None and sys.stdout.isatty():
        raise typer.BadParameter("the archive is binary: redirect standard output to a file, or give --output")
    with gateway_client(data, url, token) as client:
        archive = client.export(conversation, tenant=tenant)
    if output is not None:
        output.write_bytes(archive)
    else:
        sys.stdout.buffer.write(archive)
        sys.stdout.flush()


def import_(
    archive: Path = typer.Argument(..., exists=True, dir_okay=False, show_default=False, help="An export's archive."),
    tenant: str | None = typer.Option(None, "--tenant", callback=identifier("tenant"),
                                      help="Import into TENANT (another tenant than the token's takes an admin token)."),
    force: bool = typer.Option(False, "--force", help="Replace the tombstone of a forgotten conversation."),
    as_json: bool = typer.Option(False, "--json", help="Print the result's JSON."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Import ARCHIVE (from `mirror export`): every conversation in it, appended through the bus and
    committed by the log before this returns. Refused, with nothing appended, when the archive
    does not match its digests or a conversation exists already (or was forgotten: --force)."""
    with gateway_client(data, url, token) as client:
        result = client.import_archive(archive.read_bytes(), tenant=tenant, force=force)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(f"imported {result['events']} event(s) of {len(result['conversations'])} conversation(s) "
                   f"into tenant {result['tenant']}")
