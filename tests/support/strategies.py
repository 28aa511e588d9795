"""Hypothesis strategies shared by the codec and projection property tests.

Two families:

* *Wide* strategies (``payloads``, ``events``, ``provenances``) cover everything the codec must
  carry: any unicode text, any finite float, any 64-bit int, every payload type.
* *Sequence* strategies (``event_sequences``) build valid logs for one stream: seq 1..n with no
  gaps, non-decreasing timestamps with steps that straddle the decay boundaries (7, 14, 28, 56,
  90, 180 days), and belief / edge ids drawn from small pools so that reinforce, recall,
  consistent and contradict meet beliefs and edges that already exist.

Floats that end up *stored in state* (timestamps, reflection ratios, latencies) are finite:
``nan != nan`` would make equal states compare unequal. Belief confidences, which the
projection clamps and does not store verbatim, include NaN, infinities and out-of-range values.
"""

from __future__ import annotations

import string
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from mirror.events.envelope import Event, make_event
from mirror.events.ids import MAX_IDENTIFIER_LENGTH, StreamKey
from mirror.events.payloads import (
    PAYLOAD_TYPES,
    Appraisal,
    Belief,
    Edge,
    EmotionUpdate,
    Episode,
    Fork,
    GoalUpdate,
    Greeting,
    Insight,
    Instructions,
    Interpretation,
    MemoryStep,
    Monologue,
    Narrative,
    Payload,
    PersonaChosen,
    Plan,
    Provenance,
    Recall,
    Reflection,
    RelationshipUpdate,
    Retrieval,
    ThinkerFailed,
    Turn,
)
from mirror.modes import MODES
from mirror.projections.constants import SECONDS_PER_DAY
from mirror.projections.state import Limits

# ------------------------------------------------------------------------------ identifiers

IDENTIFIER_ALPHABET = string.ascii_letters + string.digits + "_-"

identifiers = st.text(alphabet=IDENTIFIER_ALPHABET, min_size=1, max_size=MAX_IDENTIFIER_LENGTH)
"""Every valid tenant / conversation / branch name."""

FORBIDDEN_CHARACTERS = (".", "*", ">", " ", "\t", "\n", "/", "\x00", "é", "$", "\u3000")


@st.composite
def _with_forbidden_character(draw: st.DrawFn) -> str:
    base = draw(st.text(alphabet=IDENTIFIER_ALPHABET, max_size=20))
    bad = draw(st.sampled_from(FORBIDDEN_CHARACTERS) | st.characters(exclude_characters=IDENTIFIER_ALPHABET))
    at = draw(st.integers(0, len(base)))
    return base[:at] + bad + base[at:]


invalid_identifiers: st.SearchStrategy[Any] = st.one_of(
    st.just(""),
    st.text(alphabet=IDENTIFIER_ALPHABET, min_size=MAX_IDENTIFIER_LENGTH + 1, max_size=MAX_IDENTIFIER_LENGTH + 40),
    _with_forbidden_character(),
    st.none(),
    st.integers(),
    st.binary(min_size=1, max_size=8),
)
"""Strings that must never reach a NATS subject, and non-strings."""

branches = st.just("main") | identifiers
stream_keys = st.builds(StreamKey, tenant=identifiers, conversation=identifiers, branch=branches)

# ------------------------------------------------------------------------------- scalars

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
int64s = st.integers(INT64_MIN, INT64_MAX)
"""Ints msgpack can carry (it packs up to 2**64 - 1, but signed 64-bit is the portable range)."""

seqs = st.integers(1, INT64_MAX)
texts = st.text(max_size=40)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
any_floats = st.floats()
optional_seqs = st.none() | st.integers(1, 10_000)


# ------------------------------------------------------------------------------- payloads


def turn_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[Turn]:
    modes = st.sampled_from(MODES) | text
    flags = st.none() | st.booleans()
    return st.builds(Turn, user_message=text, reply=text, narrative_seq=optional_seqs, mode=modes, memory=flags,
                     reflection=flags)


