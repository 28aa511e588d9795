"""Crypto-shredding of the stream's copy: each message sealed with its conversation's data key.

Why: a JetStream purge leaves a message's bytes in nats-server's block file until the block is
retired (after ~8 MB more traffic), and a clustered stream's Raft logs hold copies that no
message delete reaches. The ingester compacts (purges) the stream as it commits, so by the
time a conversation is forgotten most of its messages can no longer be erased one by one. If
every message is ciphertext under a key of its own conversation, erasing that one key makes
every such copy unreadable, wherever it lies (docs/operations.md, "Forgetting and retention").

- **The key**: 32 random bytes and an 8-byte key id per conversation (all its branches), made
  by the first writer (:meth:`DataKeys.for_writing`: create-if-absent, so two writers racing
  agree on one), kept in the stream ``<stream>_KEYS`` (one subject per conversation). A key is
  written once and never updated, so no older copy of it is ever purged and left behind; erasing
  it (:meth:`DataKeys.erase`) is JetStream's secure erase of that one message (overwritten by the
  server). Each process caches the keys it used.
- **The seal** (:class:`DataKey`): ``0xc1`` (a byte msgpack never uses, so a sealed message is
  never mistaken for a codec record, and a stream with plain messages from before still reads),
  the format (1), the key id, a 12-byte nonce, AES-256-GCM's ciphertext and tag. The nonce is a
  keyed BLAKE2b of the plaintext (a synthetic IV, as in SIV): the same event sealed twice gives
  the same bytes, so a retried publish, a duplicate ack and a divergent copy are still told
  apart by comparing bytes (:mod:`.jetstream`), and two different plaintexts never share a
  nonce under one key (short of a 96-bit collision). It reveals only whether two messages are
  byte-identical, which the event ids already tell.
- **The log keeps plaintext**: a forget rewrites the DuckDB file fresh (:mod:`mirror.events.duckdb._erasure`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from mirror.events.errors import BusError, DataKeyErased
from mirror.events.nats._publisher import HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE

SEALED = 0xC1
"""First byte of a sealed message: never the first byte of a msgpack record (the codec's)."""
SEAL_FORMAT = 1
KEY_ID_BYTES = 8
NONCE_BYTES = 12
KEY_BYTES = 32
HEADER_BYTES = 2 + KEY_ID_BYTES + NONCE_BYTES
"""Mark, format, key id, nonce: with GCM's 16-byte tag, a sealed message is 38 bytes longer."""
_NONCE_PERSON = b"mirror-nonce"
DEFAULT_CACHE = 65_536
"""Data keys a process keeps in memory (least recently used go first; ~200 bytes each)."""


def is_sealed(data: bytes) -> bool:
    return bool(data) and data[0] == SEALED


def key_id_of(sealed: bytes) -> bytes:
    return sealed[2:2 + KEY_ID_BYTES]


@dataclass(frozen=True, slots=True)
class DataKey:
    """One conversation's data key: seals and opens its messages."""

    key_id: bytes
    secret: bytes

    @classmethod
    def new(cls) -> DataKey:
        return cls(os.urandom(KEY_ID_BYTES), AESGCM.generate_key(bit_length=KEY_BYTES * 8))

    @classmethod
    def from_record(cls, record: bytes) -> DataKey:
        if len(record) != 1 + KEY_ID_BYTES + KEY_BYTES or record[0] != SEAL_FORMAT:
            raise BusError(f"a data key record of {len(record)} bytes, format {record[:1]!r}: not one this build "
                           "writes (1 + 8 + 32 bytes, format 1); is the key stream shared with another program?")
        return cls(record[1:1 + KEY_ID_BYTES], record[1 + KEY_ID_BYTES:])

    def record(self) -> bytes:
        return bytes([SEAL_FORMAT]) + self.key_id + self.secret

    def sealer(self) -> Sealer:
        return Sealer(self)


class Sealer:
    """A data key with its cipher and nonce key made once (what the cache holds)."""

    __slots__ = ("_aead", "_nonce_key", "_prefix", "key")

    def __init__(self, key: DataKey) -> None:
        self.key = key
        self._aead = AESGCM(key.secret)
        self._nonce_key = hashlib.blake2b(key.secret, digest_size=32, person=_NONCE_PERSON).digest()
        self._prefix = bytes([SEALED, SEAL_FORMAT]) + key.key_id

    def seal(self, data: bytes) -> bytes:
        nonce = hashlib.blake2b(data, key=self._nonce_key, digest_size=NONCE_BYTES).digest()
        return self._prefix + nonce + self._aead.encrypt(nonce, data, None)

    def open(self, sealed: bytes) -> bytes:
        """The plaintext; :class:`BusError` if ``sealed`` was not sealed by this key, or was altered."""
        if sealed[:HEADER_BYTES - NONCE_BYTES] != self._prefix:
            raise BusError(f"a sealed message of format {sealed[1:2]!r}, key id {key_id_of(sealed).hex()}, "
                           f"opened with key id {self.key.key_id.hex()}")
        try:
            return self._aead.decrypt(sealed[HEADER_BYTES - NONCE_BYTES:HEADER_BYTES], sealed[HEADER_BYTES:], None)
        except InvalidTag as exc:
            raise BusError(f"a sealed message under key id {self.key.key_id.hex()} failed its tag: "
                           "its bytes were altered") from exc


ERR_WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's refusals of a publish whose expected-last-subject-sequence does not match
(:data:`.jetstream.FENCE_REFUSALS`, which imports this module)."""
ERR_SUBJECT_IN_PROCESS = 10164
"""The refusal a clustered stream gives while another publish to the subject is proposed but not yet
stored: a racing writer's key, which a read a moment later finds."""


class KeyInProcess(nats.errors.Error):
    """Another writer's new key is being replicated and cannot be read yet: retried as transient."""


class PreparedKey:
    """A conversation's data key being read or made ahead of its append (:meth:`JetStreamBus.prepare_append`).

    It stands in for the read the append would make only while it is young (:data:`PREPARED_FOR_S`):
    a first append reads its key fresh because a forget may have erased the one a process holds,
    and a key read longer ago than a turn takes is no longer fresh."""

    KEPT = 1_024
    """Prepared keys kept before the stale ones (turns that never appended) are dropped."""
    PREPARED_FOR_S = 5.0

    def __init__(self, task: asyncio.Future[Sealer], fresh: bool) -> None:
        self.task, self.fresh, self.started = task, fresh, time.monotonic()

    @classmethod
    def start(cls, making: Awaitable[Sealer], fresh: bool) -> PreparedKey:
        task = asyncio.ensure_future(making)
        task.add_done_callback(_retrieved)
        return cls(task, fresh)

    def usable(self, *, fresh: bool) -> bool:
        """Whether it may seal an append (``fresh``: one that must read its key afresh)."""
        return (self.fresh or not fresh) and time.monotonic() - self.started <= self.PREPARED_FOR_S

    async def sealer(self, *, fresh: bool) -> Sealer | None:
        """The key (waited for if still coming), or None: not usable, or reading it failed (the
        append then reads it itself, and meets the failure there)."""
        if not self.usable(fresh=fresh):
            return None
        try:
            return await self.task
        except Exception:
            return None


def _retrieved(task: asyncio.Future[Sealer]) -> None:
    """A prepared key that failed is read again by its append: the failure is not logged at collection."""
    if not task.cancelled():
        task.exception()


def key_subject(stream: str, tenant: str, conversation: str) -> str:
    """The subject of a conversation's data key (ids are ``[A-Za-z0-9_-]``: valid subject tokens)."""
    return f"mirror-keys.{stream}.{tenant}.{conversation}"


class DataKeys:
    """The data keys of one event stream's conversations, in the stream ``<stream>_KEYS``, cached.

    A stream of its own rather than a key-value bucket: a bucket's stream denies message deletes,
    and erasing a key is exactly a secure delete of its one message. It is used as a write-once
    key-value store: one subject per conversation, written with expected-last-subject-sequence 0
    (create-if-absent), read with a last-by-subject get from the leader. ``js`` is a JetStream
    context; the stream is made on first use with ``replicas`` copies (as many as the event stream:
    a key lost with a server would make its messages unreadable).
    """

    def __init__(self, js: Any, stream: str, replicas: int, cache: int = DEFAULT_CACHE) -> None:
        self.event_stream = stream
        self.key_stream = f"{stream}_KEYS"
        self._js, self._replicas, self._cache_size = js, replicas, cache
        self._ready = False
        self._cache: OrderedDict[tuple[str, str], Sealer] = OrderedDict()
        self._prepared: dict[tuple[str, str], PreparedKey] = {}
        """Keys being read or made ahead of an append (:meth:`prepare`), by conversation."""

    async def _store(self) -> None:
        if self._ready:
            return
        try:  # bound as it is (made by another process, perhaps with other replicas)
            await self._js.stream_info(self.key_stream)
        except nats.js.errors.NotFoundError:
            try:
                await self._js.add_stream(StreamConfig(
                    name=self.key_stream, subjects=[f"mirror-keys.{self.event_stream}.>"],
                    description="Mirror: one data key per conversation, written once, erased when it is forgotten",
                    retention=RetentionPolicy.LIMITS, storage=StorageType.FILE, num_replicas=self._replicas,
                    allow_direct=False, deny_delete=False))
            except nats.js.errors.BadRequestError:  # made meanwhile by another process
                await self._js.stream_info(self.key_stream)
        self._ready = True

    def prepare(self, tenant: str, conversation: str, fence: int, retrying: Callable[..., Awaitable[Sealer]]) -> None:
        """Start reading (or making) the key :meth:`for_writing` will be asked for by an append after
        stream seq ``fence``, in the background (through the bus's ``retrying``), so that the append
        does not wait for it: a new conversation's first turn makes its key while the Talker answers,
        one fsynced publish off the turn's path. Nothing to do when the key is cached and that append
        reads none (``fence`` > 0), or one is being prepared already."""
        named = (tenant, conversation)
        if named in self._prepared or (fence and self.cached(tenant, conversation) is not None):
            return
        self._prepared[named] = PreparedKey.start(retrying(self._for_writing, tenant, conversation, fresh=fence == 0),
                                                  fence == 0)
        if len(self._prepared) > PreparedKey.KEPT:  # turns that never appended: their keys are stale by now
            for stale in [name for name, prepared in self._prepared.items() if not prepared.usable(fresh=False)]:
                del self._prepared[stale]

    def cached(self, tenant: str, conversation: str) -> Sealer | None:
        sealer = self._cache.get((tenant, conversation))
        if sealer is not None:
            self._cache.move_to_end((tenant, conversation))
        return sealer

    def _remember(self, tenant: str, conversation: str, sealer: Sealer) -> Sealer:
        self._cache[tenant, conversation] = sealer
        self._cache.move_to_end((tenant, conversation))
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return sealer

    async def _stored(self, tenant: str, conversation: str) -> tuple[int, bytes] | None:
        """(stream seq, record) of the conversation's key from the stream's leader, or None."""
        await self._store()
        try:
            message = await self._js.get_last_msg(self.key_stream, key_subject(self.event_stream, tenant, conversation))
        except nats.js.errors.NotFoundError:  # never made, or erased
            return None
        return message.seq or 0, message.data or b""

    async def _load(self, tenant: str, conversation: str) -> Sealer | None:
        """The stored key (cached from now on), or None if there is none."""
        stored = await self._stored(tenant, conversation)
        if stored is None:
            self._cache.pop((tenant, conversation), None)
            return None
        return self._remember(tenant, conversation, DataKey.from_record(stored[1]).sealer())

    async def for_writing(self, tenant: str, conversation: str, *, fresh: bool = False) -> Sealer:
        """The conversation's key, made now if it has none (create-if-absent: racing writers agree).

        ``fresh``: read the stream even if the key is cached — for the first message of a subject,
        which may follow a forget (and an import) that erased the key this process still holds.
        A key :meth:`prepare` read or made for this append stands in for the read while it is young."""
        prepared = self._prepared.pop((tenant, conversation), None)
        sealer = None if prepared is None else await prepared.sealer(fresh=fresh)
        return sealer or await self._for_writing(tenant, conversation, fresh=fresh)

    async def _for_writing(self, tenant: str, conversation: str, *, fresh: bool) -> Sealer:
        cached = self.cached(tenant, conversation)
        if cached is not None and not fresh:
            return cached
        if cached is not None or not fresh:  # a key in use (or that was): from the stream
            sealer = await self._load(tenant, conversation)
            if sealer is not None:
                return sealer
        await self._store()  # else try to make it first: one round trip for a new conversation
        key = DataKey.new()
        try:
            await self._js.publish(key_subject(self.event_stream, tenant, conversation), key.record(),
                                   stream=self.key_stream, headers={HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
        except nats.js.errors.APIError as exc:
            if exc.err_code not in ERR_WRONG_LAST_SEQUENCE:
                raise
            loaded = await self._load(tenant, conversation)  # another writer made it first: theirs
            if loaded is None and exc.err_code == ERR_SUBJECT_IN_PROCESS:
                raise KeyInProcess(f"the data key of {tenant}/{conversation} is being made by another writer") from exc
            if loaded is None:
                raise BusError(f"the data key of {tenant}/{conversation} was made and erased at once; "
                               "the conversation is being forgotten") from None
            return loaded
        return self._remember(tenant, conversation, key.sealer())

    async def for_reading(self, tenant: str, conversation: str, key_id: bytes) -> Sealer:
        """The key a message was sealed with; :class:`DataKeyErased` if the stream no longer has it."""
        sealer = self.cached(tenant, conversation)
        if sealer is None or sealer.key.key_id != key_id:
            sealer = await self._load(tenant, conversation)  # a miss, or a key made again since (an import)
        if sealer is None or sealer.key.key_id != key_id:
            raise DataKeyErased(tenant, conversation)
        return sealer

    async def open(self, tenant: str, conversation: str, data: bytes) -> bytes:
        """``data`` opened if it is sealed, as it is if not (a message from before sealing)."""
        if not is_sealed(data):
            return data
        return (await self.for_reading(tenant, conversation, key_id_of(data))).open(data)

    def open_cached(self, tenant: str, conversation: str, data: bytes) -> bytes | None:
        """:meth:`open` from the cache alone (after :meth:`for_reading`): None when not cached."""
        if not is_sealed(data):
            return data
        sealer = self._cache.get((tenant, conversation))
        if sealer is None or sealer.key.key_id != key_id_of(data):
            return None
        return sealer.open(data)

    async def erase(self, tenant: str, conversation: str) -> int:
        """Securely erase the conversation's key (``*``: every key of the tenant): its one message
        overwritten by the server, then deleted; dropped from this process's cache. How many it erased."""
        if conversation != "*":
            self._cache.pop((tenant, conversation), None)
            stored = await self._stored(tenant, conversation)
            return int(stored is not None and await self._erase_message(stored[0]))
        for cached in [key for key in self._cache if key[0] == tenant]:
            del self._cache[cached]
        await self._store()
        erased, seq = 0, 1
        subjects = key_subject(self.event_stream, tenant, "*")
        while True:
            try:
                message = await self._js.get_msg(self.key_stream, seq=seq, subject=subjects, next=True)
            except nats.js.errors.NotFoundError:
                return erased
            assert message.seq is not None, "a stored message has its sequence"
            erased, seq = erased + await self._erase_message(message.seq), message.seq + 1

    async def _erase_message(self, seq: int) -> bool:
        try:
            await self._js.delete_msg(self.key_stream, seq)  # no ``no_erase``: overwritten
        except nats.js.errors.NotFoundError:  # erased meanwhile by another sweep
            return False
        return True


__all__ = ["DEFAULT_CACHE", "HEADER_BYTES", "SEALED", "SEAL_FORMAT", "DataKey", "DataKeys", "KeyInProcess", "PreparedKey",
           "Sealer", "key_subject", "is_sealed", "key_id_of"]
