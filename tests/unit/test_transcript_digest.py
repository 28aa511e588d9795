"""The quick placement of a chat completion's transcript (issue 38): the gateway digests the
client's exchanges, the conversation its branch's turns, and only an exact match continues
``main`` without reading the log."""

from __future__ import annotations

from mirror.actors.branching import BranchTranscript
from mirror.cognition.transcript_digest import EMPTY, digest_of, link
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.memory_log import InMemoryEventLog
from mirror.events.payloads import Turn
from mirror.gateway.openai.transcript import Transcript, quick_placement
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState, initial_state

KEY = StreamKey("acme", "talk")


def test_the_digest_compares_exchanges_as_the_alignment_does() -> None:
    assert digest_of([]) == EMPTY
    assert digest_of([(" hi ", "hello\n")]) == digest_of([("hi", "hello")])  # surrounding whitespace aside
    assert digest_of([("ab", "c")]) != digest_of([("a", "bc")])  # where the texts split counts
    assert digest_of([("a", "b"), ("c", "d")]) == link(digest_of([("a", "b")]), "c", "d")  # a chain, extended
    assert digest_of([("a", "b"), ("c", "d")]) != digest_of([("c", "d"), ("a", "b")])


def test_the_quick_placement_is_main_with_the_digest_or_no_history() -> None:
    assert quick_placement(Transcript("hi")).continuation is None
    placed = quick_placement(Transcript("more?", (("hi", "hello"), ("fruit?", "apple")), history=True))
    assert (placed.branch, placed.history) == ("main", "same")
    assert placed.continuation is not None and placed.continuation.turns == 2
    assert placed.continuation.digest == digest_of([("hi", "hello"), ("fruit?", "apple")])


def conversed(turns: int, log: InMemoryEventLog, *, logged: int) -> tuple[ConversationState, list[tuple[str, str]]]:
    """A state of ``turns`` turns whose first ``logged`` the log holds (the rest not yet ingested)."""
    state, exchanges = initial_state(KEY), []
    for index in range(turns):
        exchange = (f"question {index}", f"answer {index}")
        event = make_event(KEY, state.last_seq + 1, Turn(*exchange, narrative_seq=None), turn=index)
        state = apply(state, event)
        exchanges.append(exchange)
        if index < logged:
            log.add([event])
    return state, exchanges


async def test_a_branch_digests_its_turns_from_the_log_once_then_from_its_recent_turns() -> None:
    log = InMemoryEventLog()
    state, exchanges = conversed(30, log, logged=27)  # more than the recent window; the newest not yet logged
    assert len(state.recent_turns) < 30
    transcript = BranchTranscript(KEY, log)
    assert await transcript.digest(state) == digest_of(exchanges)
    more, _ = conversed(33, InMemoryEventLog(), logged=0)  # three turns later, none of them logged: no read needed
    log_less = BranchTranscript(KEY, InMemoryEventLog())
    assert await log_less.digest(more) is None  # older turns than the recent ones, and no log holding them
    transcript.log = InMemoryEventLog()  # from now on the log is no help: the recent turns must do
    assert await transcript.digest(more) == digest_of([*exchanges, *((f"question {i}", f"answer {i}") for i in range(30, 33))])
