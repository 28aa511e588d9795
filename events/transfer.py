"""Export conversations out of a log into an archive, and import an archive through the bus.

Export reads every branch of each conversation from the log (the caller settles it first, so
what the bus acknowledged is in it) and writes the codec's bytes (:mod:`mirror.events.archive`).

Import never writes the log itself: it appends the archive's events to the bus, fenced as any
writer's (a new stream's head, so a conversation that appears meanwhile is an
:class:`~mirror.events.errors.AppendConflict`, not a mix), and waits for the log's owner to
commit them — the one path every event takes, so the stream, the log, snapshots and replicas
all see the imported conversation as they see a live one. Before anything is appended every
conversation is checked: one that exists (in the log or on the bus) or whose tombstone stands
refuses the whole import (:class:`~mirror.events.errors.ImportRefused`); ``force`` lifts a
finished tombstone first. JetStream remembers message ids for its duplicate window (120 s by
default): events erased within it are taken for duplicates, so an import right after a forget
is refused (``reason`` ``refused``, the tombstone already lifted) until the window has passed.

Importing under another tenant rewrites each event's tenant and every ``causation`` naming one
of the archive's event ids (ids hash the tenant, :func:`~mirror.events.ids.event_id`), so the
imported conversation replays and verifies as the source did.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .archive import Archive
from .bus import EventBus
from .codec import encode
from .envelope import Event
from .errors import AppendConflict, ImportRefused
from .ids import StreamKey, event_id
from .log import EventLogReader, Forgetting, IngestProgress
from .payloads import Fork, PersonaChosen

__all__ = ["APPEND_CHUNK", "ExportedConversations", "Imported", "export_conversations", "import_archive", "uses"]

CATCH_UP_SLICE_S = 5.0
"""The longest single wait the log's owner grants (``MAX_CATCH_UP_S``); an import waits in slices."""
APPEND_CHUNK = 500
"""Events per fenced append of an import (each chunk continues the head the last one returned)."""


@dataclass(frozen=True)
class ExportedConversations:
    """Each conversation's branches' encoded events, and what they use."""

    conversations: dict[str, dict[str, list[bytes]]]
    personas: dict[str, bytes]
    """Persona version → its card (canonical JSON), from the ``persona`` events."""
    prompt_sets: frozenset[str]
    """Prompt set versions named by the events' provenance or forks."""


def uses(events: Iterable[Event]) -> tuple[dict[str, bytes], set[str]]:
    """The persona cards (version → card) and prompt set versions ``events`` name."""
    personas: dict[str, bytes] = {}
    prompt_sets: set[str] = set()
    for event in events:
        if isinstance(event.payload, PersonaChosen):
            personas[event.payload.version] = event.payload.card.encode()
        elif isinstance(event.payload, Fork) and event.payload.prompt_set:
            prompt_sets.add(event.payload.prompt_set)
        if event.provenance is not None and event.provenance.prompt_set:
            prompt_sets.add(event.provenance.prompt_set)
    return personas, prompt_sets


async def export_conversations(log: EventLogReader, tenant: str, conversations: Sequence[str] | None) -> ExportedConversations:
    """Every branch of ``conversations`` (``None``: each of the tenant's) as the log holds them."""
    if conversations is None:
        summaries = await log.conversations(tenant)
    else:
        summaries = [summary for conversation in conversations for summary in await log.conversations(tenant, conversation)]
    exported: dict[str, dict[str, list[bytes]]] = {}
    personas: dict[str, bytes] = {}
    prompt_sets: set[str] = set()
    for summary in summaries:
        branches = exported.setdefault(summary.conversation, {})
        for branch in summary.branches:
            events = await log.read(StreamKey(tenant, summary.conversation, branch))
            branches[branch] = [encode(event) for event in events]
            used_personas, used_sets = uses(events)
            personas.update(used_personas)
            prompt_sets |= used_sets
    return ExportedConversations(exported, personas, frozenset(prompt_sets))


@dataclass(frozen=True)
class Imported:
    tenant: str
    conversations: dict[str, int]
    """Conversation → events appended (every branch)."""
    released: tuple[str, ...]
    """Conversations whose tombstone ``force`` lifted."""
    seconds: float

    @property
    def events(self) -> int:
        return sum(self.conversations.values())

    def as_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "conversations": self.conversations, "events": self.events,
                "released": list(self.released), "seconds": round(self.seconds, 3)}


