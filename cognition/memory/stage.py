"""The memory stage: after the controller, turn the newest exchange into beliefs and edges.

One step, for the newest turn of the state it starts from:

1. **extract** — one schema-constrained call (``memory.md``): candidate beliefs and edges;
2. **embed** — the candidate statements, in one batch through the :class:`Embedder` port;
3. **gate** — dedup against the conversation's beliefs (:mod:`.gate`): a near-duplicate
   reinforces what is held, a survivor goes on;
4. **check** — one schema-constrained call (``contradiction.md``) judging each survivor against
   its nearest beliefs, only when there is a pair to judge;
5. **write** — the belief and edge events, then a ``memory_step`` that marks the turn's memory
   done (``ConversationState.memory_turn``) and carries the extraction call's provenance.

All or nothing: any failure (a call, a parse, an embedding) makes the step one
``thinker_failed`` with stage ``memory`` and no belief or edge event, and the writer tries the
step again — the monologue and controller, already done, are not re-run. The failure carries
the extraction's provenance whenever the extraction answered, so replay can answer that call
from the log and fail the later one the same way (:mod:`mirror.replay.verify`).

The contradiction call's provenance rides on the first belief event it decided; every other
belief and edge event has none (their facts come from the two calls, which the log already holds
once each).
"""

from __future__ import annotations

from collections.abc import Sequence

from mirror.cognition.embeddings.port import Embedder, Embeddings
from mirror.cognition.errors import EmbeddingError, LLMError
from mirror.cognition.llm import LLM, ChatRequest, ChatResponse, unanswered_provenance
from mirror.cognition.pipeline import MirrorConfig, Thinking, Thought
from mirror.cognition.prompts import PromptSet
from mirror.events.payloads import MemoryStep, Payload, Provenance, ThinkerFailed
from mirror.projections.state import ConversationState

from .extract import Pair, Verdict, contradiction_request, extraction_request, parse_extraction, parse_verdicts
from .gate import Embedded, belief_payloads, contradiction_pairs, edge_payloads, gate

EMBEDDING_FAILED = "EmbeddingFailed"
"""The ``error_type`` of a step whose embedding call failed (whatever the embedder raised)."""


