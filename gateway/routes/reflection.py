"""Reflection: a conversation's portrait, its reflections and what each changed, and a forced one.

``GET …/portrait`` answers the portrait at a seq (time travel: the state there), ``GET
…/reflections`` every reflection of a branch with its triggers, validation, the portrait's
diff, the decay decisions (the overruled ones marked), the beliefs decayed and forgotten and
the cost, and ``GET …/reflections/{n}`` reflection ``n`` alone ("what did reflection N
change"). All three take ``branch=`` and read the log through the runtime's
:class:`~mirror.replay.History` (:mod:`mirror.replay.reflections`), never the live actor:
looking never disturbs a conversation.

``POST …/reflect`` forces one through the live conversation (``reflect()`` of its
:class:`~mirror.actors.handle.ConversationHandle`), which refuses when the policy does not allow
one now: a 409 during the cooldown naming the turns left (or with reflection off), a 429 with
``Retry-After`` at the hourly cap naming when the next may run. A reflection whose model calls
failed every attempt is a 503 with ``Retry-After`` (each failure is in the log, the portrait
unchanged); a broker or log that is down is the usual 503 (:mod:`mirror.gateway.failures`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Query

from mirror.events.ids import StreamKey
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, branch_key, key_of
from mirror.projections.state import ConversationState
from mirror.replay.reflections import ReflectionHistory, read_reflection, read_reflections

__all__ = ["MAX_LIMIT", "portrait_view", "router"]

router = APIRouter()

MAX_LIMIT = 200
"""Most reflections one page lists (a conversation of 1,000 turns reflects about 50 times)."""

_AT = Query(None, ge=0, description="the seq to look at (default: the last)")
_BRANCH = Query("main", description="the branch to look at")


@router.get("/v1/conversations/{conversation}/portrait")
async def get_portrait(conversation: str, owner: Tenant, runtime: Runtime, at: int | None = _AT,
                       branch: str = _BRANCH) -> dict[str, Any]:
    """The portrait right after event ``at``: the last accepted reflection's, with where it came from.

    ``portrait`` is ``None`` before the first accepted reflection; ``last_reflection`` is the last
    one that ran (accepted or not), ``pending_insights`` what the next one will consolidate."""
    key = await _key(runtime, owner, conversation, branch)
    state = await (await runtime.history(key.tenant)).state_at(key, at)
    return {**_where(state), **portrait_view(state)}


@router.get("/v1/conversations/{conversation}/reflections")
async def get_reflections(
    conversation: str, owner: Tenant, runtime: Runtime, at: int | None = _AT, branch: str = _BRANCH,
    after: int = Query(0, ge=0, description="only reflections numbered above this (paging)"),
    limit: int = Query(50, ge=1, le=MAX_LIMIT, description="most reflections to list"),
) -> dict[str, Any]:
    """The reflections up to seq ``at``, oldest first: each with its triggers, validation and
    health, the portrait before and after with their diff, the decay decisions (``overruled``:
    a rule disposed otherwise than the model proposed), the beliefs decayed and forgotten, and
    its cost; then the failed attempts (``thinker_failed`` of stage ``reflection``)."""
    found = await _reflections(runtime, owner, conversation, branch, at)
    page = [view for view in found.reflections if view.number > after][:limit]
    return {**_where(found.state), "count": len(found.reflections),
            "next_after": page[-1].number if page else after,
            "reflections": [view.as_dict() for view in page],
            "failures": [asdict(failure) for failure in found.failures]}


@router.get("/v1/conversations/{conversation}/reflections/{number}")
async def get_reflection(conversation: str, number: int, owner: Tenant, runtime: Runtime,
                         branch: str = _BRANCH) -> dict[str, Any]:
    """What reflection ``number`` (1-based, on the branch) changed: the portrait's diff, the beliefs
    decayed and forgotten, the decisions and the overruled ones, and what it cost."""
    key = await _key(runtime, owner, conversation, branch)
    view, last = await read_reflection(await runtime.history(key.tenant), key, number)
    return {"conversation": key.conversation, "branch": key.branch, "seq": last.seq, "timestamp": last.timestamp,
            **view.as_dict()}


@router.post("/v1/conversations/{conversation}/reflect")
async def post_reflect(conversation: str, owner: Tenant, runtime: Runtime) -> Any:
    """Force a reflection now, through the live conversation, once its thinking is current.

    200: where its ``reflection`` event landed (``seq``) and what it did (accepted, the portrait,
    how many beliefs it decayed, forgot and kept against the model's proposal, tokens and ms);
    ``GET …/reflections`` says the rest. 409 during the cooldown (``turns_left``), with reflection
    off or before the first turn; 429 with ``Retry-After`` at the hourly cap (``next_slot``: from
    when); 503 with ``Retry-After`` when its model calls failed every attempt (recorded in the log,
    the portrait unchanged)."""
    key = key_of(owner, conversation)
    await runtime.existing(key)  # an unknown conversation is a 404, never a new empty one
    result = await runtime.ask(key, lambda live: live.reflect())  # refused or failed: raised as itself
    return result.as_dict()


def portrait_view(state: ConversationState) -> dict[str, Any]:
    """The portrait of ``state`` and what it came from, JSON-ready."""
    last = state.last_reflection
    counters = state.counters
    return {
        "portrait": state.portrait, "portrait_seq": state.portrait_seq, "reflection": state.reflection,
        "reflections": counters.reflections, "rejected": counters.reflections_rejected,
        "beliefs_decayed": counters.beliefs_decayed, "beliefs_forgotten": counters.beliefs_forgotten,
        "turns_since_reflection": counters.turns_since_reflection,
        "pending_insights": [insight.text for insight in state.pending_insights],
        "last_reflection": None if last is None else {**asdict(last), "triggers": list(last.triggers)},
    }


async def _key(runtime: GatewayRuntime, owner: str, conversation: str, branch: str) -> StreamKey:
    key = branch_key(key_of(owner, conversation), branch)
    await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    return key


async def _reflections(runtime: GatewayRuntime, owner: str, conversation: str, branch: str,
                       at: int | None) -> ReflectionHistory:
    key = await _key(runtime, owner, conversation, branch)
    return await read_reflections(await runtime.history(key.tenant), key, at)


def _where(state: ConversationState) -> dict[str, Any]:
    return {"conversation": state.key.conversation, "branch": state.key.branch, "seq": state.last_seq,
            "timestamp": state.last_timestamp}
