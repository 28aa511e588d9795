"""Export and import: ``GET /v1/conversations/{id}/export``, ``GET /v1/tenants/{tenant}/export``
(admin) and ``POST /v1/import``.

An export is the archive of :mod:`mirror.events.archive` (a tar: the events of every branch as
the codec wrote them, the persona cards, the prompt sets the events name where this stack has
them, a manifest with counts and SHA-256 digests), read after the log has committed what the
bus acknowledged. An import checks the whole archive first (a 400 naming the member that is
wrong, nothing appended), refuses a conversation that exists or was forgotten (409; ``force``
lifts a finished tombstone), then appends through the bus and answers once the log has committed
it (:mod:`mirror.events.transfer`). A tenant's own token exports its conversations and imports
into its own tenant; a whole tenant's export, and an import into another tenant, take an admin
token (``mirror tenants add --admin``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response

from mirror.actors.settings import settings_prompts
from mirror.cognition.prompts import default_prompt_set
from mirror.events.archive import read_archive, write_archive
from mirror.events.ids import validate_identifier
from mirror.events.transfer import ExportedConversations, export_conversations, import_archive
from mirror.gateway.errors import UnknownConversation
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, key_of

__all__ = ["ARCHIVE_MEDIA_TYPE", "router"]

router = APIRouter()

ARCHIVE_MEDIA_TYPE = "application/x-tar"


def _token(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _is_admin(request: Request, runtime: Runtime, owner: Tenant) -> bool:
    """Whether the request's (valid) token has the admin scope."""
    return runtime.registry.is_admin(_token(request))


Admin = Annotated[bool, Depends(_is_admin)]


def _archive(runtime: GatewayRuntime, tenant: str, found: ExportedConversations) -> Response:
    known = {prompts.version: dict(prompts.templates)
             for prompts in (settings_prompts(runtime.settings.runtime), default_prompt_set())}
    body = write_archive(tenant, found.conversations, personas=found.personas,
                         prompt_sets={version: known[version] for version in found.prompt_sets if version in known})
    return Response(body, media_type=ARCHIVE_MEDIA_TYPE)


@router.get("/v1/conversations/{conversation}/export", response_class=Response)
async def export_conversation(conversation: str, owner: Tenant, runtime: Runtime) -> Response:
    # Every branch of the conversation, as a tar archive (docs/http-api.md, "Export and import").
    key = key_of(owner, conversation)
    await runtime.existing(key)  # 404 for one that never was, 410 for a forgotten one
    await runtime.settled_tenant(owner)  # every branch committed, not only main
    found = await export_conversations(await runtime.log(owner), owner, [conversation])
    if not found.conversations:
        raise UnknownConversation(conversation)
    return _archive(runtime, owner, found)


@router.get("/v1/tenants/{tenant}/export", response_class=Response)
async def export_tenant(tenant: str, admin: Admin, runtime: Runtime) -> Response:
    # Every conversation of the tenant (admin scope): the tenant's backup.
    if not admin:
        raise HTTPException(403, "exporting a whole tenant takes an admin token (mirror tenants add --admin)")
    validate_identifier("tenant", tenant)
    await runtime.settled_tenant(tenant)
    return _archive(runtime, tenant, await export_conversations(await runtime.log(tenant), tenant, None))


@router.post("/v1/import")
async def import_conversations(request: Request, owner: Tenant, admin: Admin, runtime: Runtime,
                               tenant: str | None = Query(None, description="Import into this tenant (admin; "
                                                          "default: your own, or the archive's for an admin)."),
                               force: bool = Query(False, description="Replace a finished tombstone.")) -> dict[str, Any]:
    # The body is an archive from an export; answered once the log has committed every event.
    if tenant is not None:
        validate_identifier("tenant", tenant)
        if tenant != owner and not admin:
            raise HTTPException(403, f"importing into tenant {tenant} takes an admin token; without one, "
                                     "leave tenant out to import into your own")
    archive = read_archive(await request.body())
    target = tenant if tenant is not None else (archive.tenant if admin else owner)
    imported = await import_archive(await runtime.bus(), await runtime.log(target), archive, tenant=target,
                                    force=force, commit_timeout_s=runtime.settings.actor_timeout_s)
    return {**imported.as_dict(), "prompt_sets": sorted(archive.prompt_sets), "personas": sorted(archive.personas)}