def _retenanted(archive: Archive, tenant: str) -> Mapping[str, Mapping[str, tuple[Event, ...]]]:
    """The archive's events under ``tenant``, each causation that names an archive event renamed."""
    if tenant == archive.tenant:
        return archive.conversations
    renamed: dict[str | None, str | None] = {}
    for conversation, branches in archive.conversations.items():
        for branch, events in branches.items():
            # Every seq a step could have seen on the branch, inherited ones and 0 included.
            for seq in range(0, (events[-1].seq if events else 0) + 1):
                renamed[event_id(archive.tenant, conversation, branch, seq)] = event_id(tenant, conversation, branch, seq)
    return {conversation: {branch: tuple(dataclasses.replace(event, tenant=tenant,
                                                             causation=renamed.get(event.causation, event.causation))
                                         for event in events)
                           for branch, events in branches.items()}
            for conversation, branches in archive.conversations.items()}


async def _refusal(bus: EventBus, log: EventLogReader, tenant: str, conversation: str, branches: Iterable[str],
                   force: bool) -> bool:
    """Raise :class:`ImportRefused` if ``conversation`` may not be imported; True if its tombstone must go."""
    tombstone = await log.tombstone(tenant, conversation) if isinstance(log, Forgetting) else None
    if tombstone is not None:
        if not force or tombstone["status"] != "forgotten":
            raise ImportRefused(tenant, conversation, "forgotten")
        # The broker still remembers the erased messages' ids for its duplicate window (counted
        # from their first publish, which came before the forgetting): an import inside it would
        # see some of them taken as duplicates and land only in part. Refused before anything moves.
        window = float(getattr(getattr(bus, "settings", None), "duplicate_window_s", 0.0) or 0.0)
        if time.time() - float(tombstone["requested_at"]) < window:
            raise ImportRefused(tenant, conversation, "refused")
        return True
    if await log.conversations(tenant, conversation):
        raise ImportRefused(tenant, conversation, "exists")
    for branch in branches:
        if (await bus.head(StreamKey(tenant, conversation, branch))).last_seq is not None:
            raise ImportRefused(tenant, conversation, "exists")  # on the bus, not yet in the log
    return False


async def import_archive(bus: EventBus, log: EventLogReader, archive: Archive, *, tenant: str | None = None,
                         force: bool = False, commit_timeout_s: float = 60.0) -> Imported:
    """Append ``archive``'s conversations (under ``tenant``, default the archive's) through ``bus``
    and wait until ``log`` has committed them (see the module docstring)."""
    started = time.perf_counter()
    tenant = archive.tenant if tenant is None else tenant
    conversations = _retenanted(archive, tenant)
    release = [conversation for conversation, branches in conversations.items()
               if await _refusal(bus, log, tenant, conversation, branches, force)]
    if release:
        assert isinstance(log, Forgetting), "a tombstone was found, so the log forgets"
        for conversation in release:
            await log.release(tenant, conversation)
    appended: dict[str, int] = {}
    for conversation, branches in conversations.items():
        # main first: a branch's fork names it.
        for branch in sorted(branches, key=lambda name: (name != "main", name)):
            events = branches[branch]
            key = StreamKey(tenant, conversation, branch)
            head = (await bus.head(key)).with_last_seq(events[0].seq - 1)
            for first in range(0, len(events), APPEND_CHUNK):
                try:
                    head = await bus.append(key, events[first:first + APPEND_CHUNK], head)
                except AppendConflict as exc:
                    if first or conversation in appended:
                        raise
                    raise ImportRefused(tenant, conversation, "refused") from exc
            appended[conversation] = appended.get(conversation, 0) + len(events)
    if isinstance(log, IngestProgress):
        deadline = time.monotonic() + commit_timeout_s
        while not await log.wait_caught_up(min(CATCH_UP_SLICE_S, max(deadline - time.monotonic(), 0.0))):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the log did not commit the imported events within {commit_timeout_s:g} s; "
                                   "they are on the bus and the ingester will commit them")
    return Imported(tenant, appended, tuple(release), time.perf_counter() - started)
