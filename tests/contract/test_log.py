"""The log port's contract, run against every adapter: in-memory, DuckDB, and the NATS client
asking a DuckDB log's service on the real nats-server (fixture ``event_log``). Part of it: every
golden log (tests/golden/) reads, folds and verifies through each adapter to the expected states."""

from __future__ import annotations

import json
import math

import pytest

from mirror.events.codec import decode
from mirror.events.envelope import Event, make_event
from mirror.events.errors import LogError
from mirror.events.ids import StreamKey
from mirror.events.log import ConversationSummary, IndexEntry, Snapshot
from mirror.events.payloads import Fork, Monologue, Narrative, PersonaChosen, Turn
from tests.support.golden import EXPECTED, LOGS, fold_and_verify, read_log, verify_counts
from tests.support.logs import WritableLog

KEY = StreamKey("acme", "conversation-1")
EXPECTED_RESULTS = json.loads(EXPECTED.read_text())


def history(key: StreamKey, first: int, count: int, *, tag: str = "", start: float = 1000.0) -> list[Event]:
    """Turns, monologues and narratives in turn; event ``seq`` happened at ``start + seq``."""
    kinds = [
        lambda seq: Turn(f"message {seq}{tag}", f"reply {seq}{tag}", narrative_seq=None),
        lambda seq: Monologue(f"reasoning {seq}{tag}", f"memory {seq}", f"goal {seq}"),
        lambda seq: Narrative(f"narrative {seq}{tag}", monologue_seq=seq - 1),
    ]
    return [
        make_event(key, seq, kinds[seq % 3](seq), turn=seq // 3, timestamp=start + seq)
        for seq in range(first, first + count)
    ]


async def test_an_unknown_stream_is_empty(event_log: WritableLog) -> None:
    log = event_log.log
    assert await log.read(KEY) == []
    assert await log.last_seq(KEY) == 0
    loaded = await log.load(KEY)
    assert (loaded.snapshot, loaded.events, loaded.last_seq) == (None, (), 0)
    assert await log.seq_at_time(KEY, 10**9) == 0
    assert await log.conversations("acme") == []
    stats = await log.stats()
    assert (stats.events, stats.conversations, stats.rejected) == (0, 0, 0)


async def test_reads_return_exactly_what_was_written_in_seq_order(event_log: WritableLog) -> None:
    written = history(KEY, 1, 10)
    await event_log.write(written[:4])
    await event_log.write(written[4:])
    assert await event_log.log.read(KEY) == written
    assert await event_log.log.last_seq(KEY) == 10


@pytest.mark.parametrize(
    "after_seq, until_seq, limit, expected",
    [
        (0, None, None, range(1, 11)),
        (3, None, None, range(4, 11)),
        (0, 4, None, range(1, 5)),
        (3, 7, None, range(4, 8)),
        (0, None, 3, range(1, 4)),
        (5, None, 100, range(6, 11)),
        (2, 9, 4, range(3, 7)),
        (10, None, None, range(0)),
        (25, None, None, range(0)),
        (7, 7, None, range(0)),
        (7, 3, None, range(0)),
        (0, 0, None, range(0)),
        (0, 99, None, range(1, 11)),
    ],
)
async def test_read_ranges(event_log: WritableLog, after_seq: int, until_seq: int | None, limit: int | None,
                           expected: range) -> None:
    written = history(KEY, 1, 10)
    await event_log.write(written)
    got = await event_log.log.read(KEY, after_seq=after_seq, until_seq=until_seq, limit=limit)
    assert got == [written[seq - 1] for seq in expected]


async def test_paging_with_a_limit_visits_every_event_once(event_log: WritableLog) -> None:
    written = history(KEY, 1, 23)
    await event_log.write(written)
    pages: list[list[Event]] = []
    after = 0
    while page := await event_log.log.read(KEY, after_seq=after, limit=5):
        pages.append(page)
        after = page[-1].seq
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]
    assert [event for page in pages for event in page] == written


@pytest.mark.parametrize("after_seq, until_seq, limit", [(0, None, None), (3, 7, None), (2, None, 4), (10, None, None)])
async def test_the_index_is_each_read_events_place_type_turn_and_time(
        event_log: WritableLog, after_seq: int, until_seq: int | None, limit: int | None) -> None:
    await event_log.write(history(KEY, 1, 10) + history(StreamKey("acme", "conversation-2"), 1, 3))
    read = await event_log.log.read(KEY, after_seq=after_seq, until_seq=until_seq, limit=limit)
    index = await event_log.log.index(KEY, after_seq=after_seq, until_seq=until_seq, limit=limit)
    assert index == [IndexEntry(event.seq, event.type, event.turn, float(event.timestamp)) for event in read]


