"""A JetStream key-value bucket behind three calls: ``put``, ``get``, ``keys``.

For small shared records that are not events (the tenants' persona store): the bucket is a
stream of the same broker, on its disk (fsynced as the events are) and replicated as the event
stream is (:func:`~mirror.events.nats.jetstream.default_replicas` of the servers the bus knows).
On a bus that is not JetStream (the in-memory bus of tests) :func:`key_value` gives a dict of this
process instead. Keys are ``[-/_=.a-zA-Z0-9]`` (NATS's rule); callers validate their parts.
"""

from __future__ import annotations

from typing import Any

from nats.js.errors import KeyNotFoundError, NoKeysError

from .jetstream import default_replicas

__all__ = ["KeyValue", "key_value"]


class KeyValue:
    """One bucket: a JetStream one when made with ``js``, else this process's dict."""

    def __init__(self, bucket: str, js: Any = None, servers: int = 1, description: str = "") -> None:
        self.bucket, self._js, self._servers, self._description = bucket, js, servers, description
        self._kv: Any = None
        self._local: dict[str, bytes] = {}

    async def _store(self) -> Any:
        if self._js is not None and self._kv is None:
            self._kv = await self._js.create_key_value(bucket=self.bucket, history=1,
                                                       replicas=default_replicas(self._servers),
                                                       description=self._description)
        return self._kv

    async def put(self, key: str, value: bytes) -> None:
        kv = await self._store()
        if kv is None:
            self._local[key] = value
        else:
            await kv.put(key, value)

    async def get(self, key: str) -> bytes | None:
        kv = await self._store()
        if kv is None:
            return self._local.get(key)
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:  # deleted keys too (KeyDeletedError is one)
            return None
        return entry.value or None

    async def keys(self) -> list[str]:
        kv = await self._store()
        if kv is None:
            return sorted(self._local)
        try:
            return sorted(await kv.keys())
        except NoKeysError:
            return []


def key_value(bus: object, bucket: str, description: str = "") -> KeyValue:
    """The bucket ``bucket`` on ``bus``'s broker (a JetStream bus), or a process-local one."""
    js = getattr(bus, "js", None)
    servers = len(getattr(getattr(bus, "nc", None), "server_urls", None) or (1,))
    return KeyValue(bucket, js, servers, description)
