"""How a chat completion's transcript is read and placed among a conversation's branches (issue 35):
what counts as a divergence, where the fork goes, how the new branch is named."""

from __future__ import annotations

from mirror.cognition.instructions import instructions_change
from mirror.cognition.turn import Continuation
from mirror.events.ids import StreamKey
from mirror.gateway.openai.shapes import ChatCompletionIn
from mirror.gateway.openai.shapes import turn_message as read
from mirror.gateway.openai.transcript import LoggedBranch, LoggedTurn, Placement, Transcript, align
from mirror.projections.state import initial_state

# main: turn 0 at seq 2 (its recall at 1), thinking at 3-4, turn 1 at 6 (recall 5), thinking 7-8
MAIN = LoggedBranch("main", (LoggedTurn(2, 1, "hi", "hello"), LoggedTurn(6, 5, "fruit?", "apple")))


def body(*messages: tuple[str, str]) -> ChatCompletionIn:
    return ChatCompletionIn.model_validate({"model": "mirror",
                                            "messages": [{"role": role, "content": text} for role, text in messages]})


def continued(placement: Placement) -> Continuation:
    assert placement.continuation is not None
    return placement.continuation


def test_the_request_is_read_as_instructions_exchanges_and_the_new_message() -> None:
    said = read(body(("system", "Be brief."), ("assistant", "Welcome aboard!"), ("user", "hi"), ("assistant", "hello"),
                     ("developer", "No lists."), ("user", "fruit?")))
    assert said == Transcript("fruit?", (("hi", "hello"),), "Be brief.\n\nNo lists.", True)
    assert read(body(("user", "hi"))) == Transcript("hi", (), "", False)
    greeting = read(body(("assistant", "Welcome aboard!"), ("user", "hi")))  # a greeting alone: history, no exchange
    assert greeting.history and greeting.exchanges == ()
    joined = read(body(("user", "a"), ("user", "b"), ("assistant", "c"), ("user", "d"), ("user", "e")))
    assert joined.exchanges == (("a\n\nb", "c"),) and joined.message == "d\n\ne"


def test_instructions_are_recorded_only_when_they_change() -> None:
    state = initial_state(StreamKey("acme", "talk"))
    assert instructions_change(state, None) is None and instructions_change(state, "  ") is None
    change = instructions_change(state, " Be brief. ")
    assert change is not None and change.text == "Be brief."


def test_no_transcript_continues_main_and_an_equal_one_its_branch() -> None:
    assert align(Transcript("x"), [MAIN]).branch == "main"
    placed = align(Transcript("more?", (("hi", "hello"), ("fruit?", " apple ")), history=True), [MAIN])
    assert (placed.branch, placed.history, continued(placed).turns, continued(placed).parent) == ("main", "same", 2, None)


def test_a_regeneration_forks_before_the_turn_and_is_named_for_it() -> None:
    placed = align(Transcript("fruit?", (("hi", "hello"),), history=True), [MAIN])
    assert placed.history == "forked" and placed.branch.startswith("regen-4-")
    assert (continued(placed).parent, continued(placed).fork_seq, continued(placed).turns) == ("main", 4, 1)
    again = align(Transcript("fruit?", (("hi", "hello"),), history=True), [MAIN])
    assert again.branch == placed.branch  # deterministic
    taken = LoggedBranch(placed.branch, (MAIN.turns[0], LoggedTurn(10, 10, "fruit?", "pear")), "main", 4)
    second = align(Transcript("fruit?", (("hi", "hello"),), history=True), [MAIN, taken])
    assert second.branch == f"{placed.branch}-2"  # another swipe: another branch
    keyed = LoggedBranch(placed.branch, (MAIN.turns[0], LoggedTurn(10, 10, "fruit?", "pear", "k1")), "main", 4)
    retried = align(Transcript("fruit?", (("hi", "hello"),), history=True), [MAIN, keyed], "k1")
    assert (retried.branch, retried.continuation) == (placed.branch, None)  # its idempotency key's branch


def test_an_edit_forks_at_the_first_difference_and_adopts_what_the_client_kept() -> None:
    placed = align(Transcript("and?", (("hey", "hello"), ("fruit?", "apple")), history=True), [MAIN])
    assert placed.branch.startswith("edit-0-") and continued(placed).fork_seq == 0
    assert continued(placed).adopted == (("hey", "hello"), ("fruit?", "apple"))
    fork = LoggedBranch("edit-x", (LoggedTurn(2, 2, "hey", "hello"), LoggedTurn(3, 3, "fruit?", "apple"),
                                   LoggedTurn(5, 4, "and?", "yes")), "main", 0)
    follows = align(Transcript("so?", (("hey", "hello"), ("fruit?", "apple"), ("and?", "yes")), history=True),
                    [MAIN, fork])
    assert (follows.branch, follows.history) == ("edit-x", "same")
    # a branch's own first turn regenerated: the fork goes to the branch that owns that point (main)
    again = align(Transcript("hey", (), history=True), [MAIN, fork])
    assert continued(again).parent == "main" and continued(again).fork_seq == 0


def test_a_branch_shorter_than_the_transcript_adopts_the_rest() -> None:
    placed = align(Transcript("next", (("hi", "hello"), ("fruit?", "apple"), ("tree?", "oak")), history=True), [MAIN])
    assert (placed.branch, placed.history, continued(placed).adopted) == ("main", "adopted", (("tree?", "oak"),))
