"""The tenant's persona store: characters by name, shared by every gateway of the deployment.

Kept in a NATS JetStream key-value bucket (:data:`BUCKET`, one key ``<tenant>.<name>`` per persona,
the card as V3 JSON), so every gateway on every machine sees the same store, it lives on the
broker's disk with the events (fsynced as they are) and is replicated like the stream. On a bus
that is not JetStream (the in-memory infrastructure of tests) it is a dict of this process.

A persona's name is an identifier (``[A-Za-z0-9_-]``, as conversation ids): given with the upload,
or made from the character's name (``Wren Halloway`` → ``wren-halloway``). Storing a persona under a
name already taken replaces it: conversations are not affected (each recorded its persona's
content in its own ``persona`` event).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mirror.cognition.persona import Persona, from_document, to_card
from mirror.events.bus import EventBus
from mirror.events.ids import validate_identifier

__all__ = ["BUCKET", "PersonaStore", "persona_slug"]

BUCKET = "mirror_personas"


def persona_slug(name: str) -> str:
    """An identifier made from a character's name: lower case, runs of other characters as ``-``."""
    slug = re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")[:64]
    return slug or "persona"


class PersonaStore:
    """``put`` / ``get`` / ``names`` of a tenant's personas (see the module docstring)."""

    def __init__(self) -> None:
        self._kv: Any = None
        self._local: dict[str, bytes] = {}

    async def _bucket(self, bus: EventBus) -> Any:
        js = getattr(bus, "js", None)
        if js is None:
            return None
        if self._kv is None:
            from mirror.events.nats.jetstream import default_replicas

            servers = len(getattr(getattr(bus, "nc", None), "server_urls", ()) or (1,))
            self._kv = await js.create_key_value(bucket=BUCKET, history=1, replicas=default_replicas(servers),
                                                 description="Mirror: each tenant's personas (V3 cards)")
        return self._kv

    @staticmethod
    def _key(tenant: str, name: str) -> str:
        return f"{tenant}.{validate_identifier('persona', name)}"

    async def put(self, bus: EventBus, tenant: str, name: str, persona: Persona) -> None:
        key = self._key(tenant, name)
        value = json.dumps(to_card(persona), ensure_ascii=False, sort_keys=True).encode("utf-8")
        kv = await self._bucket(bus)
        if kv is None:
            self._local[key] = value
        else:
            await kv.put(key, value)

    async def get(self, bus: EventBus, tenant: str, name: str) -> Persona | None:
        from nats.js.errors import KeyNotFoundError

        key = self._key(tenant, name)
        kv = await self._bucket(bus)
        if kv is None:
            value = self._local.get(key)
        else:
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                return None
            value = entry.value
        if not value:
            return None
        return from_document(json.loads(value), f"persona store {name!r}", "json")

    async def names(self, bus: EventBus, tenant: str) -> list[str]:
        from nats.js.errors import NoKeysError

        prefix = f"{tenant}."
        kv = await self._bucket(bus)
        if kv is None:
            keys = list(self._local)
        else:
            try:
                keys = await kv.keys()  # every tenant's: a few hundred keys at most; filtered below
            except NoKeysError:
                keys = []
        return sorted(key[len(prefix):] for key in keys if key.startswith(prefix))