def monologue_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[Monologue]:
    return st.builds(Monologue, reasoning=text, memory=text, goal=text)


def narrative_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[Narrative]:
    return st.builds(Narrative, text=text, monologue_seq=optional_seqs)


MEMORY_TYPES = ("standard", "emotional", "operational", "location")
BELIEF_OPERATIONS = ("assert", "reinforce", "recall", "consistent", "contradict")
EDGE_OPERATIONS = ("assert", "reinforce", "contradict")
EDGE_ORIGINS = ("conversation", "world", "data", "user_confirmed")
THINKER_STAGES = ("monologue", "controller", "reflection", "talker", "memory", "insight",
                  "emotion", "relationship", "goal", "importance")
BELIEF_KINDS = ("belief", "open_loop")

vector_bytes = st.binary(max_size=64)
"""Embedding bytes as the codec and projection see them: opaque, kept as given."""
fingerprints = st.text(alphabet="0123456789abcdef", max_size=64)


def belief_payloads(
    ids: st.SearchStrategy[str] = texts,
    confidence: st.SearchStrategy[float] = finite_floats,
    text: st.SearchStrategy[str] = texts,
) -> st.SearchStrategy[Belief]:
    return st.builds(
        Belief,
        belief_id=ids,
        operation=st.sampled_from(BELIEF_OPERATIONS),
        statement=text,
        memory_type=st.sampled_from(MEMORY_TYPES),
        confidence=confidence,
        related=st.lists(ids, max_size=4).map(tuple),
        about=text,
        kind=st.sampled_from(BELIEF_KINDS),
        source_turn=st.none() | st.integers(0, INT64_MAX),
        embedding=vector_bytes,
        embedding_model=text,
        embedding_fingerprint=fingerprints,
    )


def recall_payloads(
    ids: st.SearchStrategy[str] = texts,
    nodes: st.SearchStrategy[str] = texts,
    text: st.SearchStrategy[str] = texts,
) -> st.SearchStrategy[Recall]:
    return st.builds(
        Recall,
        query=text,
        query_embedding=vector_bytes,
        embedding_model=text,
        query_fingerprint=fingerprints,
        belief_ids=st.lists(ids, max_size=5).map(tuple),
        review_ids=st.lists(text, max_size=3).map(tuple),
        edges=st.lists(st.tuples(nodes, text, nodes), max_size=3).map(tuple),
    )


def edge_payloads(
    nodes: st.SearchStrategy[str] = texts, relations: st.SearchStrategy[str] = texts
) -> st.SearchStrategy[Edge]:
    triples = st.tuples(nodes, relations, nodes)
    return st.builds(
        Edge,
        src=nodes,
        relation=relations,
        dst=nodes,
        operation=st.sampled_from(EDGE_OPERATIONS),
        origin=st.sampled_from(EDGE_ORIGINS),
        contradicts=st.none() | triples,
    )


def insight_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[Insight]:
    return st.builds(Insight, text=text, for_turn=st.none() | st.integers(0, 10_000))


DECAY_VERDICTS = ("retain", "decay", "forget")


def reflection_payloads(
    text: st.SearchStrategy[str] = texts, ids: st.SearchStrategy[str] = texts
) -> st.SearchStrategy[Reflection]:
    decisions = st.tuples(ids, st.sampled_from(DECAY_VERDICTS), st.sampled_from(DECAY_VERDICTS), text)
    return st.builds(
        Reflection,
        portrait=text,
        accepted=st.booleans(),
        reason=text,
        unique_ratio=finite_floats,
        warning=text,
        insights_used=st.integers(0, 1_000),
        episodes_used=st.integers(0, 10),
        for_turn=st.none() | st.integers(0, 10_000),
        triggers=st.lists(text, max_size=3).map(tuple),
        decisions=st.lists(decisions, max_size=4).map(tuple),
        decay_fingerprint=fingerprints,
        decay_answer=text,
        decay_tokens=st.integers(0, 2**31),
        decay_ms=st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    )


