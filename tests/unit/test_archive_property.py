"""Export → archive → import over generated logs (Hypothesis), on two in-memory stores.

Whatever a log holds — any payload, several conversations, a forked branch — an export read
back and imported into an empty store gives the same events, byte for byte under the same
tenant; under another tenant the same payloads and seqs, each causation renamed to the
imported event it named; and the import's own export is the first archive's events again.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror.events.archive import read_archive, write_archive
from mirror.events.bus import Head
from mirror.events.codec import decode, encode
from mirror.events.envelope import Event, make_event
from mirror.events.errors import CodecError, CorruptEvent
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Fork
from mirror.events.transfer import export_conversations, import_archive
from tests.support.strategies import event_sequences

CONVERSATIONS = st.lists(st.sampled_from(["a", "b-2", "c_3"]), min_size=1, max_size=3, unique=True)


def _writable(events: list[Event]) -> bool:
    """Whether a real log could hold ``events``: the codec reads each back (the projections' own
    strategies also make values no writer can record, e.g. an infinite confidence, to prove the
    folds survive them; an archive is read through the codec, which refuses them)."""
    try:
        return all(decode(encode(event)) is not None for event in events)
    except (CodecError, CorruptEvent):
        return False


@st.composite
def logs(draw: st.DrawFn) -> dict[StreamKey, list[Event]]:
    """Conversations of tenant ``acme``, each a main branch and sometimes a forked one."""
    found: dict[StreamKey, list[Event]] = {}
    for conversation in draw(CONVERSATIONS):
        key = StreamKey("acme", conversation)
        main = draw(event_sequences(key, max_size=12).filter(_writable))
        found[key] = main
        if draw(st.booleans()):
            branch = StreamKey("acme", conversation, "retry")
            fork = draw(st.integers(1, len(main)))
            found[branch] = [make_event(branch, fork + 1, Fork(parent_branch="main", fork_seq=fork, prompt_set="p"),
                                        timestamp=main[-1].timestamp, causation=main[fork - 1].id),
                             *[make_event(branch, fork + 2 + n, event.payload, timestamp=event.timestamp)
                               for n, event in enumerate(draw(event_sequences(branch, max_size=4).filter(_writable)))]]
    return found


async def _fill(infrastructure: InMemoryInfrastructure, found: dict[StreamKey, list[Event]]) -> None:
    for key, events in found.items():
        await infrastructure.bus.append(key, events, Head(0, 0).with_last_seq(events[0].seq - 1))


async def _round_trip(found: dict[StreamKey, list[Event]], tenant: str) -> None:
    source, target = InMemoryInfrastructure(), InMemoryInfrastructure()
    await _fill(source, found)
    exported = await export_conversations(source.event_log, "acme", None)
    archive = read_archive(write_archive("acme", exported.conversations, personas=exported.personas))
    assert archive.events == sum(len(events) for events in found.values())

    imported = await import_archive(target.bus, target.event_log, archive, tenant=tenant)
    assert imported.events == archive.events
    for key, events in found.items():
        moved = await target.event_log.read(StreamKey(tenant, key.conversation, key.branch))
        if tenant == "acme":
            assert [encode(event) for event in moved] == [encode(event) for event in events]
        else:
            assert [(e.seq, e.turn, e.timestamp, e.payload, e.provenance) for e in moved] == \
                   [(e.seq, e.turn, e.timestamp, e.payload, e.provenance) for e in events]
            ids = {event.id: (event.conversation, event.branch, event.seq) for events in found.values() for event in events}
            for original, copy in zip(events, moved, strict=True):
                if original.causation in ids:
                    conversation, branch, seq = ids[original.causation]
                    assert copy.causation == make_event(StreamKey(tenant, conversation, branch), seq,
                                                        original.payload).id
                else:
                    assert copy.causation == original.causation
    again = await export_conversations(target.event_log, tenant, None)
    assert {c: {b: len(e) for b, e in branches.items()} for c, branches in again.conversations.items()} == \
           {c: {b: len(e) for b, e in branches.items()} for c, branches in exported.conversations.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=logs(), tenant=st.sampled_from(["acme", "globex"]))
def test_export_then_import_gives_the_same_log(found: dict[StreamKey, list[Event]], tenant: str) -> None:
    asyncio.run(_round_trip(found, tenant))
