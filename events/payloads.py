"""Event payloads: one frozen class per event type, each with its schema version.

A payload says what happened, in the past tense of the domain, and nothing else: the
envelope (:class:`mirror.events.Event`) carries who, where and when. Adding a field is a new
schema version with an upcaster in :mod:`mirror.events.upcasting`; old records are never
rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

MemoryType = Literal["standard", "emotional", "operational", "location"]
EdgeOrigin = Literal["conversation", "world", "data", "user_confirmed"]
BeliefOperation = Literal["assert", "reinforce", "recall", "consistent", "contradict"]
DecayVerdict = Literal["retain", "decay", "forget"]
EdgeOperation = Literal["assert", "reinforce", "contradict"]
BeliefKind = Literal["belief", "open_loop"]
ThinkerStage = Literal["monologue", "controller", "reflection", "talker", "memory", "insight",
                       "emotion", "relationship", "goal", "importance"]
PlanOrder = Literal["appraisal_first", "plan_first"]


@dataclass(frozen=True, slots=True)
class Payload:
    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class Turn(Payload):
    """The user said something and the Talker answered, seeing the narrative at ``narrative_seq``.

    ``mode``, ``memory`` and ``reflection`` are how the conversation thinks (a MIRROR mode;
    whether the memory stage runs and the Talker recalls; whether insights are drawn and
    reflection runs): its first turn fixes them, so a restarted conversation goes on as it
    began. Version 1 (the prototype) stored ``user`` and ``assistant`` and no narrative
    reference; version 2 did not record ``memory``, version 3 not ``reflection`` (``None``:
    the stack's setting), version 4 no ``idempotency_key``.

    ``idempotency_key``: the key the client sent with the request (``Idempotency-Key``), so a
    retry of it — through any gateway, after any restart — is answered with this turn instead of
    appending another (``None``: the client sent none).
    """

    TYPE: ClassVar[str] = "turn"
    VERSION: ClassVar[int] = 5
    user_message: str
    reply: str
    narrative_seq: int | None = None
    mode: str = "full"
    memory: bool | None = True
    reflection: bool | None = False
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Monologue(Payload):
    """The Inner Monologue Manager produced its three parallel thought streams for a turn."""

    TYPE: ClassVar[str] = "monologue"
    reasoning: str
    memory: str
    goal: str


@dataclass(frozen=True, slots=True)
class Narrative(Payload):
    """The Cognitive Controller regenerated the whole narrative; it replaces the previous one."""

    TYPE: ClassVar[str] = "narrative"
    text: str
    monologue_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Belief(Payload):
    """A belief was asserted, reinforced, recalled, supported or contradicted.

    The dedup gate and the contradiction check decide ``operation``; the projection applies the
    confidence arithmetic, so every state is a pure function of the events.
    ``related`` names the beliefs a ``consistent`` event boosts or a ``contradict`` event opposes.

    Version 2 adds what the memory stage knows: ``about`` (what or whom the belief concerns),
    ``kind`` (an open loop is a question or promise still pending; the dedup gate is looser for
    those), ``source_turn`` (the envelope turn the belief rests on) and the statement's vector.

    The memory stage's events carry the vector of the candidate they decided on: ``embedding``
    is little-endian float32 (:mod:`mirror.events.vectors`), ``embedding_model`` the embedder's
    model and ``embedding_fingerprint`` the fingerprint of the embedding request that produced
    it. Those two sit on the payload rather than in :class:`Provenance` because one belief event
    rests on two calls — the extraction chat (its provenance) and the embedding — and replay
    answers each from the log by its own fingerprint. A ``reinforce`` from the dedup gate carries
    its candidate's vector too (a paraphrase's vector is nowhere else, and replay re-decides the
    gate with zero embedding calls); the old ``recall`` operation and hand-written events may
    leave all three empty. Recalls never copy belief vectors: a :class:`Recall` names ids.
    """

    TYPE: ClassVar[str] = "belief"
    VERSION: ClassVar[int] = 2
    belief_id: str
    operation: BeliefOperation
    statement: str = ""
    memory_type: MemoryType = "standard"
    confidence: float = 0.6
    related: tuple[str, ...] = ()
    about: str = ""
    kind: BeliefKind = "belief"
    source_turn: int | None = None
    embedding: bytes = b""
    embedding_model: str = ""
    embedding_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class Recall(Payload):
    """Before a turn, the Talker was given these memories; nothing else happened to them.

    Recall is a pure function of the state and the query's vector, so the event records the
    vector (``query_embedding``, little-endian float32) with the embedding request's
    ``query_fingerprint`` and ``embedding_model``: replay reproduces the same recall with zero
    embedding calls, and the projection counts the recalls (3+ double a belief's half-life).
    ``belief_ids`` are best first; ``review_ids`` name open review items
    (:func:`mirror.projections.beliefs.review_id`); ``edges`` are the ``(src, relation, dst)``
    of the 2-hop walk from what the message mentions. No LLM produced it: no provenance.

    ``depth`` is how many items of each single ranking (keyword, vector) went into the fusion,
    and ``analyzer`` how the keyword ranking tokenized (``words`` or ``stemmed``), so replay
    re-runs a recall exactly as it was made. Version 1 recorded neither: those recalls fused 100
    of each; versions 1 and 2 tokenized ``words`` (the upcasters say so).
    """

    TYPE: ClassVar[str] = "recall"
    VERSION: ClassVar[int] = 3
    query: str
    query_embedding: bytes = b""
    embedding_model: str = ""
    query_fingerprint: str = ""
    belief_ids: tuple[str, ...] = ()
    review_ids: tuple[str, ...] = ()
    edges: tuple[tuple[str, str, str], ...] = ()
    depth: int = 0
    """Items of each single ranking fused (0: not recorded; only a hand-made payload lacks it)."""
    analyzer: str = ""
    """The keyword ranking's tokenizer ("": not recorded; replay then uses ``words``, as version 2 did)."""


@dataclass(frozen=True, slots=True)
class Edge(Payload):
    """A causal edge ``src -relation-> dst`` was asserted, reinforced or contradicted."""

    TYPE: ClassVar[str] = "edge"
    src: str
    relation: str
    dst: str
    operation: EdgeOperation = "assert"
    origin: EdgeOrigin = "conversation"
    contradicts: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class MemoryStep(Payload):
    """The memory stage finished for ``for_turn``: the belief and edge events just before this one
    (same causation) are everything it wrote.

    Why an event of its own: a step may rightly write nothing (an exchange with nothing worth
    keeping), and the projection still has to know that turn's memory is done, or the stage
    would run again; and the extraction call's answer needs one home in the log for replay —
    this event's provenance. ``candidates`` is how many beliefs the extraction proposed,
    ``beliefs`` / ``edges`` how many events it wrote of each.
    """

    TYPE: ClassVar[str] = "memory_step"
    for_turn: int
    candidates: int = 0
    beliefs: int = 0
    edges: int = 0


@dataclass(frozen=True, slots=True)
class Insight(Payload):
    """A one-sentence insight about the interaction of ``for_turn``, pending the next reflection.

    Drawn by one model call per thinking step (its provenance); the projection keeps the
    pending ones (bounded) and marks the turn's insight done (``insight_turn``). Version 1 had
    no ``for_turn`` (``None``: nothing emitted version 1 but hand-made logs).
    """

    TYPE: ClassVar[str] = "insight"
    VERSION: ClassVar[int] = 2
    text: str
    for_turn: int | None = None


@dataclass(frozen=True, slots=True)
class Reflection(Payload):
    """A reflection ran after ``for_turn``: the whole of it, in one event (never half of one).

    ``portrait`` is what the consolidation call wrote; ``accepted`` says whether it passed
    validation and replaced the previous portrait (``reason`` says why not). ``unique_ratio`` is
    the health check's vocabulary diversity and ``warning`` what it found ("" when healthy).
    ``triggers`` name why it ran (``periodic``, ``review``, ``belief_burst``, ``forced``).

    ``decisions`` are the decay step's, one ``(belief_id, proposed, applied, rule)`` per belief
    it looked at: the model proposes (``retain`` / ``decay`` / ``forget``; a parse failure
    proposes ``retain`` for all), the rules dispose; ``rule`` names the rule that overruled the
    proposal ("" when none did). The projection applies every ``applied`` ``decay`` and
    ``forget``: a forgotten belief leaves the state, never the log.

    The event rests on two calls. Its provenance is the consolidation call's; the decay call's
    fingerprint, raw answer, tokens and milliseconds sit on the payload (``decay_*``; all empty
    when no belief was old enough to ask about), as a belief's embedding does, so replay
    answers both from the log and one message holds the whole reflection: a crash cannot leave
    a decay without its reflection. ``insights_used`` / ``episodes_used`` count what the
    consolidation was given. Version 1 (nothing emitted it) called the portrait ``snapshot``.
    """

    TYPE: ClassVar[str] = "reflection"
    VERSION: ClassVar[int] = 2
    portrait: str
    accepted: bool
    reason: str = ""
    unique_ratio: float = 1.0
    warning: str = ""
    insights_used: int = 0
    episodes_used: int = 0
    for_turn: int | None = None
    triggers: tuple[str, ...] = ()
    decisions: tuple[tuple[str, str, str, str], ...] = ()
    decay_fingerprint: str = ""
    decay_answer: str = ""
    decay_tokens: int = 0
    decay_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class ThinkerFailed(Payload):
    """A thinking step failed; the previous good state stays in force and the step is retried."""

    TYPE: ClassVar[str] = "thinker_failed"
    stage: ThinkerStage
    error_type: str
    message: str
    attempt: int = 1
    for_turn: int | None = None


@dataclass(frozen=True, slots=True)
class Fork(Payload):
    """This branch was forked from ``parent_branch`` after ``fork_seq`` to re-think history.

    ``prompt_set`` is the version of the prompt set the branch is thought with. Version 2 records
    that prompt set with the branch, so ``replay verify`` can rebuild it without being handed a
    directory: ``template_digests`` holds a digest of every template (file name → 16 hex digits
    of blake2b-64) and ``changed_templates`` the text of only those templates that differ from the
    built-in default set (:mod:`mirror.replay.prompt_record`): a fork made from one changed
    template stores that template, not the whole set again. Version 1 recorded the version alone
    (the upcaster leaves both maps empty: unknown).
    """

    TYPE: ClassVar[str] = "fork"
    VERSION: ClassVar[int] = 2
    parent_branch: str
    fork_seq: int
    prompt_set: str = ""
    reason: str = ""
    template_digests: dict[str, str] = field(default_factory=dict)
    changed_templates: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- the persona mind
# A conversation whose first event is ``persona`` is a character (the dual-process affective
# persona): each step of its cycle is one of the events below. On a turn's path, appended with the
# ``turn`` (whose reply is the formulation): ``interpretation`` (think), ``retrieval``, ``plan`` and
# ``appraisal`` (in the chosen order). After it, in the background: ``emotion``, ``relationship``,
# ``goal`` and ``episode`` (importance, with the episode's vector); a failed one is a
# ``thinker_failed`` of its stage and leaves the previous state in force.


@dataclass(frozen=True, slots=True)
class PersonaChosen(Payload):
    """The conversation is this character (``mind = persona``), fixed for its whole life.

    ``version`` is the persona's content hash; ``card`` the persona's content as canonical JSON
    (what the prompts are built from: a replay or a recompute needs no persona store). The
    fields after it are what the projection starts from: the named ``emotions`` (each at 0), the
    ``relationship`` dimensions at their start values, the goals, and the biography with each
    entry's ``importance``. ``biography_embeddings`` are the entries' vectors (little-endian
    float32, in order) from one embedding request (``embedding_fingerprint``), so retrieval
    scores biography by similarity and replay makes no embedding call. ``order`` is which of
    plan and appraisal comes first (appraisal first by default: the paper's plan-first order
    showed a "rational bias").
    """

    TYPE: ClassVar[str] = "persona"
    VERSION: ClassVar[int] = 2
    name: str
    version: str
    card: str
    emotions: tuple[str, ...] = ()
    relationship: dict[str, float] = field(default_factory=dict)
    hard_goals: tuple[str, ...] = ()
    soft_goals: tuple[str, ...] = ()
    biography: tuple[str, ...] = ()
    biography_importance: tuple[float, ...] = ()
    biography_embeddings: tuple[bytes, ...] = ()
    embedding_model: str = ""
    embedding_fingerprint: str = ""
    order: PlanOrder = "appraisal_first"
    user_name: str = ""
    """Who the character talks to: the name ``{{user}}`` (and ``<USER>``) become in every piece of the
    card that reaches a prompt (:mod:`mirror.cognition.persona.macros`); the biography above is
    already substituted with it. Version 1 recorded none and substituted no macro: ``""`` (the
    upcaster's) keeps those conversations' prompts as they ran."""


# ----------------------------------------------------------------- the greeting (cards, issue 35)
@dataclass(frozen=True, slots=True)
class Greeting(Payload):
    """The character opened the conversation with its card's greeting (``first_mes``), macros
    substituted for the conversation's user; appended with the ``persona`` event it follows, so it
    is the first assistant message of the history the persona's formulation is given.

    No model wrote it (no provenance): ``persona_version`` names the card it came from (the
    ``persona`` event's version) and ``source`` the card's field (``first_mes``); ``replay verify``
    checks that the card still gives this text."""

    TYPE: ClassVar[str] = "greeting"
    text: str
    persona_version: str
    source: str = "first_mes"
# ------------------------------------------------------------ end of the greeting (cards, issue 35)


@dataclass(frozen=True, slots=True)
class Interpretation(Payload):
    """*think*: the character's objective first-person reading of the user's utterance; also the
    retrieval query. ``for_turn`` is the turn it reads (the ``turn`` event that follows)."""

    TYPE: ClassVar[str] = "interpretation"
    text: str
    for_turn: int


@dataclass(frozen=True, slots=True)
class Retrieval(Payload):
    """The episodes and biography entries retrieved for a turn, best first, with their scores.

    Episodes score 0.5 similarity + 0.3 recency + 0.2 importance, biography entries 0.7
    similarity + 0.3 importance (:mod:`mirror.cognition.persona.retrieval`). ``episode_turns``
    name episodes by the turn they record; ``biography_entries`` are indices into the persona's
    biography. The query's vector is recorded (``query_embedding``, with the embedding request's
    fingerprint and model) so replay retrieves again with zero embedding calls; empty when the
    conversation had nothing to retrieve. No model produced it: no provenance.
    """

    TYPE: ClassVar[str] = "retrieval"
    for_turn: int
    query: str
    query_embedding: bytes = b""
    embedding_model: str = ""
    query_fingerprint: str = ""
    episode_turns: tuple[int, ...] = ()
    episode_scores: tuple[float, ...] = ()
    biography_entries: tuple[int, ...] = ()
    biography_scores: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan(Payload):
    """*plan*: what the character means to do with its reply, for ``for_turn``."""

    TYPE: ClassVar[str] = "plan"
    text: str
    for_turn: int


@dataclass(frozen=True, slots=True)
class Appraisal(Payload):
    """*appraisal*: the character's visceral, unfiltered reaction to ``for_turn``."""

    TYPE: ClassVar[str] = "appraisal"
    text: str
    for_turn: int


@dataclass(frozen=True, slots=True)
class EmotionUpdate(Payload):
    """The character's emotions after ``for_turn``: every named emotion's intensity in [0, 1]."""

    TYPE: ClassVar[str] = "emotion"
    for_turn: int
    intensities: dict[str, float] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RelationshipUpdate(Payload):
    """The relationship with the user after ``for_turn``: every dimension's value in [0, 1]."""

    TYPE: ClassVar[str] = "relationship"
    for_turn: int
    dimensions: dict[str, float] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GoalUpdate(Payload):
    """The goals after ``for_turn``.

    ``active_hard_goal`` is the index of the hard goal that was active when the step ran and
    ``hard_goal_met`` whether it is met now: the projection then activates the next one. Hard goals
    go strictly one after another: an event naming any other hard goal changes nothing.
    ``soft_goals`` gives each soft goal's progress in [0, 1] (all of them pursued all the time).
    """

    TYPE: ClassVar[str] = "goal"
    for_turn: int
    active_hard_goal: int = 0
    hard_goal_met: bool = False
    soft_goals: dict[str, float] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Episode(Payload):
    """What was said at ``for_turn``, kept as an episodic memory with its ``importance`` in [0, 1]
    (the importance step's score) and its vector (little-endian float32, from the embedding
    request ``embedding_fingerprint``), so later retrievals rank it and replay needs no call."""

    TYPE: ClassVar[str] = "episode"
    for_turn: int
    text: str
    importance: float = 0.5
    embedding: bytes = b""
    embedding_model: str = ""
    embedding_fingerprint: str = ""


# --------------------------------------------------------------------------- the client's instructions
# (issue 35) What the client's system messages say, recorded when it changes.


@dataclass(frozen=True, slots=True)
class Instructions(Payload):
    """The client's instructions for this conversation changed to ``text`` (``""``: none).

    Chat completions' ``system`` and ``developer`` messages, or the native route's ``instructions``
    field: the front end's own system prompt (a SillyTavern card, an Open WebUI system prompt).
    Recorded only when the text differs from the conversation's current instructions, so a front
    end that resends the same system prompt every turn appends nothing. Appended with the turn it
    came with, right before that turn's path (its recall, or a persona's steps): the Talker of that
    turn already reads it, and replay reads it back from here rather than from a request. The
    client wrote it, no model: no provenance.
    """

    TYPE: ClassVar[str] = "instructions"
    text: str

# --------------------------------------------------------------------------- end of the client's instructions


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where an LLM-produced event came from: enough to audit it and to replay it exactly.

    ``request_fingerprint`` hashes the exact request (model, messages, parameters); replay
    serves a recorded response whose fingerprint matches. API keys are never part of it.

    One copy of each model output: ``response`` holds the model's raw answer only when the
    payload cannot give it back. When the payload rebuilds into the exact answer, or into one
    the pipeline parses to the identical payload (checked when the event is made), ``response``
    is ``None`` and ``response_digest`` is the digest of the rebuilt answer
    (:mod:`mirror.cognition.responses`): replay rebuilds the answer from the payload and refuses
    it if the digest no longer matches, so a payload edited on its own is still caught, as the
    second copy used to catch it. Invariant: a non-empty ``response_digest`` implies
    ``response is None``. Records of format 1 predate the digest and carry the response.
    """

    model: str
    prompt_set: str
    request_fingerprint: str
    parameters: dict[str, float | int | str] = field(default_factory=dict)
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    response: str | None = None
    response_digest: str = ""

    @property
    def response_in_payload(self) -> bool:
        """True when the payload, not this provenance, holds the model's answer."""
        return bool(self.response_digest)


PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    Turn,
    Monologue,
    Narrative,
    Belief,
    Edge,
    Insight,
    Reflection,
    ThinkerFailed,
    Fork,
    Recall,
    MemoryStep,
    PersonaChosen,
    Interpretation,
    Retrieval,
    Plan,
    Appraisal,
    EmotionUpdate,
    RelationshipUpdate,
    GoalUpdate,
    Episode,
    Greeting,  # cards (issue 35)
    Instructions,
)

__all__ = [
    "MemoryType",
    "EdgeOrigin",
    "BeliefOperation",
    "BeliefKind",
    "DecayVerdict",
    "EdgeOperation",
    "ThinkerStage",
    "Payload",
    "Turn",
    "Monologue",
    "Narrative",
    "Belief",
    "Recall",
    "MemoryStep",
    "Edge",
    "Insight",
    "Reflection",
    "ThinkerFailed",
    "Fork",
    "PlanOrder",
    "PersonaChosen",
    "Interpretation",
    "Retrieval",
    "Plan",
    "Appraisal",
    "EmotionUpdate",
    "RelationshipUpdate",
    "GoalUpdate",
    "Episode",
    "Greeting",  # cards (issue 35)
    "Instructions",
    "Provenance",
    "PAYLOAD_TYPES",
]