def thinker_failed_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[ThinkerFailed]:
    return st.builds(
        ThinkerFailed,
        stage=st.sampled_from(THINKER_STAGES),
        error_type=text,
        message=text,
        attempt=st.integers(1, 10),
        for_turn=st.none() | st.integers(0, 10_000),
    )


def fork_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[Fork]:
    return st.builds(Fork, parent_branch=branches, fork_seq=st.integers(0, 10_000), prompt_set=text, reason=text)


def memory_step_payloads() -> st.SearchStrategy[MemoryStep]:
    counts = st.integers(0, 50)
    return st.builds(MemoryStep, for_turn=st.integers(0, 10_000), candidates=counts, beliefs=counts, edges=counts)


# ------------------------------------------------------------------------------ the persona mind

PERSONA_NAMES = st.sampled_from(("joy", "fear", "trust", "anger", "closeness", "warmth"))
"""Few names, so updates often name what the ``persona`` event declared (and sometimes not)."""
turns = st.integers(0, 10_000)
scores = st.dictionaries(PERSONA_NAMES, finite_floats, max_size=4)


def persona_chosen_payloads(text: st.SearchStrategy[str] = texts) -> st.SearchStrategy[PersonaChosen]:
    return st.builds(
        PersonaChosen, name=text, version=fingerprints, card=text,
        emotions=st.lists(PERSONA_NAMES, max_size=4, unique=True).map(tuple), relationship=scores,
        hard_goals=st.lists(text, max_size=3).map(tuple), soft_goals=st.lists(text, max_size=3, unique=True).map(tuple),
        biography=st.lists(text, max_size=3).map(tuple), biography_importance=st.lists(finite_floats, max_size=3).map(tuple),
        biography_embeddings=st.lists(vector_bytes, max_size=3).map(tuple), embedding_model=text,
        embedding_fingerprint=fingerprints, order=st.sampled_from(("appraisal_first", "plan_first")),
        user_name=text,
    )


def retrieval_payloads() -> st.SearchStrategy[Retrieval]:
    ranked = st.lists(st.tuples(turns, finite_floats), max_size=3)
    return st.builds(
        lambda episodes, bio, query, vector: Retrieval(
            for_turn=0, query=query, query_embedding=vector, episode_turns=tuple(t for t, _ in episodes),
            episode_scores=tuple(s for _, s in episodes), biography_entries=tuple(t for t, _ in bio),
            biography_scores=tuple(s for _, s in bio)),
        ranked, ranked, texts, vector_bytes)


def emotion_payloads() -> st.SearchStrategy[EmotionUpdate]:
    return st.builds(EmotionUpdate, for_turn=turns, intensities=scores, reason=texts)


def relationship_payloads() -> st.SearchStrategy[RelationshipUpdate]:
    return st.builds(RelationshipUpdate, for_turn=turns, dimensions=scores, reason=texts)


def goal_payloads() -> st.SearchStrategy[GoalUpdate]:
    return st.builds(GoalUpdate, for_turn=turns, active_hard_goal=st.integers(-1, 4), hard_goal_met=st.booleans(),
                     soft_goals=st.dictionaries(texts, finite_floats, max_size=3), reason=texts)


def episode_payloads() -> st.SearchStrategy[Episode]:
    return st.builds(Episode, for_turn=turns, text=texts, importance=finite_floats, embedding=vector_bytes,
                     embedding_model=texts, embedding_fingerprint=fingerprints)


