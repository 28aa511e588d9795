"""A JetStream key-value bucket behind three calls: ``put``, ``get``, ``keys``.

For small shared records that are not events (the tenants' persona store): the bucket is a
stream of the same broker, on its disk (fsynced as the events are) and replicated as the event
stream is (:func:`~mirror.events.nats.jetstream.default_replicas` of the servers the bus knows).
On a bus that is not JetStream (the in-memory bus of tests) :func:`key_value` gives a dict of this
process instead. Keys are ``[-/_=.a-zA-Z0-9]`` (NATS's rule); callers validate their parts.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, BadRequestError, BucketNotFoundError, KeyNotFoundError, NoKeysError, NotFoundError

from .jetstream import default_replicas

__all__ = ["ERR_DELETE_NOT_PERMITTED", "KeyValue", "erase_keys", "key_value", "open_bucket"]

log = logging.getLogger(__name__)

ERR_DELETE_NOT_PERMITTED = 10057
"""JetStream's error code for a message delete on a stream that denies deletes."""


async def open_bucket(js: Any, bucket: str, *, replicas: int, description: str,
                      storage: StorageType = StorageType.FILE) -> Any:
    """The key-value bucket ``bucket``, made if missing with one revision per key and, unlike
    ``create_key_value``'s, *allowing* message deletes, so :func:`erase_keys` can overwrite a
    forgotten tenant's values (a stream's ``deny_delete`` cannot be lifted once set)."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    config = StreamConfig(name=f"KV_{bucket}", description=description, subjects=[f"$KV.{bucket}.>"],
                          allow_direct=True, allow_rollup_hdrs=True, deny_delete=False, discard=DiscardPolicy.NEW,
                          duplicate_window=120, max_consumers=-1, max_msgs=-1, max_msgs_per_subject=1,
                          num_replicas=replicas, storage=storage)
    with contextlib.suppress(BadRequestError):  # another process made it meanwhile
        await js.add_stream(config)
    return await js.key_value(bucket)


async def erase_keys(js: Any, bucket: str, keys: str) -> int:
    """Securely erase every stored revision of the keys matching ``keys`` (a NATS subject pattern
    under the bucket, ``acme.>``) from the bucket's stream, then purge them; how many messages.

    A key-value delete or purge only marks or drops the messages: their bytes stay in the
    stream's block file, as for the event stream (docs/operations.md, "Forgetting and
    retention"). ``STREAM.MSG.DELETE`` without ``no_erase`` overwrites each one first. A bucket
    made by ``create_key_value`` (an earlier release) denies deletes: its keys are purged only,
    and a warning says their bytes stay until the server retires the block."""
    stream, subjects = f"KV_{bucket}", f"$KV.{bucket}.{keys}"
    erased, seq = 0, 1
    while True:
        try:
            message = await js.get_msg(stream, seq=seq, subject=subjects, next=True)
        except (NotFoundError, BadRequestError):  # no more (or no such bucket yet)
            break
        try:
            await js.delete_msg(stream, message.seq)
        except APIError as exc:
            if exc.err_code != ERR_DELETE_NOT_PERMITTED:
                raise
            log.warning("bucket %s denies deletes (made by an earlier release): %s purged, not overwritten; "
                        "their bytes stay in its block file until nats-server retires it", bucket, keys)
            break
        erased, seq = erased + 1, message.seq + 1
    with contextlib.suppress(NotFoundError):
        await js.purge_stream(stream, subject=subjects)
    return erased


class KeyValue:
    """One bucket: a JetStream one when made with ``js``, else this process's dict."""

    def __init__(self, bucket: str, js: Any = None, servers: int = 1, description: str = "") -> None:
        self.bucket, self._js, self._servers, self._description = bucket, js, servers, description
        self._kv: Any = None
        self._local: dict[str, bytes] = {}

    async def _store(self) -> Any:
        if self._js is not None and self._kv is None:
            self._kv = await open_bucket(self._js, self.bucket, replicas=default_replicas(self._servers),
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

    async def erase(self, prefix: str) -> int:
        """Erase every key starting with ``prefix.`` (each stored revision overwritten: :func:`erase_keys`)."""
        kv = await self._store()
        if kv is None:
            gone = [key for key in self._local if key.startswith(f"{prefix}.")]
            for key in gone:
                del self._local[key]
            return len(gone)
        return await erase_keys(self._js, self.bucket, f"{prefix}.>")

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
