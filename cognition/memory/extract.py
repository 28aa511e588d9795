"""What the memory stage asks the model, and how it reads the answers.

Two schema-constrained calls, each built from the prompt set (so a changed template is a new
request fingerprint, and replay or recompute sees the change):

- **extraction** (``memory.md``): from the newest exchange, candidate beliefs and causal edges;
- **contradiction check** (``contradiction.md``): one verdict per (new statement, existing
  belief) pair — ``CONSISTENT``, ``CONTRADICTS`` or ``UNRELATED``.

The data each call works on travels as a JSON user message rather than pasted into the prompt:
the instructions stay one template, and whatever serves the model (the simulator included) can
read the data without parsing prose. Parsing is strict (:func:`parse_json_object` against the
schema) and then checked for what a schema cannot say (an empty statement, a verdict list that
does not answer every pair once): an answer that fails either is an ``LLMError``, which the
stage records as a ``thinker_failed`` instead of writing part of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import ChatMessage, ChatRequest, JsonSchema
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.structured import parse_json_object
from mirror.events.payloads import BeliefKind, EdgeOrigin, MemoryType
from mirror.projections.state import ConversationState

Verdict = Literal["CONSISTENT", "CONTRADICTS", "UNRELATED"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)
BELIEF_KINDS: tuple[str, ...] = get_args(BeliefKind)
EDGE_ORIGINS: tuple[str, ...] = get_args(EdgeOrigin)

MAX_CANDIDATES = 8
"""Beliefs kept from one extraction (the prompt asks for at most this many; more are cut)."""
MAX_EDGES = 4
MAX_STATEMENT_CHARS = 400
MAX_NODE_CHARS = 80

MEMORY_SCHEMA = JsonSchema(
    "memory_extraction",
    {
        "type": "object",
        "properties": {
            "beliefs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "statement": {"type": "string", "minLength": 1},
                        "type": {"type": "string", "enum": list(MEMORY_TYPES)},
                        "about": {"type": "string"},
                        "kind": {"type": "string", "enum": list(BELIEF_KINDS)},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                    "required": ["statement", "type", "about", "kind", "confidence"],
                    "additionalProperties": False,
                },
            },
            "edges": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "src": {"type": "string", "minLength": 1},
                        "relation": {"type": "string", "minLength": 1},
                        "dst": {"type": "string", "minLength": 1},
                        "origin": {"type": "string", "enum": list(EDGE_ORIGINS)},
                    },
                    "required": ["src", "relation", "dst", "origin"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["beliefs", "edges"],
        "additionalProperties": False,
    },
)

CONTRADICTION_SCHEMA = JsonSchema(
    "memory_contradiction",
    {
        "type": "object",
        "properties": {
            "verdicts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "pair": {"type": "integer", "minimum": 0},
                        "verdict": {"type": "string", "enum": list(VERDICTS)},
                    },
                    "required": ["pair", "verdict"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["verdicts"],
        "additionalProperties": False,
    },
)


class UnusableMemory(LLMError):
    """The answer matched the schema but cannot be used (an empty statement, a missing verdict)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A belief the extraction proposed, before the dedup gate decided what it becomes."""

    statement: str
    memory_type: MemoryType
    about: str
    kind: BeliefKind
    confidence: float


@dataclass(frozen=True, slots=True)
class EdgeCandidate:
    """A causal edge the extraction proposed; nodes and relation already normalised."""

    src: str
    relation: str
    dst: str
    origin: EdgeOrigin


@dataclass(frozen=True, slots=True)
class Extraction:
    candidates: tuple[Candidate, ...]
    edges: tuple[EdgeCandidate, ...]


@dataclass(frozen=True, slots=True)
class Pair:
    """One question for the contradiction check: does ``statement`` oppose ``existing_id``?"""

    index: int
    candidate: int
    statement: str
    existing_id: str
    existing_statement: str


def _request(system: str, data: object, schema: JsonSchema, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """Model, temperature, seed and the thinker's token budget from ``config``, as the other
    thinking stages ask: replay rebuilds them from the recorded provenance."""
    return ChatRequest(
        messages=(ChatMessage("system", system), ChatMessage("user", json.dumps(data, ensure_ascii=False))),
        model=config.model, temperature=config.temperature, max_tokens=config.thinker_max_tokens,
        json_schema=schema, prompt_set=prompts.version, seed=config.seed,
    )


def extraction_request(state: ConversationState, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """The extraction call for the newest exchange of ``state``."""
    latest = state.recent_turns[-1]
    exchange = {"user_message": latest.user_message, "reply": latest.reply}
    return _request(prompts.render("memory.md"), exchange, MEMORY_SCHEMA, prompts, config)


def contradiction_request(pairs: Sequence[Pair], prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """One call judging every pair (the caller makes none when there are no pairs)."""
    data = [{"pair": pair.index, "new": pair.statement, "existing": pair.existing_statement} for pair in pairs]
    return _request(prompts.render("contradiction.md"), data, CONTRADICTION_SCHEMA, prompts, config)


def normalise_node(text: str) -> str:
    """Edge nodes and relations compare case- and space-insensitively: 'Stress ' is 'stress'."""
    return " ".join(text.lower().split())


def parse_extraction(content: str) -> Extraction:
    """The candidates in an extraction answer; an ``LLMError`` if it is not usable."""
    fields = parse_json_object(content, MEMORY_SCHEMA.schema, schema_name=MEMORY_SCHEMA.name)
    candidates = []
    for item in fields["beliefs"][:MAX_CANDIDATES]:
        statement = " ".join(str(item["statement"]).split())
        if not statement:
            raise UnusableMemory("the extraction proposed an empty statement")
        if len(statement) > MAX_STATEMENT_CHARS:
            raise UnusableMemory(f"a statement is longer than {MAX_STATEMENT_CHARS} characters")
        candidates.append(Candidate(
            statement, cast(MemoryType, item["type"]), " ".join(str(item["about"]).split()),
            cast(BeliefKind, item["kind"]), float(item["confidence"]),
        ))
    edges = []
    for item in fields["edges"][:MAX_EDGES]:
        src, relation, dst = (normalise_node(str(item[name])) for name in ("src", "relation", "dst"))
        if not (src and relation and dst):
            raise UnusableMemory("the extraction proposed an edge with an empty node or relation")
        if max(len(src), len(dst), len(relation)) > MAX_NODE_CHARS:
            raise UnusableMemory(f"an edge node or relation is longer than {MAX_NODE_CHARS} characters")
        edges.append(EdgeCandidate(src, relation, dst, cast(EdgeOrigin, item["origin"])))
    return Extraction(tuple(candidates), tuple(edges))


def parse_verdicts(content: str, pairs: Sequence[Pair]) -> dict[int, Verdict]:
    """One verdict per pair index; an ``LLMError`` if a pair is missing, unknown or judged twice."""
    fields = parse_json_object(content, CONTRADICTION_SCHEMA.schema, schema_name=CONTRADICTION_SCHEMA.name)
    wanted = {pair.index for pair in pairs}
    verdicts: dict[int, Verdict] = {}
    for item in fields["verdicts"]:
        index = int(item["pair"])
        if index not in wanted:
            raise UnusableMemory(f"a verdict names pair {index}, which was not asked about")
        if index in verdicts:
            raise UnusableMemory(f"pair {index} was judged twice")
        verdicts[index] = cast(Verdict, item["verdict"])
    missing = sorted(wanted - set(verdicts))
    if missing:
        raise UnusableMemory(f"no verdict for pair(s) {missing}")
    return verdicts


__all__ = [
    "BELIEF_KINDS",
    "CONTRADICTION_SCHEMA",
    "Candidate",
    "EDGE_ORIGINS",
    "EdgeCandidate",
    "Extraction",
    "MAX_CANDIDATES",
    "MAX_EDGES",
    "MEMORY_SCHEMA",
    "MEMORY_TYPES",
    "Pair",
    "UnusableMemory",
    "VERDICTS",
    "Verdict",
    "contradiction_request",
    "extraction_request",
    "normalise_node",
    "parse_extraction",
    "parse_verdicts",
]