PAYLOAD_STRATEGIES: dict[type[Payload], st.SearchStrategy[Payload]] = {
    Turn: turn_payloads(),
    Monologue: monologue_payloads(),
    Narrative: narrative_payloads(),
    Belief: belief_payloads(),
    Edge: edge_payloads(),
    Insight: insight_payloads(),
    Reflection: reflection_payloads(),
    ThinkerFailed: thinker_failed_payloads(),
    Fork: fork_payloads(),
    Recall: recall_payloads(),
    MemoryStep: memory_step_payloads(),
    PersonaChosen: persona_chosen_payloads(),
    Interpretation: st.builds(Interpretation, text=texts, for_turn=turns),
    Retrieval: retrieval_payloads(),
    Plan: st.builds(Plan, text=texts, for_turn=turns),
    Appraisal: st.builds(Appraisal, text=texts, for_turn=turns),
    EmotionUpdate: emotion_payloads(),
    RelationshipUpdate: relationship_payloads(),
    GoalUpdate: goal_payloads(),
    Episode: episode_payloads(),
    Greeting: st.builds(Greeting, text=texts, persona_version=fingerprints, source=st.just("first_mes")),  # cards (issue 35)
    Instructions: st.builds(Instructions, text=texts),  # (issue 35) the client's instructions
}
assert set(PAYLOAD_STRATEGIES) == set(PAYLOAD_TYPES), "a payload type has no strategy"

payloads: st.SearchStrategy[Payload] = st.one_of(*PAYLOAD_STRATEGIES.values())
"""Any payload of any type, with wide field values."""

# ----------------------------------------------------------------------------- provenance

parameter_values = st.one_of(finite_floats, int64s, texts)
provenances = st.builds(
    Provenance,
    model=texts,
    prompt_set=texts,
    request_fingerprint=st.text(alphabet="0123456789abcdef", min_size=0, max_size=64),
    parameters=st.dictionaries(texts, parameter_values, max_size=4),
    latency_ms=st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    prompt_tokens=st.integers(0, 2**31),
    completion_tokens=st.integers(0, 2**31),
    response=st.none() | texts,
).flatmap(
    # A response digest implies no response (the codec refuses both at once).
    lambda provenance: st.just(provenance)
    if provenance.response is not None
    else st.builds(lambda digest: replace(provenance, response_digest=digest), fingerprints)
)

# --------------------------------------------------------------------------------- events


def events(payload: st.SearchStrategy[Payload] = payloads) -> st.SearchStrategy[Event]:
    """One event of any stream, at any seq, with any timestamp; wide values everywhere."""
    return st.builds(
        make_event,
        key=stream_keys,
        seq=seqs,
        payload=payload,
        turn=st.integers(0, INT64_MAX),
        causation=st.none() | texts,
        provenance=st.none() | provenances,
        timestamp=finite_floats,
    )


# -------------------------------------------------------------------------------- sequences

BELIEF_POOL = ("b0", "b1", "b2", "b3")
RECALLED_POOL = (*BELIEF_POOL, "unknown")
"""Recall names pooled beliefs and, sometimes, one no event ever asserted."""
NODE_POOL = ("n0", "n1", "n2")
RELATION_POOL = ("causes", "prevents")

DAY = SECONDS_PER_DAY
TIME_STEPS = st.one_of(
    st.sampled_from([0.0, 1.0, 60.0, 3_600.0, DAY, 7 * DAY, 14 * DAY, 28 * DAY, 56 * DAY, 90 * DAY, 180 * DAY]),
    st.floats(min_value=0.0, max_value=400 * DAY, allow_nan=False),
)
"""Gaps between consecutive events: zero (same instant) up to more than a year."""

short_texts = st.text(max_size=12)
monologue_texts = short_texts | st.text(alphabet="ab ", min_size=40, max_size=400)
"""Mostly short, sometimes long enough to push a small token budget over its high-water mark."""

sequence_payloads: st.SearchStrategy[Payload] = st.one_of(
    belief_payloads(ids=st.sampled_from(BELIEF_POOL), confidence=any_floats, text=short_texts),
    edge_payloads(nodes=st.sampled_from(NODE_POOL), relations=st.sampled_from(RELATION_POOL)),
    turn_payloads(short_texts),
    monologue_payloads(monologue_texts),
    narrative_payloads(short_texts),
    insight_payloads(short_texts),
    reflection_payloads(short_texts, ids=st.sampled_from(BELIEF_POOL)),
    thinker_failed_payloads(short_texts),
    fork_payloads(short_texts),
    recall_payloads(ids=st.sampled_from(RECALLED_POOL), nodes=st.sampled_from(NODE_POOL), text=short_texts),
    belief_payloads(ids=st.sampled_from(BELIEF_POOL), confidence=st.floats(0.0, 1.0), text=short_texts),
    edge_payloads(nodes=st.sampled_from(NODE_POOL), relations=st.sampled_from(RELATION_POOL)),
)
"""Payloads for sequences; beliefs and edges appear twice so their interactions are common,
and recalls name pooled beliefs so 3+ recalls (a doubled half-life) happen in short logs."""

