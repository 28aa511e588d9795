"""JetStream adapter of the shared-counters port: a key-value bucket changed by compare-and-set.

JetStream's key-value store has no atomic increment, but every key has a revision (the stream
sequence of its last write) and ``update(key, value, last=revision)`` lands only if the key is
still at that revision. :meth:`JetStreamCounters.change` reads the value and its revision, runs
the caller's pure ``step``, and writes with ``last=revision``; a writer that lost the race (another
gateway wrote first) reads again and runs ``step`` on the newer value. No change is ever lost or
applied twice, however many gateways write the key.

The last value and revision this process wrote or read are remembered, so a change first tries
the write on them without a read: with one gateway writing a tenant's key (the common case) a
change is one round trip, and a stale guess costs one refused write and one read. A step that
writes nothing is only trusted on a fresh read (a stale value could refuse what the current one allows).

Changes of one key from one process take turns (a lock per key): racing itself would only make
all but one of its own writers lose each round, so a burst of N changes could need N rounds for
its last one. Across processes a loss is followed by a short random pause, so two gateways that
lost to each other do not retry in step.

The bucket (:data:`BUCKET`) is on file storage, with one revision kept per key and replicated as
the event stream is, so counts survive the broker's and every gateway's restart.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import StorageType

from mirror.events.counters import Step
from mirror.events.errors import BusError, CounterContended

from .jetstream import TRANSIENT_ERRORS, default_replicas
from .key_value import erase_keys, open_bucket

__all__ = ["BUCKET", "CHANGE_ATTEMPTS", "JetStreamCounters"]

T = TypeVar("T")

BUCKET = "mirror_limits"
CHANGE_ATTEMPTS = 64
"""Compare-and-set tries of one change before :class:`CounterContended`: each loss means another
writer's change landed (one process's own changes of a key take turns), so running out takes that
many other gateways writing the key at once."""
LOST_PAUSE_S = 0.002
"""The upper bound of the random pause after a lost write, times the number of losses so far."""


class JetStreamCounters:
    """The port on the bucket :data:`BUCKET` of ``js``'s broker (made on first use)."""

    def __init__(self, js: Any, *, servers: int = 1, bucket: str = BUCKET) -> None:
        self.bucket = bucket
        self._js = js
        self._servers = servers
        self._kv: Any = None
        self._opening = asyncio.Lock()
        self._turns: dict[str, asyncio.Lock] = {}
        """One lock per key changed from this process (keys are tenants × limits: bounded)."""
        self._seen: dict[str, tuple[int, bytes]] = {}
        """Each key's last value and revision as this process saw them: a guess, checked by the write."""

    async def _store(self) -> Any:
        if self._kv is None:
            async with self._opening:
                if self._kv is None:
                    self._kv = await self._open()
        return self._kv

    async def _open(self) -> Any:
        return await open_bucket(self._js, self.bucket, replicas=default_replicas(self._servers), storage=StorageType.FILE,
                                 description="Mirror: each tenant's use of its limits (requests, tokens, turns, conversations)")

    async def _fresh(self, kv: Any, key: str) -> tuple[int, bytes | None]:
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:  # deleted keys too
            self._seen.pop(key, None)
            return 0, None
        value = entry.value or b""
        self._seen[key] = (entry.revision, value)
        return entry.revision, value

    async def read(self, key: str) -> bytes | None:
        try:
            return (await self._fresh(await self._store(), key))[1]
        except TRANSIENT_ERRORS as exc:
            raise BusError(f"reading the shared counter {key!r} failed: {type(exc).__name__}: {exc}") from exc

    async def change(self, key: str, step: Step[T]) -> T:
        try:
            kv = await self._store()
            turn = self._turns.get(key)
            if turn is None:  # not setdefault: that would make a lock on every change
                turn = self._turns[key] = asyncio.Lock()
            async with turn:
                return await self._change(kv, key, step)
        except TRANSIENT_ERRORS as exc:
            raise BusError(f"changing the shared counter {key!r} failed: {type(exc).__name__}: {exc}") from exc

    async def _change(self, kv: Any, key: str, step: Step[T]) -> T:
        for attempt in range(CHANGE_ATTEMPTS):
            guessed = self._seen.get(key)
            revision, current = guessed if guessed is not None else await self._fresh(kv, key)
            new, outcome = step(current)
            if new is None:
                if guessed is None:
                    return outcome
                self._seen.pop(key, None)  # decided on a guess: decide again on the current value
                continue
            try:
                written = await kv.update(key, new, last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                self._seen.pop(key, None)  # another writer moved it on: read and step again
                await asyncio.sleep(random.uniform(0, LOST_PAUSE_S * (attempt + 1)))
                continue
            self._seen[key] = (written, new)
            return outcome
        raise CounterContended(key, CHANGE_ATTEMPTS)

    async def keys(self) -> list[str]:
        kv = await self._store()
        try:
            return sorted(await kv.keys())
        except nats.js.errors.NoKeysError:
            return []
        except TRANSIENT_ERRORS as exc:
            raise BusError(f"listing the shared counters failed: {type(exc).__name__}: {exc}") from exc

    async def erase(self, key: str) -> None:
        await self._store()
        self._seen.pop(key, None)
        try:
            await erase_keys(self._js, self.bucket, key)
        except TRANSIENT_ERRORS as exc:
            raise BusError(f"erasing the shared counter {key!r} failed: {type(exc).__name__}: {exc}") from exc
