"""The tenant's persona store: characters by name, shared by every gateway of the deployment.

Kept in a NATS JetStream key-value bucket (:data:`BUCKET`, one key ``<tenant>.<name>`` per persona,
the card as V3 JSON), so every gateway on every machine sees the same store, it lives on the
broker's disk with the events (fsynced as they are) and is replicated like the stream. On a bus
that is not JetStream (the in-memory infrastructure of tests) it is a dict of this process.

A persona's name is an identifier (``[A-Za-z0-9_-]``, as conversation ids): given with the upload,
or made from the character's name (``Wren Halloway`` → ``wren-halloway``). Storing a persona under a
name already taken replaces it: conversations are not affected (each recorded its persona's
content in its own ``persona`` event).

A request names a persona by its stored name or by the name its card shows
(:meth:`PersonaStore.find`): ``Seraphina`` finds the card stored as ``seraphina``, ``Wren
Halloway`` the one stored as ``wren-halloway`` — case-insensitively, and only when exactly one
card shows that name (:class:`~mirror.gateway.errors.AmbiguousPersona` names the candidates).
"""

from __future__ import annotations

import json
import re

from mirror.cognition.persona import Persona, from_document, to_card
from mirror.events.bus import EventBus
from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import validate_identifier
from mirror.events.nats.key_value import KeyValue, key_value
from mirror.gateway.errors import AmbiguousPersona, UnknownPersona

__all__ = ["BUCKET", "PersonaStore", "persona_slug"]

BUCKET = "mirror_personas"


def persona_slug(name: str) -> str:
    """An identifier made from a character's name: lower case, runs of other characters as ``-``."""
    slug = re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")[:64]
    return slug or "persona"


class PersonaStore:
    """``put`` / ``get`` / ``names`` of a tenant's personas (see the module docstring)."""

    def __init__(self) -> None:
        self._bucket: KeyValue | None = None

    def _of(self, bus: EventBus) -> KeyValue:
        if self._bucket is None:
            self._bucket = key_value(bus, BUCKET, "Mirror: each tenant's personas (V3 cards)")
        return self._bucket

    @staticmethod
    def _key(tenant: str, name: str) -> str:
        return f"{tenant}.{validate_identifier('persona', name)}"

    async def put(self, bus: EventBus, tenant: str, name: str, persona: Persona) -> None:
        value = json.dumps(to_card(persona), ensure_ascii=False, sort_keys=True).encode("utf-8")
        await self._of(bus).put(self._key(tenant, name), value)

    async def get(self, bus: EventBus, tenant: str, name: str) -> Persona | None:
        value = await self._of(bus).get(self._key(tenant, name))
        return None if value is None else from_document(json.loads(value), f"persona store {name!r}", "json")

    async def find(self, bus: EventBus, tenant: str, name: str) -> tuple[str, Persona]:
        """The persona ``name`` names and its stored name: the stored name itself, else the one card
        whose name (or the slug of it) is ``name``, ignoring case. :class:`UnknownPersona` when none
        matches, :class:`AmbiguousPersona` when several do."""
        try:
            found = await self.get(bus, tenant, name)
        except InvalidIdentifier:  # "Wren Halloway": not a stored name, maybe a card's
            found = None
        if found is not None:
            return name, found
        wanted = name.strip().casefold()
        matches = []
        for stored in sorted(await self.names(bus, tenant)):
            persona = await self.get(bus, tenant, stored)
            if persona is not None and wanted in (persona.name.strip().casefold(), stored.casefold()):
                matches.append((stored, persona))
        if not matches:
            raise UnknownPersona(name)
        if len(matches) > 1:
            raise AmbiguousPersona(name, [f"{stored} ({persona.name})" for stored, persona in matches])
        return matches[0]

    async def erase(self, bus: EventBus, tenant: str) -> int:
        """Erase every persona of ``tenant``, every stored revision overwritten (a forgotten tenant); how many messages."""
        return await self._of(bus).erase(validate_identifier("tenant", tenant))

    async def names(self, bus: EventBus, tenant: str) -> list[str]:
        prefix = f"{tenant}."
        return [key[len(prefix):] for key in await self._of(bus).keys() if key.startswith(prefix)]