async def test_find_is_the_events_of_some_types_that_mention_a_text(event_log: WritableLog) -> None:
    written = history(KEY, 1, 12)
    await event_log.write(written + history(StreamKey("acme", "conversation-2"), 1, 12))
    turns = [event for event in written if event.type == "turn"]
    assert await event_log.log.find(KEY, types=["turn"]) == turns
    assert await event_log.log.find(KEY, types=["turn", "narrative"], after_seq=3, until_seq=9) == [
        event for event in written if event.type in ("turn", "narrative") and 3 < event.seq <= 9]
    # turns are seqs 3, 6, 9, 12: "reply 6" is in 6's record only; "message 1" is in 12's ("message 12"):
    # a prefilter by text, which the caller checks
    assert await event_log.log.find(KEY, types=["turn"], mentioning="reply 6") == [written[5]]
    assert [event.seq for event in await event_log.log.find(KEY, types=["turn"], mentioning="message 1")] == [12]
    assert await event_log.log.find(KEY, types=["monologue"], mentioning="reply 6") == []


@pytest.mark.parametrize("types", [[], "turn", [""], None])
async def test_find_refuses_a_missing_or_malformed_list_of_types(event_log: WritableLog, types: object) -> None:
    with pytest.raises(ValueError, match="types"):
        await event_log.log.find(KEY, types=types)


async def test_streams_are_kept_apart_by_tenant_conversation_and_branch(event_log: WritableLog) -> None:
    keys = [KEY, StreamKey("acme", "conversation-2"), StreamKey("globex", KEY.conversation),
            StreamKey("acme", KEY.conversation, "alt")]
    written = {key: history(key, 1, 2 + index, tag=f"-{index}") for index, key in enumerate(keys)}
    await event_log.write([event for events in written.values() for event in events])
    for key, events in written.items():
        assert await event_log.log.read(key) == events
        assert await event_log.log.last_seq(key) == len(events)


async def test_rewriting_an_event_is_a_no_op_and_other_bytes_never_replace_it(event_log: WritableLog) -> None:
    written = history(KEY, 1, 3)
    await event_log.write(written)
    await event_log.write(written[1:])
    await event_log.write(history(KEY, 3, 1, tag="-divergent"))
    assert await event_log.log.read(KEY) == written
    stats = await event_log.log.stats()
    assert (stats.events, stats.conversations, stats.rejected) == (3, 1, 1)


async def test_load_is_the_newest_snapshot_and_the_events_after_it(event_log: WritableLog) -> None:
    log = event_log.log
    written = history(KEY, 1, 10)
    await event_log.write(written)
    for seq, version in ((4, 1), (7, 1), (6, 2)):
        await log.save_snapshot(Snapshot(KEY, seq, version, f"state {seq} v{version}".encode()))

    newest = await log.load(KEY)
    assert newest.snapshot == Snapshot(KEY, 7, 1, b"state 7 v1")
    assert newest.events == tuple(written[7:]) and newest.last_seq == 10

    of_version_2 = await log.load(KEY, projection_version=2)
    assert of_version_2.snapshot == Snapshot(KEY, 6, 2, b"state 6 v2")
    assert of_version_2.events == tuple(written[6:])

    in_the_past = await log.load(KEY, until_seq=5)
    assert in_the_past.snapshot == Snapshot(KEY, 4, 1, b"state 4 v1")
    assert in_the_past.events == (written[4],) and in_the_past.last_seq == 5

    before_any_snapshot = await log.load(KEY, until_seq=3)
    assert before_any_snapshot.snapshot is None
    assert before_any_snapshot.events == tuple(written[:3]) and before_any_snapshot.last_seq == 3

    at_a_snapshot = await log.load(KEY, projection_version=1, until_seq=7)
    assert at_a_snapshot.snapshot == Snapshot(KEY, 7, 1, b"state 7 v1")
    assert at_a_snapshot.events == () and at_a_snapshot.last_seq == 7

    assert (await log.load(KEY, projection_version=3)).snapshot is None


async def test_a_load_larger_than_a_reply_comes_whole(event_log: WritableLog) -> None:
    """The NATS client's load answers the first page of events with the snapshot and reads the
    rest: events well past a reply's size (512 KB) come back whole and in order."""
    written = [make_event(KEY, seq, Turn(f"message {seq} " + "x" * 60_000, f"reply {seq}", narrative_seq=None),
                          turn=seq, timestamp=1000.0 + seq) for seq in range(1, 21)]
    await event_log.write(written)
    await event_log.log.save_snapshot(Snapshot(KEY, 2, 1, b"state 2"))
    loaded = await event_log.log.load(KEY, projection_version=1)
    assert loaded.snapshot == Snapshot(KEY, 2, 1, b"state 2")
    assert loaded.events == tuple(written[2:]) and loaded.last_seq == 20


async def test_a_snapshot_is_kept_once_and_never_ahead_of_the_log(event_log: WritableLog) -> None:
    log = event_log.log
    await event_log.write(history(KEY, 1, 5))
    await log.save_snapshot(Snapshot(KEY, 5, 1, b"first"))
    await log.save_snapshot(Snapshot(KEY, 5, 1, b"second"))
    assert (await log.load(KEY)).snapshot == Snapshot(KEY, 5, 1, b"first")
    with pytest.raises(LogError, match="ahead of the committed log"):
        await log.save_snapshot(Snapshot(KEY, 6, 1, b"ahead"))
    with pytest.raises(LogError, match="ahead of the committed log"):
        await log.save_snapshot(Snapshot(StreamKey("acme", "nothing-yet"), 1, 1, b"ahead"))
    assert (await log.load(KEY)).snapshot == Snapshot(KEY, 5, 1, b"first")