class RecordedStepFailure(EmbeddingError):
    """Raised by a replaying embedder for a vector the log cannot hold: the step that asked for
    it failed when recorded (its vectors were never written), so it fails again as recorded —
    ``error_type`` and ``message`` are the recorded ``thinker_failed``'s."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type, self.message = error_type, message


def memory_inputs(state: ConversationState) -> tuple[object, ...]:
    """Everything of ``state`` that :func:`remember` reads: two states whose inputs are the same
    objects (:func:`same_memory_inputs`) get the same step. A thinking step's events (monologue,
    narrative, a thinking failure) leave all of them as they were, so the step for a turn can
    start beside that turn's thinking (:meth:`~mirror.cognition.writer.ConversationWriter.think_until_current`).
    Keep it in step with :func:`remember`."""
    return (state.key, state.turn_count, state.recent_turns[-1] if state.recent_turns else None,
            state.beliefs, state.edges)


def same_memory_inputs(a: ConversationState, b: ConversationState) -> bool:
    """Whether :func:`remember` makes the same step of ``a`` and of ``b`` (by identity: the fold
    keeps an unchanged part of the state as the same object)."""
    return all(x is y or x == y for x, y in zip(memory_inputs(a), memory_inputs(b), strict=True))


def memory_behind(state: ConversationState) -> bool:
    """True when the newest turn of ``state`` has no completed memory step yet."""
    if state.turn_count == 0:
        return False
    done = -1 if state.memory_turn is None else state.memory_turn
    return done < state.turn_count - 1


class _StepFailed(Exception):
    """Internal: stop the step; ``provenance`` is what the ``thinker_failed`` records."""

    def __init__(self, error_type: str, message: str, provenance: Provenance) -> None:
        super().__init__(message)
        self.error_type, self.message, self.provenance = error_type, message, provenance


async def _ask(llm: LLM, request: ChatRequest, evidence: Provenance | None) -> ChatResponse:
    """The answer to ``request``; a failure is recorded with ``evidence`` (an earlier answer) when
    given, else with this call's answer or, if none came, this request's fingerprint."""
    try:
        return await llm.chat(request)
    except LLMError as exc:
        raise _StepFailed(exc.kind, str(exc)[:500], evidence or unanswered_provenance(request)) from exc


async def _embed(embedder: Embedder, texts: Sequence[str], evidence: Provenance) -> Embeddings:
    try:
        embeddings = await embedder.embed(texts)
    except RecordedStepFailure as exc:
        raise _StepFailed(exc.error_type, exc.message, evidence) from exc
    except (EmbeddingError, LLMError) as exc:
        # One error type whatever the embedder raised: replay re-raises it from the message.
        raise _StepFailed(EMBEDDING_FAILED, str(exc)[:500], evidence) from exc
    if len(embeddings) != len(texts):
        raise _StepFailed(EMBEDDING_FAILED, f"asked for {len(texts)} vectors, got {len(embeddings)}", evidence)
    return embeddings


async def remember(
    state: ConversationState, llm: LLM, embedder: Embedder, prompts: PromptSet, config: MirrorConfig,
    *, attempt: int = 1,
) -> Thinking:
    """One memory step for the newest turn of ``state``: the events it writes, as a :class:`Thinking`."""
    if not state.recent_turns:
        raise ValueError("there is no turn to remember")
    turn = state.turn_count - 1
    try:
        return Thinking(turn, tuple(await _step(state, llm, embedder, prompts, config, turn)))
    except _StepFailed as failed:
        failure = ThinkerFailed("memory", failed.error_type, failed.message, attempt, turn)
        return Thinking(turn, (Thought(failure, failed.provenance),))


async def _step(state: ConversationState, llm: LLM, embedder: Embedder, prompts: PromptSet,
                config: MirrorConfig, turn: int) -> list[Thought]:
    answer = await _ask(llm, extraction_request(state, prompts, config), None)
    extracted_by = answer.provenance
    try:
        extraction = parse_extraction(answer.content)
    except LLMError as exc:
        raise _StepFailed(exc.kind, str(exc)[:500], extracted_by) from exc
    texts = [candidate.statement for candidate in extraction.candidates]
    thoughts: list[Thought] = []
    if texts:
        embeddings = await _embed(embedder, texts, extracted_by)
        embedded = [
            Embedded(candidate, embeddings.packed(index), embeddings.model, embeddings.request_fingerprint)
            for index, candidate in enumerate(extraction.candidates)
        ]
        decisions = gate(state.key.conversation, state.beliefs, embedded)
        pairs = contradiction_pairs(state.beliefs, decisions)
        verdicts, judged_by = await _judge(llm, pairs, prompts, config, extracted_by)
        judged = {pair.candidate for pair in pairs}
        for position, payload in belief_payloads(decisions, pairs, verdicts, source_turn=turn):
            carries = judged_by if judged_by is not None and position in judged else None
            if carries is not None:
                judged_by = None  # the contradiction call's answer is kept once, on its first event
            thoughts.append(Thought(payload, carries))
    beliefs = len(thoughts)
    edges: list[Payload] = list(edge_payloads(state.edges, extraction.edges))
    thoughts.extend(Thought(edge) for edge in edges)
    marker = MemoryStep(turn, candidates=len(texts), beliefs=beliefs, edges=len(edges))
    thoughts.append(Thought(marker, extracted_by))
    return thoughts


async def _judge(llm: LLM, pairs: Sequence[Pair], prompts: PromptSet, config: MirrorConfig,
                 evidence: Provenance) -> tuple[dict[int, Verdict], Provenance | None]:
    if not pairs:
        return {}, None
    answer = await _ask(llm, contradiction_request(pairs, prompts, config), evidence)
    try:
        return dict(parse_verdicts(answer.content, pairs)), answer.provenance
    except LLMError as exc:
        raise _StepFailed(exc.kind, str(exc)[:500], evidence) from exc


__all__ = ["EMBEDDING_FAILED", "RecordedStepFailure", "memory_behind", "memory_inputs", "remember", "same_memory_inputs"]
