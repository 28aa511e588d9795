"""The client's transcript placed in the conversation's history: which branch a turn continues,
and where a regenerated or edited transcript forks a new one.

Front ends resend the whole conversation each turn. Mirror holds the conversation itself, so it
reads the earlier messages only to find *where* the new turn goes; it never appends after a
history the client does not have. What counts (docs/http-api.md says the same to clients):

- **The transcript**: the request's user and assistant messages before the last (the new turn).
  System and developer messages are the instructions, not the transcript. Leading assistant
  messages (before the first user message) are a greeting — a character's first message — and
  are not compared. Consecutive messages of one role count as one, their texts joined by a blank
  line; a user message left without a reply at the end joins the new turn's message. What is left
  is a list of exchanges (user, reply). Texts are compared without surrounding whitespace.
- **No transcript** (no earlier user or assistant message, the greeting aside): the client sends
  only the new message and trusts Mirror with the history. The turn continues ``main``, as a
  native turn does: a client that sends no history cannot have seen another branch, and the choice
  must not depend on anything but the request (see "Decisions" in docs/http-api.md).
- **A transcript** is aligned against the full list of turns (read from the log, inherited turns
  included) of ``main`` and of every branch a transcript forked (``regen-…``, ``edit-…``; a
  recompute's branch re-thinks the history with other prompts and is no client's alternative). The branch with the longest common prefix wins; on a tie, one that
  needs no fork, then ``main``, then the first by name.
  - the transcript *equals* the branch's turns: the turn continues that branch;
  - the branch's turns are a *prefix* of the transcript: the client holds exchanges the branch
    lacks (another model answered them, or they were written by hand); they are recorded on the
    branch as turns no model produced (*adopted*), then the turn;
  - the transcript *diverges* from the branch at exchange ``k`` (it stops early — a regenerated
    reply — or a message differs — an edit): a new branch is forked right before the branch's
    ``k``-th turn (before that turn's recall, instructions or persona steps), the client's
    exchanges from ``k`` on are adopted on it, then the turn.
- **The new branch's name** is deterministic: ``regen-<fork seq>-<8 hex>`` when the new message
  repeats the diverging turn's and nothing is adopted, else ``edit-<fork seq>-<8 hex>``; the hex
  digits hash the branch that owns the fork point, the fork seq, the adopted exchanges and the
  message. A name taken by an earlier fork gets ``-2``, ``-3``…: every regeneration is a branch of
  its own, and a retry without an idempotency key is one too (identical requests cannot be told
  apart).
- **A retry with an idempotency key** that a turn of any branch recorded goes to that branch,
  whose conversation answers it with that turn: a retried regeneration forks nothing new.

The alignment itself (:func:`align`) is pure; :func:`logged_branches` reads the branches and
:func:`placement` does both for a request.

**The quick way first** (:func:`placed`, issue 38). Most requests' transcript is exactly ``main``'s
turns, and then ``main`` wins whatever the other branches hold (no branch has a longer common
prefix than the whole transcript, and on a tie ``main`` needs no fork and comes first). So the
turn is sent to ``main`` with the digest of its exchanges
(:mod:`mirror.cognition.transcript_digest`) and no log is read: ``main``'s conversation, the
single writer of its turns, compares the digest with its own and either continues (``same``) or
refuses with :class:`~mirror.actors.errors.TranscriptElsewhere`, appending nothing; only then is the
transcript aligned from the log as above. A retry whose idempotency key ``main`` recorded is
answered by ``main`` before any comparison, as the alignment would place it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from mirror.actors.errors import TranscriptElsewhere
from mirror.cognition.transcript_digest import digest_of
from mirror.cognition.turn import Continuation
from mirror.events.envelope import Event
from mirror.events.ids import MAIN_BRANCH, StreamKey
from mirror.events.log import LogAccess
from mirror.events.payloads import Appraisal, Fork, Instructions, Interpretation, Plan, Recall, Retrieval, Turn

if TYPE_CHECKING:  # the runtime imports the limits, whose middleware names conversations as ``naming`` does
    from mirror.gateway.runtime import GatewayRuntime

__all__ = ["CLIENT_BRANCHES", "Exchange", "LoggedBranch", "LoggedTurn", "Placement", "Transcript", "align", "logged_branches",
           "placed", "placement", "quick_placement"]

T = TypeVar("T")

Exchange = tuple[str, str]
"""(the user's message, the reply), as the client's transcript or a branch holds it."""

CLIENT_BRANCHES = ("regen-", "edit-")
"""The prefixes of the branches transcripts fork: with ``main``, the branches a transcript is aligned with."""
TURN_PATH = (Recall, Instructions, Interpretation, Retrieval, Plan, Appraisal, Fork)
"""Events appended with a turn, before it (and a branch's ``fork``, before its first turn): a fork
before the turn goes before these."""


@dataclass(frozen=True, slots=True)
class Transcript:
    """What a chat completion says: the new turn's ``message``, the ``exchanges`` before it, the
    client's ``instructions`` (its system text, ``""`` for none) and whether it sent any history."""

    message: str
    exchanges: tuple[Exchange, ...] = ()
    instructions: str = ""
    history: bool = False


@dataclass(frozen=True, slots=True)
class LoggedTurn:
    seq: int
    start: int
    """The first seq of the events appended with it (its recall, instructions, persona steps)."""
    user_message: str
    reply: str
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class LoggedBranch:
    """A branch as the alignment sees it: every turn it holds, inherited ones first."""

    name: str
    turns: tuple[LoggedTurn, ...]
    parent: str | None = None
    fork_seq: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the turn goes: ``branch``, and what the branch's conversation checks or does first
    (``None``: nothing; a retry its idempotency key already answered)."""

    branch: str
    continuation: Continuation | None
    history: str
    """``none``, ``same``, ``adopted`` or ``forked``: the ``X-Mirror-History`` header."""
    extension: dict[str, object] = field(default_factory=dict)


def _same(a: Exchange, b: Exchange) -> bool:
    return a[0].strip() == b[0].strip() and a[1].strip() == b[1].strip()


def _common(exchanges: Sequence[Exchange], turns: Sequence[LoggedTurn]) -> int:
    count = 0
    for exchange, turn in zip(exchanges, turns, strict=False):
        if not _same(exchange, (turn.user_message, turn.reply)):
            break
        count += 1
    return count


def _owner(branches: dict[str, LoggedBranch], name: str, seq: int) -> str:
    """The branch that wrote ``seq`` of ``name``'s history (a branch inherits its parent's up to its fork)."""
    branch = branches[name]
    while branch.parent is not None and seq <= branch.fork_seq:
        branch = branches[branch.parent]
    return branch.name


def _name(kind: str, owner: str, fork_seq: int, adopted: Sequence[Exchange], message: str) -> str:
    digest = hashlib.sha256(repr((owner, fork_seq, tuple(adopted), message.strip())).encode()).hexdigest()[:8]
    return f"{kind}-{fork_seq}-{digest}"


def align(transcript: Transcript, branches: Sequence[LoggedBranch], idempotency_key: str | None = None) -> Placement:
    """The placement of ``transcript``'s turn among ``branches`` (see the module docstring)."""
    by_name = {branch.name: branch for branch in branches}
    by_name.setdefault(MAIN_BRANCH, LoggedBranch(MAIN_BRANCH, ()))
    if idempotency_key is not None:
        for branch in sorted(by_name.values(), key=lambda item: (item.name != MAIN_BRANCH, item.name)):
            own = [turn for turn in branch.turns if turn.seq > branch.fork_seq]
            if any(turn.idempotency_key == idempotency_key for turn in own):
                return Placement(branch.name, None, "same")
    if not transcript.history:
        return Placement(MAIN_BRANCH, None, "none")
    exchanges = transcript.exchanges

    def rank(branch: LoggedBranch) -> tuple[int, bool, bool, str]:
        common = _common(exchanges, branch.turns)
        return -common, common < len(branch.turns), branch.name != MAIN_BRANCH, branch.name

    candidates = [branch for branch in by_name.values()
                  if branch.name == MAIN_BRANCH or branch.name.startswith(CLIENT_BRANCHES)]
    best = min(candidates, key=rank)
    common = _common(exchanges, best.turns)
    adopted = tuple((user.strip(), reply.strip()) for user, reply in exchanges[common:])
    if common == len(best.turns):  # the branch is the transcript, or a prefix of it
        return Placement(best.name, Continuation(common, adopted=adopted), "adopted" if adopted else "same")
    fork_seq = best.turns[common].start - 1
    owner = _owner(by_name, best.name, fork_seq)
    regenerated = not adopted and transcript.message.strip() == best.turns[common].user_message.strip()
    kind = "regen" if regenerated else "edit"
    base = _name(kind, owner, fork_seq, adopted, transcript.message)
    name, number = base, 1
    while name in by_name:
        number += 1
        name = f"{base}-{number}"
    reason = (f"{'regenerated' if regenerated else 'edited'} by the client: its transcript leaves {best.name!r} "
              f"at turn {common + 1}")
    return Placement(name, Continuation(common, parent=owner, fork_seq=fork_seq, adopted=adopted, reason=reason),
                     "forked", {"forked_from": owner, "fork_seq": fork_seq})


def _turns(events: Sequence[Event]) -> list[LoggedTurn]:
    """The turns of one branch's own events, each with the first seq of what was appended with it."""
    turns = []
    for index, event in enumerate(events):
        payload = event.payload
        if not isinstance(payload, Turn):
            continue
        start = index
        while start > 0 and isinstance(events[start - 1].payload, TURN_PATH):
            start -= 1
        turns.append(LoggedTurn(event.seq, events[start].seq, payload.user_message, payload.reply,
                                payload.idempotency_key))
    return turns


async def logged_branches(log: LogAccess, key: StreamKey, names: Sequence[str]) -> list[LoggedBranch]:
    """Every branch of ``names`` of ``key``'s conversation with its full list of turns, read from
    ``log`` (settled by the caller): a branch's own events, after its parent's up to its fork.

    The cost is one read of each branch's own events: proportional to the conversation's length,
    paid only by requests that send a transcript."""
    own: dict[str, tuple[str | None, int, list[LoggedTurn]]] = {}
    for name in names:
        events = await log.read(StreamKey(key.tenant, key.conversation, name))
        first = events[0].payload if events else None
        parent, fork_seq = (first.parent_branch, first.fork_seq) if isinstance(first, Fork) else (None, 0)
        own[name] = (parent, fork_seq, _turns(events))
    built: dict[str, LoggedBranch] = {}

    def build(name: str, seen: frozenset[str] = frozenset()) -> LoggedBranch:
        if name not in built:
            parent, fork_seq, turns = own[name]
            inherited: tuple[LoggedTurn, ...] = ()
            if parent is not None and parent in own and parent not in seen:
                inherited = tuple(turn for turn in build(parent, seen | {name}).turns if turn.seq <= fork_seq)
            built[name] = LoggedBranch(name, (*inherited, *turns), parent if parent in own else None, fork_seq)
        return built[name]

    return [build(name) for name in names]


async def placement(runtime: GatewayRuntime, key: StreamKey, transcript: Transcript,
                    idempotency_key: str | None) -> Placement:
    """Where ``transcript``'s turn goes in ``key``'s conversation: :func:`align` over the branches
    the log holds, read once it has committed everything the bus held (a branch forked a moment
    ago included). A request
    with no transcript reads nothing: it continues ``main``."""
    if not transcript.history:
        return Placement(MAIN_BRANCH, None, "none")
    log = await runtime.log(key.tenant)
    await runtime.settled_tenant(key.tenant)  # every acknowledged event committed, a branch just forked too
    summaries = await log.conversations(key.tenant, key.conversation)
    names = [MAIN_BRANCH, *(name for name in (summaries[0].branches if summaries else ()) if name != MAIN_BRANCH)]
    return align(transcript, await logged_branches(log, key, names), idempotency_key)


def quick_placement(transcript: Transcript) -> Placement:
    """The placement tried first (see the module docstring): ``main``, if its turns are the transcript's exchanges."""
    if not transcript.history:
        return Placement(MAIN_BRANCH, None, "none")
    exchanges = transcript.exchanges
    return Placement(MAIN_BRANCH, Continuation(len(exchanges), digest=digest_of(exchanges)), "same")


async def placed(runtime: GatewayRuntime, key: StreamKey, transcript: Transcript, idempotency_key: str | None,
                 call: Callable[[Placement], Awaitable[T]]) -> tuple[Placement, T]:
    """``call(placement)`` with the quick placement; when ``main`` refuses it (the transcript is not
    its turns), with :func:`placement`'s. Both the placement used and what the call returned."""
    quick = quick_placement(transcript)
    try:
        return quick, await call(quick)
    except TranscriptElsewhere:
        pass
    aligned = await placement(runtime, key, transcript, idempotency_key)
    return aligned, await call(aligned)
