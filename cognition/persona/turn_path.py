"""The persona cycle's steps on a turn's path: think, retrieve, plan and appraise, formulate.

What the user waits for is the formulation, and it needs the other four: the *think* step's
interpretation is the retrieval query, retrieval feeds plan and appraisal, and the formulation
says what the plan intends in the voice the appraisal colours. So these run in order before the
reply (plan and appraisal in the configured order, each seeing the other when it comes second);
the emotion, relationship and goal updates and the importance score run after it, in the
background (:mod:`mirror.cognition.persona.background`), and the next turn reads what they
decided — as MIRROR's Talker reads the narrative its Thinker wrote after the previous turn.

Pure given the model and the embedder: :func:`persona_turn` returns the payloads and their
provenance, and the caller appends them with the ``turn`` (whose reply is the formulation) in
one fenced append. A model failure on the path raises (nothing is appended; the gateway answers
502 or 503, as for the Talker); an embedder failure only costs the retrieval its similarity.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mirror.cognition.embeddings import Embedder
from mirror.cognition.errors import CognitionError
from mirror.cognition.history import bound_history
from mirror.cognition.instructions import PERSONA_BLOCK, with_block
from mirror.cognition.llm import LLM, ChatMessage, ChatResponse, StrippedTokens, TokenSink, chat_to
from mirror.cognition.pipeline import MirrorConfig, Thought, UnusableOutput, conversation_messages
from mirror.cognition.prompts import PromptSet
from mirror.cognition.responses import one_copy
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import (
    Appraisal,
    Greeting,
    Interpretation,
    Payload,
    PersonaChosen,
    Plan,
    Provenance,
    Retrieval,
    Turn,
)
from mirror.projections.persona import PersonaState
from mirror.projections.state import ConversationState

from .macros import DEFAULT_USER_NAME, substitute
from .model import Persona, canonical_json
from .prompting import card_text, character_block, request
from .retrieval import Retrieved, retrieve

log = logging.getLogger(__name__)

PLAN_ORDERS = ("appraisal_first", "plan_first")
STEP_MAX_TOKENS = 120
"""Think, plan and appraisal are one to three sentences each (~60 tokens); a small model that rambles
is cut at twice that (measured on the offline model: 300 made these three steps 60 % of a turn)."""
EMBED_TIMEOUT_S = 10.0


class NotAPersona(ValueError):
    """A persona step was asked of a conversation whose mind is not ``persona``."""


def _text(response: ChatResponse, step: str) -> str:
    text = " ".join(response.content.split())
    if not text:
        raise UnusableOutput(f"the persona's {step} step returned nothing")
    return text


async def choose_persona(persona: Persona, embedder: Embedder | None, order: str = "appraisal_first",
                         user_name: str = DEFAULT_USER_NAME) -> PersonaChosen:
    """The ``persona`` event that makes a conversation this character, talking to ``user_name``;
    the biography (lorebook entries included) is recorded with its macros substituted and embedded
    once here (one call; without an embedder, or if it fails, retrieval ranks the biography by
    importance alone)."""
    if order not in PLAN_ORDERS:
        raise ValueError(f"unknown order {order!r}; choose one of {', '.join(PLAN_ORDERS)}")
    texts = [persona.said(entry.text, user_name) for entry in persona.biography]
    vectors: tuple[bytes, ...] = ()
    model = fingerprint = ""
    if embedder is not None and texts:
        try:
            embedded = await asyncio.wait_for(embedder.embed(texts), EMBED_TIMEOUT_S)
            vectors = tuple(embedded.packed(index) for index in range(len(texts)))
            model, fingerprint = embedded.model, embedded.request_fingerprint
        except (CognitionError, TimeoutError, OSError) as exc:
            log.warning("persona %s: biography not embedded (%r); retrieval ranks it by importance alone",
                        persona.name, exc)
    return PersonaChosen(
        name=persona.name, version=persona.version, card=canonical_json(persona.content()),
        emotions=tuple(persona.emotions), relationship=dict(persona.relationship),
        hard_goals=tuple(persona.hard_goals), soft_goals=tuple(persona.soft_goals),
        biography=tuple(texts), biography_importance=tuple(entry.importance for entry in persona.biography),
        biography_embeddings=vectors, embedding_model=model, embedding_fingerprint=fingerprint,
        order=order,  # type: ignore[arg-type]  # checked against PLAN_ORDERS above
        user_name=user_name,
    )


def greeting_of(chosen: PersonaChosen) -> Greeting | None:
    """The greeting that opens a conversation with ``chosen``: its card's ``first_mes``, macros
    substituted for its user (``None``: the card has none). A function of the ``persona`` event
    alone, so ``replay verify`` makes it again from the log."""
    card = _card(chosen.card)
    text = card.get("first_mes")
    if not isinstance(text, str) or not text.strip():
        return None
    return Greeting(substitute(text, char=chosen.name, user=chosen.user_name, card=card).strip(), chosen.version)


def opening(chosen: PersonaChosen) -> tuple[Payload, ...]:
    """What choosing a persona appends, in order: the ``persona`` event, then its greeting (if any)."""
    greeting = greeting_of(chosen)
    return (chosen,) if greeting is None else (chosen, greeting)


def _card(card: str) -> dict[str, Any]:
    try:
        value = json.loads(card)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class PersonaTurn:
    """A turn of the persona mind: its reply and the events that come with it, in order
    (``interpretation``, ``retrieval``, ``plan``/``appraisal`` in the configured order, ``turn``),
    and the wall time of each step in milliseconds."""

    reply: str
    thoughts: tuple[Thought, ...]
    step_ms: dict[str, float]
    llm_ms: float
    finish_reason: str = "stop"
    """The formulation's, as the model said (``length``: its ``max_tokens`` cut the reply)."""

    def events(self, key: StreamKey, first_seq: int, turn: int, causation: str | None,
               timestamp: float | None) -> list[Event]:
        """The turn's events from ``first_seq`` on, each of turn ``turn`` (the turn count of the state
        the path ran from) with ``causation`` (that state's last event): as the live conversation
        appends them and as replay rebuilds them."""
        return [make_event(key, first_seq + offset, thought.payload, turn=turn, provenance=thought.provenance,
                           causation=causation, timestamp=timestamp) for offset, thought in enumerate(self.thoughts)]