async def test_seq_at_time_is_the_last_event_at_or_before_it(event_log: WritableLog) -> None:
    await event_log.write(history(KEY, 1, 6, start=2000.0))
    at = [await event_log.log.seq_at_time(KEY, timestamp) for timestamp in (0, 2000.5, 2001, 2003.9, 2006, 9e9)]
    assert at == [0, 0, 1, 3, 6, 6]


async def test_conversations_of_a_tenant(event_log: WritableLog) -> None:
    other = StreamKey("acme", "conversation-0")
    character = StreamKey("acme", "conversation-2")
    fork = make_event(StreamKey("acme", KEY.conversation, "alt"), 4, Fork("main", 3, "v2", "recompute"),
                      timestamp=5000.0)
    # Only main's events count for the mind and the turns: a persona event or a turn on a branch does not.
    on_the_branch = make_event(fork.key, 8, PersonaChosen("ada", "v1", "{}"), timestamp=5001.0)
    await event_log.write([
        *history(KEY, 1, 6), fork, *history(fork.key, 5, 3, tag="-alt", start=5000.0), on_the_branch,
        *history(other, 1, 2, start=1500.0), *history(StreamKey("globex", "secret"), 1, 9),
        make_event(character, 1, PersonaChosen("ada", "v1", "{}"), timestamp=3000.0),
        make_event(character, 2, Turn("hello", "hi", narrative_seq=None), turn=1, timestamp=3001.0),
    ])
    # last_seq is main's (alt ends at 8), updated_at the newest event of any branch; history()
    # puts a turn at every third seq (main: 3 and 6; alt: 6).
    assert await event_log.log.conversations("acme") == [
        ConversationSummary("conversation-0", ("main",), events=2, last_seq=2, updated_at=1502.0, turns=0,
                            mind="mirror"),
        ConversationSummary("conversation-1", ("alt", "main"), events=11, last_seq=6, updated_at=5007.0, turns=2,
                            mind="mirror"),
        ConversationSummary("conversation-2", ("main",), events=2, last_seq=2, updated_at=3001.0, turns=1,
                            mind="persona"),
    ]
    assert [summary.conversation for summary in await event_log.log.conversations("globex")] == ["secret"]
    # one conversation by id: the same summary, without the tenant's others
    assert await event_log.log.conversations("acme", "conversation-1") == (await event_log.log.conversations("acme"))[1:2]
    assert await event_log.log.conversations("acme", "nobody") == []
    assert await event_log.log.conversations("globex", "conversation-1") == []
    assert await event_log.log.conversations("initech") == []
    stats = await event_log.log.stats()
    assert (stats.events, stats.conversations, stats.rejected) == (24, 4, 0)


@pytest.mark.parametrize(
    "after_seq, until_seq, limit, complaint",
    [(-1, None, None, "after_seq"), (0, -2, None, "until_seq"), (0, None, 0, "limit"), (0, None, -3, "limit"),
     (1.5, None, None, "after_seq"), (0, None, True, "limit")],
)
async def test_bad_ranges_are_value_errors(event_log: WritableLog, after_seq: object, until_seq: object,
                                           limit: object, complaint: str) -> None:
    await event_log.write(history(KEY, 1, 3))
    with pytest.raises(ValueError, match=complaint):
        await event_log.log.read(KEY, after_seq=after_seq, until_seq=until_seq, limit=limit)


async def test_bad_load_bounds_tenants_and_times_are_value_errors(event_log: WritableLog) -> None:
    with pytest.raises(ValueError, match="until_seq"):
        await event_log.log.load(KEY, until_seq=-1)
    with pytest.raises(ValueError, match="tenant"):
        await event_log.log.conversations("not a tenant!")
    with pytest.raises(ValueError, match="timestamp"):
        await event_log.log.seq_at_time(KEY, math.nan)


# ----------------------------------------------------------------------------- the golden logs


@pytest.mark.parametrize("name", LOGS)
async def test_golden_logs_fold_and_verify_through_every_log_adapter(name: str, event_log: WritableLog) -> None:
    events = [decode(record) for record in read_log(name)]
    await event_log.write(events)
    results = await fold_and_verify(events, event_log.log)
    assert sorted(results) == sorted(EXPECTED_RESULTS[name])
    for branch, result in results.items():
        expected = EXPECTED_RESULTS[name][branch]
        assert result["state"] == expected["state"], f"{name}/{branch} folds to another state"
        report = result["report"]
        assert report.divergences == [], f"{name}/{branch}: {report.as_dict()}"
        assert report.model_calls == 0
        assert verify_counts(report) == expected["verify"]
