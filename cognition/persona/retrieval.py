"""Retrieval for the persona cycle: which episodes and biography entries come back to mind.

Pure functions of the projected state and the query's vector (the *think* step's interpretation,
embedded through the memory's embedder port), so replay retrieves again from the recorded vector
with zero embedding calls. The weights are the paper's:

- an **episode** (something said earlier in this conversation) scores
  ``0.5 · similarity + 0.3 · recency + 0.2 · importance``;
- a **biography entry** (the character's own past) scores ``0.7 · similarity + 0.3 · importance``.

``similarity`` is the cosine of the query and the item's vector, floored at 0 (an opposite meaning
is no more relevant than an unrelated one), 0 when either vector is missing (no embedder): the
ranking then rests on recency and importance alone. ``recency`` is ``0.9 ** turns_ago`` (1 for the
turn just before, halving about every 6.6 turns), ``importance`` the importance step's score or the
entry's. Ties go to the newer episode, then the earlier biography entry. The vectors are compared
with the memory's cosine (:func:`~mirror.cognition.embeddings.cosine_similarity`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mirror.cognition.embeddings.port import cosine_similarity, unpack_vector
from mirror.projections.persona import EpisodeRecord, PersonaState

EPISODIC_WEIGHTS = (0.5, 0.3, 0.2)
"""(similarity, recency, importance) for an episode."""
BIOGRAPHICAL_WEIGHTS = (0.7, 0.3)
"""(similarity, importance) for a biography entry."""
RECENCY_DECAY = 0.9
"""An episode's recency is ``RECENCY_DECAY ** turns_ago``."""
EPISODES_RETRIEVED = 3
BIOGRAPHY_RETRIEVED = 2


@dataclass(frozen=True, slots=True)
class Retrieved:
    """What came back, best first: ``(episode turn, score)`` and ``(biography index, score)``."""

    episodes: tuple[tuple[int, float], ...]
    biography: tuple[tuple[int, float], ...]


def similarity(query: np.ndarray | None, vector: bytes) -> float:
    """max(0, cosine) of the query and a packed vector; 0 when either is missing or they differ in size."""
    if query is None or not vector:
        return 0.0
    other = unpack_vector(vector)
    return 0.0 if other.shape != query.shape else max(0.0, cosine_similarity(query, other))


def episodic_score(similar: float, recency: float, importance: float) -> float:
    alpha, beta, gamma = EPISODIC_WEIGHTS
    return alpha * similar + beta * recency + gamma * importance


def biographical_score(similar: float, importance: float) -> float:
    alpha, beta = BIOGRAPHICAL_WEIGHTS
    return alpha * similar + beta * importance


def recency(turns_ago: int) -> float:
    return float(RECENCY_DECAY ** max(0, turns_ago))


def rank_episodes(query: np.ndarray | None, episodes: Sequence[EpisodeRecord], now_turn: int,
                  limit: int = EPISODES_RETRIEVED) -> tuple[tuple[int, float], ...]:
    """The ``limit`` best episodes for a turn at ``now_turn``, as ``(turn, score)``, best first."""
    scored = [(episodic_score(similarity(query, episode.embedding), recency(now_turn - 1 - episode.turn),
                              episode.importance), episode.turn) for episode in episodes]
    scored.sort(key=lambda item: (-item[0], -item[1]))
    return tuple((turn, round(score, 6)) for score, turn in scored[:limit])


def rank_biography(query: np.ndarray | None, persona: PersonaState,
                   limit: int = BIOGRAPHY_RETRIEVED) -> tuple[tuple[int, float], ...]:
    """The ``limit`` best biography entries, as ``(index, score)``, best first."""
    vectors = persona.biography_embeddings
    scored = [(biographical_score(similarity(query, vectors[index] if index < len(vectors) else b""), importance), index)
              for index, importance in enumerate(persona.biography_importance)]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return tuple((index, round(score, 6)) for score, index in scored[:limit])


def retrieve(persona: PersonaState, query_embedding: bytes, now_turn: int) -> Retrieved:
    """Episodes and biography entries for the query vector (``b""``: none) at ``now_turn``."""
    query = unpack_vector(query_embedding) if query_embedding else None
    return Retrieved(rank_episodes(query, persona.episodes, now_turn), rank_biography(query, persona))


__all__ = [
    "BIOGRAPHICAL_WEIGHTS", "BIOGRAPHY_RETRIEVED", "EPISODES_RETRIEVED", "EPISODIC_WEIGHTS", "RECENCY_DECAY",
    "Retrieved", "biographical_score", "episodic_score", "rank_biography", "rank_episodes", "recency", "retrieve",
    "similarity",
]