def _persona(state: ConversationState) -> PersonaState:
    if state.persona is None:
        raise NotAPersona(f"{state.key} is not a persona conversation")
    return state.persona


def memories_block(persona: PersonaState, retrieved: Retrieved, prompts: PromptSet) -> str:
    by_turn = {episode.turn: episode.text for episode in persona.episodes}
    episodes = "\n".join(f"- {by_turn[turn]}" for turn, _ in retrieved.episodes if turn in by_turn) or "- (nothing yet)"
    biography = "\n".join(f"- {persona.biography[index]}" for index, _ in retrieved.biography
                          if index < len(persona.biography)) or "- (nothing comes to mind)"
    return prompts.render("memories.md", episodes=episodes, biography=biography)


def _reparse(kind: type[Plan] | type[Appraisal], turn: int) -> Callable[[str], Plan | Appraisal]:
    """How an answer becomes the step's payload again (:func:`~mirror.cognition.responses.one_copy`)."""
    return lambda answer: kind(" ".join(answer.split()), for_turn=turn)


def _history(state: ConversationState, message: str, config: MirrorConfig, system: str,
             after: Sequence[ChatMessage] = ()) -> tuple[ChatMessage, ...]:
    return bound_history([ChatMessage("system", system), *conversation_messages(state), ChatMessage("user", message),
                          *after], config.history_tokens)