_LLM_PRODUCED = (Monologue, Narrative, Belief, Edge, Insight, Reflection, Turn)

sequence_provenances = st.builds(
    Provenance,
    model=st.sampled_from(["gemma-3-270m", "recorded"]),
    prompt_set=st.sampled_from(["v1", "v2"]),
    request_fingerprint=st.sampled_from(["f00d", "beef", "cafe"]),
    parameters=st.just({"temperature": 0.7, "max_tokens": 3000}),
    latency_ms=st.sampled_from([0.0, 12.5, 850.0]),
    prompt_tokens=st.integers(0, 20_000),
    completion_tokens=st.integers(0, 3_000),
)
"""Cheap provenance for sequences: projections ignore it, the codec tests cover it widely."""


@st.composite
def event_sequences(
    draw: st.DrawFn,
    key: StreamKey | None = None,
    *,
    min_size: int = 1,
    max_size: int = 30,
    payload: st.SearchStrategy[Payload] = sequence_payloads,
) -> list[Event]:
    """A valid log of one stream: seq 1..n contiguous, timestamps non-decreasing.

    ``turn`` counts the Turn events so far; ``causation`` sometimes names the previous event;
    LLM-produced payloads sometimes carry provenance.
    """
    key = draw(stream_keys) if key is None else key
    size = draw(st.integers(min_size, max_size))
    timestamp = draw(st.floats(min_value=0.0, max_value=2e9, allow_nan=False))
    log: list[Event] = []
    turn = 0
    for seq in range(1, size + 1):
        timestamp += draw(TIME_STEPS)
        body = draw(payload)
        if isinstance(body, Turn):
            turn += 1
        provenance = draw(st.none() | sequence_provenances) if isinstance(body, _LLM_PRODUCED) else None
        causation = log[-1].id if bool(log) and draw(st.booleans()) else None
        log.append(
            make_event(key, seq, body, turn=turn, causation=causation, provenance=provenance, timestamp=timestamp)
        )
    return log


@st.composite
def limits(draw: st.DrawFn) -> Limits:
    """Small bounds, so windows and the monologue budget are exercised by short sequences."""
    trim_above = draw(st.integers(1, 100))
    return Limits(
        recent_turns=draw(st.integers(0, 5)),
        monologue_token_budget=draw(st.integers(0, 400)),
        monologue_trim_above_percent=trim_above,
        monologue_trim_to_percent=draw(st.integers(1, trim_above)),
        pending_insights=draw(st.integers(0, 5)),
        reflection_times=draw(st.integers(0, 5)),
    )


any_limits = st.just(Limits()) | limits()

# ------------------------------------------------------------------------ msgpack values

msgpack_scalars = st.one_of(
    st.none(),
    st.booleans(),
    int64s,
    st.integers(0, 2**64 - 1),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
)
msgpack_values: st.SearchStrategy[Any] = st.recursive(
    msgpack_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
"""Anything msgpack can pack with string map keys: what a foreign or corrupt writer might send."""

__all__ = [
    "IDENTIFIER_ALPHABET",
    "identifiers",
    "invalid_identifiers",
    "stream_keys",
    "seqs",
    "PAYLOAD_STRATEGIES",
    "payloads",
    "provenances",
    "events",
    "BELIEF_POOL",
    "RECALLED_POOL",
    "recall_payloads",
    "belief_payloads",
    "NODE_POOL",
    "RELATION_POOL",
    "event_sequences",
    "limits",
    "any_limits",
    "msgpack_values",
]
