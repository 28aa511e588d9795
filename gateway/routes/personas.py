"""The persona mind over HTTP: the tenant's persona store, a conversation's choice of mind, and
the character's state.

- ``POST /v1/personas[?name=NAME]``: store a persona — the body is a Character Card V2/V3 as JSON
  or PNG, or a native persona as JSON (``Content-Type: application/toml`` for TOML); the whole
  file is validated (400 naming the key otherwise); 201 with its name and version.
- ``GET /v1/personas``: the tenant's personas; ``GET /v1/personas/{name}[?user_name=NAME]``: one,
  as the cycle uses it (the card's text with its macros substituted for that user, the greeting).
- ``POST /v1/personas/{name}/lorebook[?book_name=NAME]``: attach a lorebook — a SillyTavern World
  Info file (or a bare ``character_book``) as JSON — to a stored persona, replacing the lorebook it
  had; 200 with the persona as the cycle now uses it.
- ``POST /v1/conversations/{id}`` with ``{"mind": "persona", "persona": NAME | CARD, "order": …,
  "user_name": …}``: fix a new conversation's mind before its first turn (a first turn can do the
  same with the same fields); the same choice again is a no-op, another one a 409. Choosing a
  persona appends its card's greeting (``first_mes``) as the conversation's first assistant message.
- ``GET /v1/conversations/{id}/persona[?at=SEQ]``: emotion, relationship, goals (the active hard
  goal, the soft goals), the last appraisal, plan and interpretation, the greeting and the user's
  name — now from the live conversation, or at any seq from the log (time travel).

A persona is named by its stored name or by the name its card shows (``Seraphina`` for the card
stored as ``seraphina``; :meth:`~mirror.gateway.personas.PersonaStore.find`).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel

from mirror.cognition.persona import Persona, from_document, lorebook_from_bytes, persona_from_bytes, with_lorebook
from mirror.cognition.persona.choice import MindChoice
from mirror.events.ids import StreamKey
from mirror.gateway.personas import persona_slug
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, key_of
from mirror.projections.snapshot import state_from_snapshot

__all__ = ["MindIn", "mind_choice", "router"]

router = APIRouter()

MAX_PERSONA_BYTES = 4 * 1024 * 1024
"""A card PNG carries an image: 4 MB is plenty, and bounds what one upload can cost."""


class MindIn(BaseModel):
    mind: Literal["mirror", "persona"] | None = None
    """The conversation's mind: fixed by its first turn (or this call); ``mirror`` when never given."""
    persona: str | dict[str, Any] | None = None
    """For ``persona``: a name from the tenant's persona store, or a card (V2/V3 JSON) or native persona."""
    order: Literal["appraisal_first", "plan_first"] | None = None
    """Which of plan and appraisal comes first (default appraisal first)."""
    user_name: str | None = None
    """For ``persona``: who the character talks to — what the card's ``{{user}}`` becomes (default ``User``)."""


async def _persona(runtime: GatewayRuntime, tenant: str, persona: str | dict[str, Any]) -> Persona:
    if isinstance(persona, dict):
        return from_document(persona, "request body's persona", "json")
    _, found = await runtime.personas.find(await runtime.bus(), tenant, persona)
    return found


async def mind_choice(runtime: GatewayRuntime, tenant: str, body: MindIn) -> MindChoice | None:
    """The choice a request's ``mind`` / ``persona`` / ``order`` make (``None``: none asked); 400/404 otherwise."""
    if body.mind is None and body.persona is None and body.order is None and body.user_name is None:
        return None
    mind = body.mind or ("persona" if body.persona is not None else "mirror")
    persona = None if body.persona is None else await _persona(runtime, tenant, body.persona)
    return MindChoice(mind, persona, body.order or "appraisal_first", body.user_name)


@router.post("/v1/personas", status_code=201)
async def post_persona(request: Request, owner: Tenant, runtime: Runtime,
                       name: str | None = Query(None, description="the name to store it under (default: from the character's name)")) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        raise HTTPException(400, "the body is empty: send a character card (JSON or PNG) or a persona (JSON or TOML)")
    if len(raw) > MAX_PERSONA_BYTES:
        raise HTTPException(413, f"the persona is {len(raw)} bytes; the limit is {MAX_PERSONA_BYTES}")
    toml = "toml" in request.headers.get("content-type", "")
    persona = persona_from_bytes(raw, "request body", toml=toml)
    stored = name or persona_slug(persona.name)
    await runtime.personas.put(await runtime.bus(), owner, stored, persona)
    return {"name": stored, "version": persona.version, "persona": persona.view()}


@router.get("/v1/personas")
async def list_personas(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    names = await runtime.personas.names(await runtime.bus(), owner)
    return {"personas": names}


@router.get("/v1/personas/{name}")
async def get_persona(name: str, owner: Tenant, runtime: Runtime,
                      user_name: str | None = Query(None, description="the user the card's {{user}} names (default User)")
                      ) -> dict[str, Any]:
    stored, persona = await runtime.personas.find(await runtime.bus(), owner, name)
    return {"name": stored, "version": persona.version, "persona": persona.view(user_name)}


@router.post("/v1/personas/{name}/lorebook")
async def attach_lorebook(name: str, request: Request, owner: Tenant, runtime: Runtime,
                          book_name: str | None = Query(None, description="the lorebook's name (default: the file's own, else none)")
                          ) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        raise HTTPException(400, "the body is empty: send a World Info lorebook (JSON)")
    if len(raw) > MAX_PERSONA_BYTES:
        raise HTTPException(413, f"the lorebook is {len(raw)} bytes; the limit is {MAX_PERSONA_BYTES}")
    book = lorebook_from_bytes(raw, "request body", book_name or "")
    bus = await runtime.bus()
    stored, persona = await runtime.personas.find(bus, owner, name)
    attached = with_lorebook(persona, book, "request body")
    await runtime.personas.put(bus, owner, stored, attached)
    return {"name": stored, "version": attached.version, "persona": attached.view()}


@router.post("/v1/conversations/{conversation}")
async def choose_mind(conversation: str, body: MindIn, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    key = key_of(owner, conversation)
    choice = await mind_choice(runtime, owner, body)
    if choice is None:
        raise HTTPException(400, "give mind (mirror or persona), and for persona a persona")
    summary = await runtime.ask(key, lambda handle: handle.choose(choice))
    return {"id": conversation, **{k: v for k, v in summary.as_dict().items() if k not in ("tenant", "conversation")}}


@router.get("/v1/conversations/{conversation}/persona")
async def get_persona_state(conversation: str, owner: Tenant, runtime: Runtime,
                            at: int | None = Query(None, ge=0, description="the seq to look at (default: now)")) -> dict[str, Any]:
    key = key_of(owner, conversation)
    last_seq = await runtime.existing(key)
    if at is None:
        state = state_from_snapshot(await runtime.ask(key, lambda handle: handle.state_bytes()))
    else:
        state = await (await runtime.history(owner)).state_at(StreamKey(owner, conversation), at, last=last_seq)
    if state.persona is None:
        raise HTTPException(404, f"conversation {conversation!r} is not a persona (its mind is mirror)"
                                 if state.turn_count or at is None or at >= last_seq else
                                 f"conversation {conversation!r} had no persona at seq {at}")
    return {"id": conversation, "seq": state.last_seq, "turns": state.turn_count, **state.persona.view(),
            "greeting": state.greeting}
