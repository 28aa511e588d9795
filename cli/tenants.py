"""``mirror tenants add|list|revoke``: the bearer tokens of a data directory's tenants.

They edit ``<data>/tenants.json`` directly (hashes only), which a running gateway re-reads,
so they work with or without a stack up.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mirror.cli.options import DATA_DIR, TENANT

# The commands import the registry in their bodies (~10 ms that `mirror --help` need not pay): see app.py.
__all__ = ["tenants_app"]

tenants_app = typer.Typer(help="Tenants and their bearer tokens (stored hashed).", rich_markup_mode="markdown")


@tenants_app.command("add")
def tenants_add(tenant: str = TENANT, data: Path = DATA_DIR) -> None:
    """Create a bearer token for TENANT (shown once; only its hash is stored)."""
    from mirror.gateway.tenants import TenantRegistry

    typer.echo(TenantRegistry(data / "tenants.json").add(tenant))


@tenants_app.command("list")
def tenants_list(data: Path = DATA_DIR) -> None:
    """Tenants and their tokens' state (never the tokens)."""
    from mirror.gateway.tenants import TenantRegistry

    for record in TenantRegistry(data / "tenants.json").list():
        state = "revoked" if record.revoked else "active"
        typer.echo(f"{record.tenant}\t{state}\ttoken sha256 {record.token_hash[:12]}…")


@tenants_app.command("revoke")
def tenants_revoke(tenant: str = TENANT, data: Path = DATA_DIR) -> None:
    """Revoke every token of TENANT; a running gateway refuses them at once."""
    from mirror.gateway.tenants import TenantRegistry

    count = TenantRegistry(data / "tenants.json").revoke(tenant)
    typer.echo(f"revoked {count} token(s) of {tenant}")
