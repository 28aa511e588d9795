"""The MIRROR pipeline: a Talker that answers at once, a Thinker that thinks afterwards.

Pure given an LLM: each function takes the projected state and returns what happened — a reply
and its ``turn`` payload, or the thinking's ``monologue`` / ``narrative`` / ``thinker_failed``
payloads — and never appends or mutates anything itself (the actor does that).

- Talker ("the voice"): the user's message, the bounded conversation and, as background, the
  newest narrative (``full``, ``controller_only``), the newest threads (``threads_only``) or
  nothing (``baseline``).
- Inner Monologue Manager ("the subconscious"): one call, three first-person threads as JSON
  (reasoning, memory, goal). It sees the bounded conversation, its own past outputs (the
  bounded history the projection keeps) and a continue-instruction that is never stored.
- Cognitive Controller ("the core awareness"): sees only the new threads and the previous
  narrative, and regenerates the whole narrative (bounded); ``controller_only`` consolidates
  from the latest exchange instead of threads.

Error chaining is designed out: a failed or unusable monologue stops the step before the
controller (which never sees bad input); a failed or unusable controller leaves the previous
narrative in force. Either way a ``thinker_failed`` payload records what failed, and the caller
thinks again at the next opportunity.

Each result's provenance keeps the model's raw answer only when the payload cannot give it back
(:func:`mirror.cognition.responses.one_copy`): one copy of each model output in the log.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from mirror.cognition.errors import LLMError
from mirror.cognition.history import THINKER_HISTORY_TOKENS, bound_history
from mirror.cognition.instructions import TALKER_BLOCK, THINKER_BLOCK, with_block
from mirror.cognition.llm import (
    LLM,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    JsonSchema,
    StrippedTokens,
    TokenSink,
    chat_to,
    unanswered_provenance,
)
from mirror.cognition.prompts import PromptSet
from mirror.cognition.responses import one_copy
from mirror.cognition.structured import parse_json_object
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative, Payload, Provenance, ThinkerFailed, ThinkerStage, Turn
from mirror.modes import MODES, Mode
from mirror.projections.monologue import Threads, estimate_tokens
from mirror.projections.state import ConversationState

THREAD_MAX_CHARS = 1200
PORTRAIT_MAX_CHARS = 1200
"""How much of the portrait the Talker reads: reflection bounds what it writes, this bounds what
every turn's request carries."""

