"""The state of one conversation branch, as folded from its events.

Every class here is a frozen dataclass holding tuples and :class:`FrozenMap` s, so a state can
be shared, cached, pickled to a Ray actor or kept as a time-travel view without copying: no
later ``apply`` can change it.

Memory bound: everything except beliefs, edges and review items is O(1) in the length of the
conversation — recent turns, monologue history and pending insights are cut to the
:class:`Limits`, counters are keyed by event type, and "latest" fields are replaced. Beliefs,
edges and review items grow only with *distinct* items, never with repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from mirror.events.ids import StreamKey

from ._frozen import FrozenMap
from .beliefs import BeliefState, ReviewItem, ReviewKey
from .edges import EdgeKey, EdgeState
from .errors import InvalidLimits
from .monologue import MonologueEntry, Threads

if TYPE_CHECKING:
    from .persona import PersonaState


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds that keep a conversation's state O(1) in its length.

    ``recent_turns``: turns kept verbatim. ``monologue_token_budget`` with
    ``monologue_trim_above_percent`` / ``monologue_trim_to_percent``: when the monologue
    history's estimated tokens exceed the first percentage of the budget, the oldest entries go
    until it is at or under the second. ``pending_insights``: insights kept while waiting for a
    reflection (oldest dropped first if reflection never comes).
    """

    recent_turns: int = 20
    monologue_token_budget: int = 10_000
    monologue_trim_above_percent: int = 90
    monologue_trim_to_percent: int = 80
    pending_insights: int = 50
    reflection_times: int = 64
    keyed_turns: int = 256
    """Idempotency keys kept (the newest turns' that had one): a retry comes within seconds to
    minutes, and the window a key is honoured (a day by default) is checked on top of this."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if type(value) is not int or value < 0:
                raise InvalidLimits(f"Limits.{item.name} must be a whole number >= 0, got {value!r}")
        if not 0 < self.monologue_trim_to_percent <= self.monologue_trim_above_percent <= 100:
            raise InvalidLimits(
                "monologue percentages must satisfy 0 < trim_to <= trim_above <= 100, got "
                f"trim_to={self.monologue_trim_to_percent} trim_above={self.monologue_trim_above_percent}"
            )


@dataclass(frozen=True, slots=True)
class KeyedTurn:
    """A turn its request named with an idempotency key: a retry with the key is answered by it."""

    key: str
    seq: int
    turn: int
    timestamp: float


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One exchange kept in the recent-turns window; ``narrative_seq`` is what the Talker saw."""

    seq: int
    user_message: str
    reply: str
    narrative_seq: int | None


@dataclass(frozen=True, slots=True)
class PendingInsight:
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class ReflectionRecord:
    """The last reflection that ran, whether or not its portrait was accepted."""

    seq: int
    accepted: bool
    reason: str
    unique_ratio: float
    insights_used: int
    for_turn: int | None = None
    triggers: tuple[str, ...] = ()
    warning: str = ""


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """The last thinker failure; the state it would have replaced is still in force."""

    seq: int
    stage: str
    error_type: str
    message: str
    attempt: int
    for_turn: int | None


@dataclass(frozen=True, slots=True)
class ForkInfo:
    """Where this branch came from: ``parent_branch`` after ``fork_seq``, re-thought with ``prompt_set``."""

    seq: int
    parent_branch: str
    fork_seq: int
    prompt_set: str
    reason: str


@dataclass(frozen=True, slots=True)
class Counters:
    """Running counts. ``turns_since_reflection`` resets when any reflection runs (cooldown), as do
    ``beliefs_since_reflection`` (beliefs new to the state) and ``reviews_since_reflection``
    (contradiction reviews opened): the event triggers read them. ``reflections`` counts the
    reflections that ran, ``reflections_rejected`` those whose portrait failed validation;
    ``beliefs_decayed`` / ``beliefs_forgotten`` what their decisions applied."""

    events_by_type: FrozenMap[str, int] = field(default_factory=FrozenMap)
    thinker_failures: int = 0
    turns_since_reflection: int = 0
    beliefs_since_reflection: int = 0
    reviews_since_reflection: int = 0
    reflections: int = 0
    reflections_rejected: int = 0
    beliefs_decayed: int = 0
    beliefs_forgotten: int = 0


