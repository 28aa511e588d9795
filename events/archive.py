"""The export archive: a portable, self-checking copy of conversations, every branch.

An archive is a plain POSIX tar (``tar tf`` lists it), so it can be inspected, copied and
compressed with ordinary tools. Its members:

- ``manifest.json`` — ``format`` (``mirror-archive``), ``format_version`` (:data:`FORMAT_VERSION`),
  ``record_format`` (the codec's :data:`~mirror.events.codec.RECORD_FORMAT` at export), the
  ``tenant``, ``created_at``, per conversation its branches with their event counts and first and
  last seq, the totals (``counts``), and ``files``: every other member's size and SHA-256;
- ``events/<conversation>/<branch>.msgpack`` — the branch's own events in seq order, each the
  codec's record (a msgpack map, :mod:`mirror.events.codec`) written one after the other: the
  bytes the log and the stream hold;
- ``personas/<version>.json`` — the card of each persona the conversations are (their ``persona``
  events carry it too, so replay needs no store);
- ``prompt_sets/<version>/<template>.md`` — the prompt sets the events' provenance names, where
  the exporting stack had them.

:func:`read_archive` trusts nothing: a member missing, extra or with another digest, an event
that does not decode, belongs elsewhere or breaks its branch's sequence is an
:class:`~mirror.events.errors.ArchiveInvalid` naming the member, before anything is imported.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from .codec import RECORD_FORMAT, decode
from .envelope import Event
from .errors import ArchiveInvalid, CodecError, InvalidIdentifier
from .ids import validate_identifier

__all__ = ["ARCHIVE_FORMAT", "Archive", "FORMAT_VERSION", "MANIFEST", "read_archive", "write_archive"]

ARCHIVE_FORMAT = "mirror-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Archive:
    """What an archive holds, checked: its tenant's conversations (branch → events, seq order),
    the persona cards and the prompt sets (version → template → text)."""

    tenant: str
    conversations: Mapping[str, Mapping[str, tuple[Event, ...]]]
    personas: Mapping[str, bytes] = field(default_factory=dict)
    prompt_sets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    manifest: Mapping[str, Any] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(len(events) for branches in self.conversations.values() for events in branches.values())


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_archive(tenant: str, conversations: Mapping[str, Mapping[str, list[bytes]]], *,
                  personas: Mapping[str, bytes] | None = None,
                  prompt_sets: Mapping[str, Mapping[str, str]] | None = None,
                  created_at: float | None = None) -> bytes:
    """The archive of ``conversations`` (conversation → branch → each event's encoded record, in
    seq order), with the persona cards (version → JSON) and prompt sets given."""
    created_at = time.time() if created_at is None else created_at
    files: dict[str, bytes] = {}
    listed: dict[str, Any] = {}
    for conversation in sorted(conversations):
        branches = {}
        for branch in sorted(conversations[conversation]):
            records = conversations[conversation][branch]
            if not records:
                continue
            first, last = decode(records[0]).seq, decode(records[-1]).seq
            files[f"events/{conversation}/{branch}.msgpack"] = b"".join(records)
            branches[branch] = {"events": len(records), "first_seq": first, "last_seq": last}
        listed[conversation] = {"branches": branches, "events": sum(b["events"] for b in branches.values())}
    for version, card in sorted((personas or {}).items()):
        files[f"personas/{version}.json"] = card
    for version, templates in sorted((prompt_sets or {}).items()):
        for template, text in sorted(templates.items()):
            files[f"prompt_sets/{version}/{template}.md"] = text.encode()
    manifest = {
        "format": ARCHIVE_FORMAT, "format_version": FORMAT_VERSION, "record_format": RECORD_FORMAT,
        "tenant": tenant, "created_at": created_at, "conversations": listed,
        "personas": sorted(personas or {}), "prompt_sets": sorted(prompt_sets or {}),
        "counts": {"conversations": len(listed), "events": sum(c["events"] for c in listed.values()),
                   "event_bytes": sum(len(data) for name, data in files.items() if name.startswith("events/"))},
        "files": {name: {"bytes": len(data), "sha256": _digest(data)} for name, data in files.items()},
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(created_at), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _members(data: bytes) -> dict[str, bytes]:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members: dict[str, bytes] = {}
            for info in tar:
                if not info.isfile():
                    raise ArchiveInvalid(f"holds a {'directory' if info.isdir() else 'link or special file'}, "
                                         "only files belong in an archive", info.name)
                if info.name in members:
                    raise ArchiveInvalid("appears twice", info.name)
                extracted = tar.extractfile(info)
                assert extracted is not None, "a regular file member can be read"
                members[info.name] = extracted.read()
            return members
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveInvalid(f"not a readable tar file ({exc})") from exc


def _manifest(members: Mapping[str, bytes]) -> dict[str, Any]:
    raw = members.get(MANIFEST)
    if raw is None:
        raise ArchiveInvalid("no manifest.json: not a Mirror archive")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ArchiveInvalid("larger than any manifest", MANIFEST)
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise ArchiveInvalid(f"not JSON ({exc})", MANIFEST) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != ARCHIVE_FORMAT:
        raise ArchiveInvalid(f"format is not {ARCHIVE_FORMAT!r}", MANIFEST)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArchiveInvalid(f"format_version {manifest.get('format_version')!r}: this build reads "
                             f"version {FORMAT_VERSION}", MANIFEST)
    for name, shape in (("tenant", str), ("conversations", dict), ("files", dict)):
        if not isinstance(manifest.get(name), shape):
            raise ArchiveInvalid(f"{name} is missing or not a {shape.__name__}", MANIFEST)
    return manifest


def _check_files(manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> None:
    listed: Mapping[str, Any] = manifest["files"]
    for name in sorted(set(members) - set(listed) - {MANIFEST}):
        raise ArchiveInvalid("is not listed in the manifest", name)
    for name, entry in sorted(listed.items()):
        if name not in members:
            raise ArchiveInvalid("is listed in the manifest but missing", name)
        if not isinstance(entry, dict):
            raise ArchiveInvalid(f"the manifest's entry for {name} is not an object", MANIFEST)
        data = members[name]
        if entry.get("bytes") != len(data):
            raise ArchiveInvalid(f"holds {len(data)} bytes, the manifest says {entry.get('bytes')!r}", name)
        if entry.get("sha256") != _digest(data):
            raise ArchiveInvalid(f"SHA-256 {_digest(data)} differs from the manifest's {entry.get('sha256')!r}", name)


def _branch_events(name: str, data: bytes, tenant: str, conversation: str, branch: str,
                   expected: Mapping[str, Any]) -> tuple[Event, ...]:
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    events: list[Event] = []
    start = 0
    try:
        for _ in unpacker:
            end = unpacker.tell()
            events.append(decode(data[start:end]))
            start = end
    except (CodecError, ValueError, msgpack.UnpackException) as exc:
        raise ArchiveInvalid(f"event {len(events) + 1} does not decode ({exc})", name) from exc
    if start != len(data):
        raise ArchiveInvalid(f"ends in the middle of an event (byte {start} of {len(data)})", name)
    for offset, event in enumerate(events):
        if (event.tenant, event.conversation, event.branch) != (tenant, conversation, branch):
            raise ArchiveInvalid(f"event at seq {event.seq} belongs to {event.key}, not {tenant}/{conversation}/{branch}", name)
        if offset and event.seq != events[offset - 1].seq + 1:
            raise ArchiveInvalid(f"seq {event.seq} follows {events[offset - 1].seq}: a gap or a double", name)
    shown = (len(events), events[0].seq if events else None, events[-1].seq if events else None)
    if shown != (expected.get("events"), expected.get("first_seq"), expected.get("last_seq")):
        raise ArchiveInvalid(f"holds {shown[0]} event(s), seq {shown[1]}..{shown[2]}; the manifest says "
                             f"{expected.get('events')!r}, seq {expected.get('first_seq')!r}..{expected.get('last_seq')!r}", name)
    return tuple(events)


def read_archive(data: bytes) -> Archive:
    """The archive in ``data``, every member checked (see the module docstring)."""
    members = _members(data)
    manifest = _manifest(members)
    _check_files(manifest, members)
    try:
        tenant = validate_identifier("tenant", manifest["tenant"])
        conversations: dict[str, dict[str, tuple[Event, ...]]] = {}
        for conversation, entry in manifest["conversations"].items():
            validate_identifier("conversation", conversation)
            branches = entry.get("branches") if isinstance(entry, dict) else None
            if not isinstance(branches, dict) or "main" not in branches:
                raise ArchiveInvalid(f"conversation {conversation} lists no main branch", MANIFEST)
            conversations[conversation] = {}
            for branch, expected in branches.items():
                name = f"events/{conversation}/{validate_identifier('branch', branch)}.msgpack"
                if name not in members or not isinstance(expected, dict):
                    raise ArchiveInvalid(f"branch {branch} of {conversation} has no events file", MANIFEST)
                conversations[conversation][branch] = _branch_events(name, members[name], tenant, conversation,
                                                                     branch, expected)
    except InvalidIdentifier as exc:
        raise ArchiveInvalid(str(exc), MANIFEST) from exc
    personas = {name.removeprefix("personas/").removesuffix(".json"): body
                for name, body in members.items() if name.startswith("personas/")}
    prompt_sets: dict[str, dict[str, str]] = {}
    for name, body in members.items():
        if name.startswith("prompt_sets/"):
            _, version, template = name.split("/", 2)
            prompt_sets.setdefault(version, {})[template.removesuffix(".md")] = body.decode()
    return Archive(tenant, conversations, personas, prompt_sets, manifest)