MONOLOGUE_SCHEMA = JsonSchema(
    "monologue_threads",
    {
        "type": "object",
        "properties": {
            # No maxLength: llama.cpp turns it into a grammar rule repeated that many times,
            # which its parser refuses; the length is checked after parsing instead.
            name: {"type": "string", "minLength": 1}
            for name in ("reasoning", "memory", "goal")
        },
        "required": ["reasoning", "memory", "goal"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True, slots=True)
class MirrorConfig:
    """How one conversation thinks; built once at the edge. Numbers follow the MIRROR papers.

    ``memory``: run the memory stage (:mod:`mirror.cognition.memory`) after the controller, in
    any mode (baseline included): orthogonal to ``mode``, on by default.
    ``reflection``: draw an insight after each turn's thinking and reflect when due
    (:mod:`mirror.cognition.reflection`); off by default here (the stack turns it on).
    """

    model: str
    mode: Mode = "full"
    temperature: float = 0.7
    talker_max_tokens: int = 1024
    thinker_max_tokens: int = 3000
    narrative_max_tokens: int = 3000
    history_tokens: int = THINKER_HISTORY_TOKENS
    seed: int | None = None
    memory: bool = True
    reflection: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        for name in ("talker_max_tokens", "thinker_max_tokens", "narrative_max_tokens", "history_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


class UnusableOutput(LLMError):
    """The call succeeded but its output cannot be used (e.g. an empty or oversized narrative)."""


# --------------------------------------------------------------------------------- requests


def conversation_messages(state: ConversationState) -> list[ChatMessage]:
    """The conversation as chat messages: a persona's greeting (the assistant opened it), the first
    user message, then the recent turns."""
    messages: list[ChatMessage] = []
    if state.greeting is not None:  # cards (issue 35): kept first, as the first user message is
        messages.append(ChatMessage("assistant", state.greeting))
    if state.first_user_message is not None and state.turn_count > len(state.recent_turns):
        messages.append(ChatMessage("user", state.first_user_message))
    for turn in state.recent_turns:
        messages.append(ChatMessage("user", turn.user_message))
        messages.append(ChatMessage("assistant", turn.reply))
    return messages


def _request(messages: Sequence[ChatMessage], config: MirrorConfig, prompts: PromptSet, max_tokens: int,
             schema: JsonSchema | None = None) -> ChatRequest:
    return ChatRequest(
        messages=tuple(messages), model=config.model, temperature=config.temperature, max_tokens=max_tokens,
        json_schema=schema, prompt_set=prompts.version, seed=config.seed,
    )


def _render_threads(threads: Threads | None) -> str:
    if threads is None:
        return "(no thoughts yet: this is the start of the conversation)"
    return f"Reasoning: {threads.reasoning}\nMemory: {threads.memory}\nGoal: {threads.goal}"


def bounded_portrait(portrait: str | None) -> str:
    """The part of the portrait the Talker reads: at most :data:`PORTRAIT_MAX_CHARS`, cut at a word."""
    text = (portrait or "").strip()
    if len(text) <= PORTRAIT_MAX_CHARS:
        return text
    cut = text[:PORTRAIT_MAX_CHARS].rsplit(" ", 1)[0]
    return cut + " …"


def _memory_section(recalled: str, prompts: PromptSet, portrait: str | None = None) -> str:
    """The Talker's memory section, or nothing: with nothing recalled and no portrait its request
    is the one a conversation without memory sends (so logs written before recall and reflection
    still replay unchanged). The portrait, when there is one, comes first (bounded)."""
    parts = []
    shown = bounded_portrait(portrait)
    if shown:
        parts.append(prompts.render("talker_portrait.md", portrait=shown))
    if recalled:
        parts.append(prompts.render("talker_memory.md", recalled=recalled))
    return "\n\n".join(parts)


def talker_request(state: ConversationState, user_message: str, prompts: PromptSet, config: MirrorConfig,
                   recalled: str = "") -> ChatRequest:
    """The Talker's request; ``recalled`` is the turn's recall block (part of the request, so of
    its fingerprint: a replay that recalls differently asks differently)."""
    memory = _memory_section(recalled, prompts, state.portrait)
    if config.mode == "baseline":
        system = prompts.render("talker_baseline.md", memory=memory)
    elif config.mode == "threads_only":
        system = prompts.render("talker.md", context=_render_threads(state.threads), memory=memory)
    else:
        context = state.narrative or "(no narrative yet: this is the start of the conversation)"
        system = prompts.render("talker.md", context=context, memory=memory)
    system = with_block(system, state.instructions, TALKER_BLOCK)  # the client's, when it gave any
    history = bound_history(
        [ChatMessage("system", system), *conversation_messages(state), ChatMessage("user", user_message)],
        config.history_tokens,
    )
    return _request(history, config, prompts, config.talker_max_tokens)


def monologue_request(state: ConversationState, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """For the latest turn of ``state`` (the state after its ``turn`` event)."""
    latest = state.recent_turns[-1]
    conversation = bound_history(
        [ChatMessage("system", prompts.render("monologue.md")), *conversation_messages(state)], config.history_tokens
    )
    own_thoughts = [ChatMessage("assistant", _thought_text(entry.threads)) for entry in state.monologue_history]
    instruction = prompts.render("monologue_continue.md", user_message=latest.user_message, reply=latest.reply)
    return _request([*conversation, *own_thoughts, ChatMessage("user", instruction)], config, prompts,
                    config.thinker_max_tokens, MONOLOGUE_SCHEMA)


@functools.lru_cache(maxsize=4096)
def _thought_text(threads: Threads) -> str:
    """One monologue entry as the Thinker is shown it again. Every step of every turn shows the
    whole history, and the entries never change: each is written as JSON once, not per request."""
    return json.dumps({"reasoning": threads.reasoning, "memory": threads.memory, "goal": threads.goal},
                      ensure_ascii=False)


def _max_words(config: MirrorConfig) -> int:
    return max(50, config.narrative_max_tokens * 3 // 4)


def controller_request(state: ConversationState, threads: Threads, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    system = prompts.render(
        "controller.md", max_words=_max_words(config),
        previous_narrative=state.narrative or "(none yet: this is my first narrative)",
        reasoning=threads.reasoning, memory=threads.memory, goal=threads.goal,
    )
    system = with_block(system, state.instructions, THINKER_BLOCK)
    return _request([ChatMessage("system", system), ChatMessage("user", "I write my new narrative now.")],
                    config, prompts, config.thinker_max_tokens)


def controller_only_request(state: ConversationState, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    latest = state.recent_turns[-1]
    system = prompts.render(
        "controller_only.md", max_words=_max_words(config),
        previous_narrative=state.narrative or "(none yet: this is my first narrative)",
        user_message=latest.user_message, reply=latest.reply,
    )
    system = with_block(system, state.instructions, THINKER_BLOCK)
    return _request([ChatMessage("system", system), ChatMessage("user", "I write my new narrative now.")],
                    config, prompts, config.thinker_max_tokens)


# --------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Talk:
    reply: str
    turn: Turn
    provenance: Provenance
    finish_reason: str = "stop"


@dataclass(frozen=True, slots=True)
class Thought:
    payload: Payload
    provenance: Provenance | None = None


@dataclass(frozen=True, slots=True)
class Thinking:
    """What one thinking step produced for ``turn``; ``ok`` when nothing failed.

    ``monologue_seq``: where the step's monologue already is, when it finishes a step cut between
    its two events (:func:`threads_of_a_cut_step`); its narrative points there."""

    turn: int
    thoughts: tuple[Thought, ...]
    monologue_seq: int | None = None

    @property
    def ok(self) -> bool:
        return not any(isinstance(thought.payload, ThinkerFailed) for thought in self.thoughts)

    def events(
        self, key: StreamKey, first_seq: int, timestamp: float | None = None, causation: str | None = None
    ) -> list[Event]:
        """Events at ``first_seq`` onwards; a narrative points at the monologue just before it.

        ``causation`` is the id of the last event of the state the step thought from: replay
        rebuilds exactly that state (a new turn may have landed while the step ran).
        """
        events: list[Event] = []
        monologue_seq = self.monologue_seq
        for offset, thought in enumerate(self.thoughts):
            seq = first_seq + offset
            payload = thought.payload
            if isinstance(payload, Monologue):
                monologue_seq = seq
            elif isinstance(payload, Narrative) and monologue_seq is not None:
                payload = replace(payload, monologue_seq=monologue_seq)
            events.append(make_event(key, seq, payload, turn=self.turn, provenance=thought.provenance,
                                     timestamp=timestamp, causation=causation))
        return events


# --------------------------------------------------------------------------------- pipeline


def thinking_behind(state: ConversationState, mode: str) -> bool:
    """True when the latest turn of ``state`` has not been thought through yet."""
    if mode == "baseline" or state.turn_count == 0:
        return False
    thought = -1 if state.thought_turn is None else state.thought_turn
    return thought < state.turn_count - 1


async def talk(state: ConversationState, user_message: str, llm: LLM, prompts: PromptSet, config: MirrorConfig,
               *, recalled: str = "", on_token: TokenSink | None = None, idempotency_key: str | None = None) -> Talk:
    """The Talker's reply to ``user_message`` from ``state`` (and the recall block ``recalled``, if
    any); LLM errors propagate (nothing to record). ``on_token``: the reply's pieces as the model
    writes them (joined, exactly the returned reply); the request is the same either way."""
    if not isinstance(user_message, str) or not user_message.strip():
        raise ValueError("the user message is empty")
    sink = None if on_token is None else StrippedTokens(on_token)
    response = await chat_to(llm, talker_request(state, user_message, prompts, config, recalled), sink)
    reply = _reply_of(response.content)
    if config.mode == "baseline":
        seen = None
    elif config.mode == "threads_only":
        seen = state.threads_seq
    else:
        seen = state.narrative_seq
    turn = Turn(user_message, reply, narrative_seq=seen, mode=config.mode, memory=config.memory,
                reflection=config.reflection, idempotency_key=idempotency_key)
    provenance = one_copy(turn, response.provenance, lambda text: replace(turn, reply=_reply_of(text)))
    return Talk(reply, turn, provenance, response.finish_reason)


def _reply_of(content: str) -> str:
    reply = content.strip()
    if not reply:
        raise UnusableOutput("the Talker returned an empty reply")
    return reply


def threads_of_a_cut_step(state: ConversationState) -> Threads | None:
    """The threads of a full step that was cut between its two events, else None.

    A ``full`` step appends its monologue and its narrative (or the controller's failure) in one
    append, but the bus stores them one message at a time: a crash between the two leaves the
    monologue alone. That is the only way a monologue is the newest thinking event of the latest
    turn, so the next step finishes that one — the controller, from the threads the log holds —
    rather than thinking the turn over again (a resumed run then writes what an uninterrupted one
    would have)."""
    threads_seq = state.threads_seq
    if state.threads is None or threads_seq is None or not state.recent_turns:
        return None
    after_the_turn = threads_seq > state.recent_turns[-1].seq
    narrated = state.narrative_seq is not None and state.narrative_seq > threads_seq
    failed = state.last_failure is not None and state.last_failure.seq > threads_seq
    return state.threads if after_the_turn and not narrated and not failed else None


async def think(
    state: ConversationState, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempt: int = 1
) -> Thinking:
    """One thinking step about the latest turn of ``state`` (the state after its ``turn`` event);
    in ``full`` mode after a step cut between its two events, the rest of that step
    (:func:`threads_of_a_cut_step`)."""
    if not state.recent_turns:
        raise ValueError("there is no turn to think about")
    turn = state.turn_count - 1
    thoughts: list[Thought] = []
    if config.mode == "baseline":
        return Thinking(turn, ())
    threads: Threads | None = threads_of_a_cut_step(state) if config.mode == "full" else None
    cut_monologue_seq = state.threads_seq if threads is not None else None
    if config.mode in ("threads_only", "full") and threads is None:
        request = monologue_request(state, prompts, config)
        response: ChatResponse | None = None
        try:
            response = await llm.chat(request)
            monologue = _monologue_of(response.content)
        except LLMError as exc:
            return Thinking(turn, (failure_thought("monologue", exc, attempt, turn, request, response),))
        threads = Threads(monologue.reasoning, monologue.memory, monologue.goal)
        thoughts.append(Thought(monologue, one_copy(monologue, response.provenance, _monologue_of)))
    if config.mode in ("controller_only", "full"):
        request = (
            controller_request(state, threads, prompts, config) if threads is not None
            else controller_only_request(state, prompts, config)
        )
        response = None
        try:
            response = await llm.chat(request)
            narrative = _usable_narrative(response.content, config)
        except LLMError as exc:
            thoughts.append(failure_thought("controller", exc, attempt, turn, request, response))
            return Thinking(turn, tuple(thoughts), cut_monologue_seq)
        written = Narrative(narrative)
        provenance = one_copy(written, response.provenance, lambda text: Narrative(_usable_narrative(text, config)))
        thoughts.append(Thought(written, provenance))
    return Thinking(turn, tuple(thoughts), cut_monologue_seq)


def _monologue_of(content: str) -> Monologue:
    """The three threads the monologue answer holds; an ``LLMError`` if they are unusable."""
    fields = parse_json_object(content, MONOLOGUE_SCHEMA.schema)
    reasoning, memory, goal = (str(fields[name]).strip() for name in ("reasoning", "memory", "goal"))
    if not all((reasoning, memory, goal)):
        raise UnusableOutput("a monologue thread is empty")
    if max(map(len, (reasoning, memory, goal))) > THREAD_MAX_CHARS:
        raise UnusableOutput(f"a monologue thread is longer than {THREAD_MAX_CHARS} characters")
    return Monologue(reasoning, memory, goal)


def _usable_narrative(content: str, config: MirrorConfig) -> str:
    narrative = content.strip()
    if not narrative:
        raise UnusableOutput("the controller returned an empty narrative")
    if estimate_tokens(narrative) > config.narrative_max_tokens:
        raise UnusableOutput(
            f"the narrative is {estimate_tokens(narrative)} estimated tokens, over the bound of "
            f"{config.narrative_max_tokens}"
        )
    if narrative.startswith("{") and narrative.endswith("}"):
        raise UnusableOutput("the controller returned JSON instead of a narrative")
    return narrative


def failure_thought(stage: ThinkerStage, exc: LLMError, attempt: int, turn: int, request: ChatRequest,
             response: ChatResponse | None) -> Thought:
    """The failure, with what the model answered (or, if nothing came back, which request failed).

    Either way replay can find it by fingerprint: a recorded answer is parsed again, and a
    recorded non-answer is raised again as the same kind of error.
    """
    provenance = response.provenance if response is not None else unanswered_provenance(request)
    return Thought(ThinkerFailed(stage, exc.kind, str(exc)[:500], attempt, turn), provenance)


__all__ = [
    "MODES", "MONOLOGUE_SCHEMA", "MirrorConfig", "PORTRAIT_MAX_CHARS", "bounded_portrait", "THREAD_MAX_CHARS", "Talk", "Thinking", "Thought",
    "UnusableOutput", "controller_only_request", "failure_thought", "controller_request", "conversation_messages",
    "monologue_request", "talk", "talker_request", "think", "thinking_behind", "threads_of_a_cut_step",
]