async def persona_turn(state: ConversationState, message: str, llm: LLM, embedder: Embedder | None,
                       prompts: PromptSet, config: MirrorConfig, *, on_token: TokenSink | None = None,
                       kept: tuple[Turn, Provenance | None] | None = None,
                       idempotency_key: str | None = None) -> PersonaTurn:
    """The persona's reply to ``message`` from ``state``, with every step's event. ``on_token``:
    the formulation's pieces as they are written (the steps before it are not streamed).
    ``kept``: a recorded ``turn`` (and its provenance) to end the path with instead of asking for
    a formulation (a recompute that keeps the replies: the steps before it are made again)."""
    if not isinstance(message, str) or not message.strip():
        raise ValueError("the user message is empty")
    persona = _persona(state)
    turn = state.turn_count
    character = character_block(persona, prompts)
    step_ms: dict[str, float] = {}
    llm_ms = 0.0
    thoughts: list[Thought] = []

    started = time.perf_counter()
    system = prompts.render("think.md", character=character)
    asked = _history(state, message, config, system)
    response = await llm.chat(request(system, asked[1:], prompts, config, max_tokens=STEP_MAX_TOKENS))
    interpretation = Interpretation(_text(response, "think"), for_turn=turn)
    thoughts.append(Thought(interpretation, one_copy(interpretation, response.provenance,
                                                     lambda text: Interpretation(text.strip(), for_turn=turn))))
    llm_ms += response.provenance.latency_ms
    step_ms["think"] = (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    vector, model, fingerprint = b"", "", ""
    if embedder is not None and (persona.episodes or persona.biography_embeddings):
        try:
            embedded = await asyncio.wait_for(embedder.embed([interpretation.text]), EMBED_TIMEOUT_S)
            vector, model, fingerprint = embedded.packed(0), embedded.model, embedded.request_fingerprint
        except (CognitionError, TimeoutError, OSError) as exc:
            log.warning("%s: retrieval without similarity, the embedder failed: %r", state.key, exc)
    retrieved = retrieve(persona, vector, turn)
    thoughts.append(Thought(Retrieval(
        for_turn=turn, query=interpretation.text, query_embedding=vector, embedding_model=model,
        query_fingerprint=fingerprint, episode_turns=tuple(t for t, _ in retrieved.episodes),
        episode_scores=tuple(s for _, s in retrieved.episodes),
        biography_entries=tuple(i for i, _ in retrieved.biography),
        biography_scores=tuple(s for _, s in retrieved.biography))))
    memories = memories_block(persona, retrieved, prompts)
    step_ms["retrieval"] = (time.perf_counter() - started) * 1000

    said: dict[str, str] = {}
    order = ("appraisal", "plan") if persona.order == "appraisal_first" else ("plan", "appraisal")
    for step in order:
        started = time.perf_counter()
        before = ""
        if said:
            (other, text), = said.items()
            before = f"My gut reaction (never said aloud): {text}" if other == "appraisal" else f"My plan for the reply: {text}"
        system = prompts.render(f"{step}.md", character=character, memories=memories,
                                interpretation=interpretation.text, before=before)
        response = await llm.chat(request(system, [ChatMessage("user", message)], prompts, config,
                                          max_tokens=STEP_MAX_TOKENS))
        text = _text(response, step)
        payload: Plan | Appraisal = Plan(text, for_turn=turn) if step == "plan" else Appraisal(text, for_turn=turn)
        thoughts.append(Thought(payload, one_copy(payload, response.provenance, _reparse(type(payload), turn))))
        said[step] = text
        llm_ms += response.provenance.latency_ms
        step_ms[step] = (time.perf_counter() - started) * 1000

    if kept is not None:
        thoughts.append(Thought(*kept))
        return PersonaTurn(kept[0].reply, tuple(thoughts), {name: round(ms, 3) for name, ms in step_ms.items()},
                           round(llm_ms, 3))
    started = time.perf_counter()
    system = prompts.render(
        "formulation.md", system_prompt=card_text(persona, "system_prompt"), character=character, memories=memories,
        interpretation=interpretation.text, appraisal=said["appraisal"], plan=said["plan"], name=persona.name,
        examples=card_text(persona, "mes_example") or "(none given)",
    )
    after_text = card_text(persona, "post_history_instructions")
    after = [ChatMessage("system", after_text)] if after_text else []
    system = with_block(system, state.instructions, PERSONA_BLOCK)  # the client's, beside the card (issue 35)
    response = await chat_to(llm, request(system, _history(state, message, config, system, after)[1:], prompts, config,
                                          max_tokens=config.talker_max_tokens),
                             None if on_token is None else StrippedTokens(on_token))
    reply = response.content.strip()
    if not reply:
        raise UnusableOutput("the persona's formulation was empty")
    said_turn = Turn(message, reply, narrative_seq=None, mode="baseline", memory=False, reflection=False,
                     idempotency_key=idempotency_key)
    thoughts.append(Thought(said_turn, one_copy(said_turn, response.provenance,
                                                lambda text: replace(said_turn, reply=text.strip()))))
    llm_ms += response.provenance.latency_ms
    step_ms["formulation"] = (time.perf_counter() - started) * 1000
    return PersonaTurn(reply, tuple(thoughts), {name: round(ms, 3) for name, ms in step_ms.items()}, round(llm_ms, 3),
                       response.finish_reason)


__all__ = ["EMBED_TIMEOUT_S", "NotAPersona", "PLAN_ORDERS", "PersonaTurn", "choose_persona", "greeting_of",
           "memories_block", "opening", "persona_turn"]