@dataclass(frozen=True, slots=True)
class ConversationState:
    """Everything the runtime needs about one (tenant, conversation, branch) at ``last_seq``.

    ``last_seq`` is 0 before the first event; the next event must carry ``last_seq + 1``.
    ``first_user_message`` is kept for the Thinker's bounded history (the papers keep it);
    ``mode`` is the cognitive mode of the latest turn, ``memory`` whether its memory was on
    (``None``: no turn recorded it); ``thought_turn`` is the latest turn
    (0-based, the envelope's ``turn``) whose thinking completed: a narrative, or the threads in
    ``threads_only`` mode. ``turn_count - 1 > thought_turn`` means thinking is behind.
    ``memory_turn`` is the latest turn whose memory stage completed (a ``memory_step`` event):
    the memory stage is retried on its own, without thinking again, until it reaches the newest turn.
    ``narrative_seq`` / ``threads_seq`` are the seqs of the events that produced the current
    narrative and threads (``None`` until one exists). ``reflection`` is whether the
    conversation draws insights and reflects (``None``: no turn recorded it); ``insight_turn`` the
    latest turn whose insight was drawn. ``portrait`` is the last *accepted* reflection's portrait
    (``portrait_seq`` its event); ``last_reflection`` the last one that ran, accepted or not;
    ``reflection_times`` the timestamps of the latest reflections that ran (the hourly cap).
    """

    key: StreamKey
    limits: Limits = field(default_factory=Limits)
    last_seq: int = 0
    last_timestamp: float | None = None
    turn_count: int = 0
    first_user_message: str | None = None
    mode: str | None = None
    memory: bool | None = None
    reflection: bool | None = None
    thought_turn: int | None = None
    memory_turn: int | None = None
    insight_turn: int | None = None
    recent_turns: tuple[TurnRecord, ...] = ()
    narrative: str | None = None
    narrative_seq: int | None = None
    threads: Threads | None = None
    threads_seq: int | None = None
    monologue_history: tuple[MonologueEntry, ...] = ()
    monologue_tokens: int = 0
    beliefs: FrozenMap[str, BeliefState] = field(default_factory=FrozenMap)
    review_items: FrozenMap[ReviewKey, ReviewItem] = field(default_factory=FrozenMap)
    edges: FrozenMap[EdgeKey, EdgeState] = field(default_factory=FrozenMap)
    pending_insights: tuple[PendingInsight, ...] = ()
    portrait: str | None = None
    portrait_seq: int | None = None
    last_reflection: ReflectionRecord | None = None
    reflection_times: tuple[float, ...] = ()
    counters: Counters = field(default_factory=Counters)
    last_failure: FailureInfo | None = None
    fork: ForkInfo | None = None
    persona: PersonaState | None = None
    """The character, in a conversation of the ``persona`` mind (:mod:`mirror.projections.persona`)."""
    keyed_turns: tuple[KeyedTurn, ...] = ()
    """The newest turns whose requests carried an idempotency key, oldest first (bounded by
    ``limits.keyed_turns``)."""
    # -- cards (issue 35)
    greeting: str | None = None
    """The character's greeting that opened a persona conversation (its ``greeting`` event), as
    the Talker sees it: the first assistant message, before the first user message (``None``: no
    greeting — the MIRROR mind, or a card without ``first_mes``)."""
    # -- end of cards (issue 35)
    instructions: str = ""
    """The client's current instructions (its system messages; ``""``: none), from ``instructions``
    events; ``instructions_seq`` is the event that set them."""
    instructions_seq: int | None = None

    def keyed_turn(self, key: str) -> KeyedTurn | None:
        """The turn a request with idempotency key ``key`` appended, if it is still kept."""
        return next((keyed for keyed in reversed(self.keyed_turns) if keyed.key == key), None)

    @property
    def next_seq(self) -> int:
        return self.last_seq + 1


def initial_state(key: StreamKey, limits: Limits | None = None) -> ConversationState:
    """The state of ``key`` before its first event."""
    return ConversationState(key=key, limits=Limits() if limits is None else limits)


def keep_last(items: tuple, count: int) -> tuple:
    """The last ``count`` items (none when ``count`` is 0; ``items[-0:]`` would keep all)."""
    return items[max(0, len(items) - count) :]


__all__ = [
    "Limits",
    "TurnRecord",
    "PendingInsight",
    "ReflectionRecord",
    "FailureInfo",
    "ForkInfo",
    "Counters",
    "ConversationState",
    "initial_state",
    "keep_last",
]
