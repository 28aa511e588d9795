"""What the simulator answers to Mirror's memory stage: content read from the request itself.

A random instance of the memory schemas would be valid JSON about nothing, so dedup and
contradiction tests (and ``mirror demo``) would test noise. These answers are built from the
request, still a pure function of it:

- **extraction** (schema ``memory_extraction``): the exchange arrives as JSON in the last user
  message; each sentence of the person's message of three words or more becomes a belief
  about the user (a question becomes an open loop), typed by a few telling words; "X because Y"
  gives the edge ``y -causes-> x``, and "X causes|prevents|increases|decreases|enables|blocks Y"
  gives ``x -relation-> y``.
- **contradiction check** (schema ``memory_contradiction``): for each pair, the content words of
  the two statements (stop words and negations left out): most of them shared and exactly one
  statement negated → ``CONTRADICTS``; most shared otherwise → ``CONSISTENT``; else
  ``UNRELATED``.

Recognised by the schema's name (``json_schema`` format) or, for the llama-cpp form that sends
no name, by the schema's top-level properties.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

EXTRACTION = "memory_extraction"
CONTRADICTION = "memory_contradiction"
MAX_BELIEFS = 8
MAX_EDGES = 4
MAX_STATEMENT = 300
MAX_NODE = 60
SHARED_ENOUGH = 0.5
"""Jaccard overlap of content words at or above which two statements are about the same thing."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_TOKEN = re.compile(r"[a-z0-9']+")
_NEGATIONS = frozenset({"not", "no", "never", "nor", "don't", "doesn't", "isn't", "aren't", "wasn't", "weren't",
                        "can't", "cannot", "won't", "didn't", "hasn't", "haven't", "shouldn't", "wouldn't"})
_STOP = frozenset({"the", "and", "but", "for", "with", "that", "this", "have", "has", "had", "was", "were", "are",
                   "is", "am", "you", "your", "our", "their", "they", "them", "its", "it's", "i'm", "what", "who",
                   "from", "into", "about", "very", "really", "just", "also", "some", "any", "all", "can", "will",
                   "would", "should", "could", "my", "me", "of", "to", "in", "on", "at", "a", "an", "i", "we",
                   "be", "do", "does", "did", "so", "too", "user", "says", "said"})
_TYPE_WORDS = (
    ("emotional", ("feel", "happy", "sad", "worried", "afraid", "anxious", "love", "hate", "excited", "upset")),
    ("location", ("live in", "living in", "moved to", "based in", "located", "my city", "my town")),
    ("operational", ("allerg", "please", "prefer", "always", "never", "can't", "cannot", "must", "avoid", "don't")),
)
_BECAUSE = re.compile(r"^(?P<effect>.+?)\s+because\s+(?:of\s+)?(?P<cause>.+)$", re.IGNORECASE)
_RELATION = re.compile(r"^(?P<src>.+?)\s+(?P<relation>causes|prevents|increases|decreases|enables|blocks)\s+(?P<dst>.+)$",
                       re.IGNORECASE)


def schema_kind_of(response_format: Mapping[str, Any], by_property: Mapping[frozenset[str], str]) -> str | None:
    """The kind of answer a request's ``response_format`` asks for: its schema's name when that is
    a kind of ``by_property``, else the kind whose property names the schema's are; ``None``
    for a request without a schema or with another one."""
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        name, schema = spec.get("name"), spec.get("schema") or {}
    elif response_format.get("type") == "json_object":
        name, schema = None, response_format.get("schema") or {}
    else:
        return None
    if name in by_property.values():
        return str(name)
    properties = frozenset((schema.get("properties") or {}) if isinstance(schema, Mapping) else ())
    return by_property.get(properties)


_PROPERTIES = {frozenset({"beliefs", "edges"}): EXTRACTION, frozenset({"verdicts"}): CONTRADICTION}


def schema_kind(response_format: Mapping[str, Any]) -> str | None:
    """``EXTRACTION``, ``CONTRADICTION`` or ``None`` for a request's ``response_format``."""
    return schema_kind_of(response_format, _PROPERTIES)


def answer(kind: str, last_user_text: str) -> dict[str, Any] | None:
    """The answer for a memory request whose last user message is ``last_user_text``; ``None``
    when that message is not the data this simulator knows how to read."""
    try:
        data = json.loads(last_user_text)
    except ValueError:
        return None
    if kind == EXTRACTION and isinstance(data, Mapping) and isinstance(data.get("user_message"), str):
        return extraction(data["user_message"])
    if kind == CONTRADICTION and isinstance(data, list) and all(isinstance(item, Mapping) for item in data):
        return {"verdicts": [{"pair": item.get("pair"), "verdict": verdict(str(item.get("new", "")),
                                                                          str(item.get("existing", "")))}
                             for item in data if isinstance(item.get("pair"), int)]}
    return None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0]


def _memory_type(sentence: str) -> str:
    lowered = sentence.lower()
    for memory_type, words in _TYPE_WORDS:
        if any(word in lowered for word in words):
            return memory_type
    return "standard"


def _node(text: str) -> str:
    return _clip(" ".join(text.strip(" .!?,;:").split()).lower(), MAX_NODE)


def extraction(user_message: str) -> dict[str, Any]:
    beliefs: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for sentence in _SENTENCE_END.split(user_message.strip()):
        sentence = " ".join(sentence.split())
        if len(sentence.split()) < 3:
            continue  # greetings and fragments are not worth remembering
        question = sentence.endswith("?")
        if len(beliefs) < MAX_BELIEFS:
            beliefs.append({
                "statement": _clip(sentence, MAX_STATEMENT), "type": _memory_type(sentence), "about": "user",
                "kind": "open_loop" if question else "belief", "confidence": 0.6 if question else 0.8,
            })
        body = sentence.rstrip(".!?")
        because, related = _BECAUSE.match(body), _RELATION.match(body)
        edge = None
        if because is not None:
            edge = (_node(because["cause"]), "causes", _node(because["effect"]))
        elif related is not None:
            edge = (_node(related["src"]), related["relation"].lower(), _node(related["dst"]))
        if edge is not None and all(edge) and len(edges) < MAX_EDGES:
            edges.append({"src": edge[0], "relation": edge[1], "dst": edge[2], "origin": "conversation"})
    return {"beliefs": beliefs, "edges": edges}


def _words(text: str) -> tuple[frozenset[str], bool]:
    tokens = _TOKEN.findall(text.lower())
    negated = any(token in _NEGATIONS or token.endswith("n't") for token in tokens)
    content = frozenset(t for t in tokens if t not in _STOP and t not in _NEGATIONS and not t.endswith("n't") and len(t) > 2)
    return content, negated


def verdict(new: str, existing: str) -> str:
    """CONTRADICTS / CONSISTENT / UNRELATED from shared content words and negation."""
    (a, a_negated), (b, b_negated) = _words(new), _words(existing)
    if not a or not b:
        return "UNRELATED"
    if len(a & b) / len(a | b) < SHARED_ENOUGH:
        return "UNRELATED"
    return "CONTRADICTS" if a_negated != b_negated else "CONSISTENT"


__all__ = ["CONTRADICTION", "EXTRACTION", "answer", "extraction", "schema_kind", "schema_kind_of", "verdict"]
