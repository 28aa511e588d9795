"""Reading memory: a conversation's beliefs, causal edges and review items, and what a message recalls.

``GET …/memory?query=…`` answers the recall the Talker would get for that message at that
point of the log, with every item's BM25 rank, vector rank, fused score, decay strength and
final score, so a person can see *why* something was (or was not) remembered. ``…/beliefs``,
``…/edges`` and ``…/reviews`` list the projected items. All four take ``at=SEQ`` and
``branch=``: the state is folded by the runtime's :class:`~mirror.replay.History` from the
log, never asked of the live actor, so looking never disturbs a conversation.

The recall parameters are the Talker's (:data:`~mirror.cognition.memory.turn.TURN_RECALL`), so
the answer is the Talker's recall; ``now=`` sets the instant decay is counted at (a turn's
``recall`` event's timestamp reproduces that turn's recall exactly).

Why ``now`` defaults to the state's last event timestamp and not the clock: the answer is then a pure
function of the log and the query (asking twice, or asking about the past, gives the same
numbers a replay of that moment computes), and decay is counted as the conversation lived it.

Only the query is embedded, and only when some belief has a vector to compare it with; the
embedder is ``settings.embedder_settings()``. An embedder that cannot be reached is a 503 with
``Retry-After`` within its (short) timeout; vectors of another size than the beliefs' are a 409.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mirror.cognition.errors import EmbeddingShapeError, LLMError, LLMUnavailable
from mirror.cognition.memory import (
    recall_view,
    sorted_beliefs,
    sorted_edges,
    sorted_reviews,
)
from mirror.cognition.memory.turn import TURN_RECALL, recall_at
from mirror.cognition.memory.view import edge_view
from mirror.gateway.errors import EmbedderFailed, EmbedderUnavailable, QueryDoesNotFit
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, branch_key, key_of
from mirror.projections.beliefs import strength
from mirror.projections.state import ConversationState
from mirror.replay.diff import belief_view, review_view

__all__ = ["MAX_LIMIT", "router"]

router = APIRouter()

MAX_LIMIT = 50
"""Most beliefs one recall may return: the Talker sees a handful; more is a listing (``…/beliefs``)."""

_AT = Query(None, ge=0, description="the seq to look at (default: the last)")
_BRANCH = Query("main", description="the branch to look at")


@router.get("/v1/conversations/{conversation}/memory")
async def get_memory(
    conversation: str, owner: Tenant, runtime: Runtime,
    query: str = Query(..., description="the message to recall for, as the Talker would receive it"),
    at: int | None = _AT, branch: str = _BRANCH,
    limit: int = Query(TURN_RECALL.limit, ge=1, le=MAX_LIMIT, description="most beliefs to recall"),
    now: float | None = Query(None, description="the instant decay is counted at (default: the state's last event)"),
) -> dict[str, Any]:
    """The recall for ``query`` at seq ``at``: items with their ranks and scores, edges, reviews, the block.

    With the defaults this is the Talker's recall (:data:`TURN_RECALL`): at ``at`` = the seq
    before a turn's ``recall`` event and ``now`` = that event's timestamp, it names what the event
    names and ``rendered`` is the block the Talker read.
    """
    key = branch_key(key_of(owner, conversation), branch)  # the ids first, as on every route
    if not query.strip():
        raise HTTPException(400, "query is empty: give the message to recall for")
    size = len(query.encode())
    if size > runtime.settings.max_message_bytes:
        raise HTTPException(413, f"query is {size} bytes; the limit is {runtime.settings.max_message_bytes}")
    state = await _state(runtime, owner, key.conversation, key.branch, at)
    if now is None:
        now = state.last_timestamp or 0.0
    vector, model, fingerprint = await _embedded(runtime, state, query)
    try:
        result = recall_at(state, query, vector, now, settings=replace(TURN_RECALL, limit=limit))
    except EmbeddingShapeError as exc:
        raise QueryDoesNotFit(model, exc) from exc
    return {**_where(state), "limit": limit, "embedding_model": model, "query_fingerprint": fingerprint,
            **recall_view(result, max_chars=TURN_RECALL.max_chars)}


@router.get("/v1/conversations/{conversation}/beliefs")
async def get_beliefs(conversation: str, owner: Tenant, runtime: Runtime, at: int | None = _AT,
                      branch: str = _BRANCH) -> dict[str, Any]:
    """The beliefs at seq ``at``, oldest first, each with its decay ``strength`` at that point (no vectors)."""
    state = await _state(runtime, owner, conversation, branch, at)
    now = state.last_timestamp or 0.0
    beliefs = [{**belief_view(belief), "strength": strength(belief, now)}
               for belief in sorted_beliefs(state.beliefs.values())]
    return {**_where(state), "count": len(beliefs), "beliefs": beliefs}


@router.get("/v1/conversations/{conversation}/edges")
async def get_edges(conversation: str, owner: Tenant, runtime: Runtime, at: int | None = _AT,
                    branch: str = _BRANCH) -> dict[str, Any]:
    """The causal edges at seq ``at``, by ``(src, relation, dst)``."""
    state = await _state(runtime, owner, conversation, branch, at)
    edges = [edge_view(edge) for edge in sorted_edges(state.edges.values())]
    return {**_where(state), "count": len(edges), "edges": edges}


@router.get("/v1/conversations/{conversation}/reviews")
async def get_reviews(conversation: str, owner: Tenant, runtime: Runtime, at: int | None = _AT,
                      branch: str = _BRANCH) -> dict[str, Any]:
    """The open review items at seq ``at`` (oldest first), with both sides' statements."""
    state = await _state(runtime, owner, conversation, branch, at)
    reviews = [
        {**review_view(item), "statement": _statement(state, item.belief_id),
         "opposed_statement": _statement(state, item.opposed_id)}
        for item in sorted_reviews(state.review_items.values())
    ]
    return {**_where(state), "count": len(reviews), "reviews": reviews}


async def _state(runtime: GatewayRuntime, owner: str, conversation: str, branch: str,
                 at: int | None) -> ConversationState:
    key = branch_key(key_of(owner, conversation), branch)
    last = await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    return await (await runtime.history(key.tenant)).state_at(key, at, last=last)


async def _embedded(runtime: GatewayRuntime, state: ConversationState,
                    query: str) -> tuple[Any, str | None, str | None]:
    """The query's vector, model and request fingerprint; no call when no belief has a vector."""
    if not any(belief.embedding for belief in state.beliefs.values()):
        return None, None, None
    embedder = runtime.embedder()
    timeout_s = runtime.settings.embedder_settings().timeout_s * 2 + 1  # the client's own limits, plus slack
    try:
        embeddings = await asyncio.wait_for(embedder.embed([query]), timeout_s)
    except (LLMUnavailable, TimeoutError) as exc:  # LLMTimeout and LLMRateLimited are LLMUnavailable
        raise EmbedderUnavailable(embedder.model, exc) from exc
    except LLMError as exc:  # it answered, but not with vectors: its fault, not the client's
        raise EmbedderFailed(embedder.model, exc) from exc
    return embeddings.vectors[0], embeddings.model, embeddings.request_fingerprint


def _where(state: ConversationState) -> dict[str, Any]:
    return {"conversation": state.key.conversation, "branch": state.key.branch, "seq": state.last_seq,
            "timestamp": state.last_timestamp}


def _statement(state: ConversationState, belief_id: str) -> str:
    belief = state.beliefs.get(belief_id)
    return "" if belief is None else belief.statement
