"""Time travel: a conversation's projected state at a seq or a time, and the diff of two states.

Any branch can be looked at (``branch``, ``from_branch``, ``to_branch``); states are folded by
the runtime's :class:`~mirror.replay.History` from the log (snapshots speed it up), never by
the live actor, so looking back never disturbs a conversation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mirror.events.ids import StreamKey
from mirror.gateway.runtime import GatewayRuntime, Runtime, Tenant, branch_key, key_of
from mirror.replay import diff, state_view

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/conversations/{conversation}/state")
async def get_state(
    conversation: str, owner: Tenant, runtime: Runtime,
    at: int | None = Query(None, ge=0, description="the seq to look at (default: the last)"),
    at_time: str | None = Query(None, description="or an ISO 8601 time: the state as it was then"),
    branch: str = Query("main"),
) -> dict[str, Any]:
    """The projected state exactly as it was right after event ``at`` (or at ``at_time``)."""
    key = branch_key(key_of(owner, conversation), branch)
    return state_view(await _state_of(runtime, key, at, at_time))


@router.get("/v1/conversations/{conversation}/diff")
async def get_diff(
    conversation: str, owner: Tenant, runtime: Runtime,
    source: int | None = Query(None, alias="from", ge=0, description=(
        "seq of the earlier state (default: 0 on one branch; across two branches, from_branch's last)")),
    target: int | None = Query(None, alias="to", ge=0, description="seq of the later state (default: the last)"),
    from_branch: str = Query("main"), to_branch: str = Query("main"),
) -> dict[str, Any]:
    """What changed between two states: narrative text diff; beliefs, edges and review items
    added, removed or changed (with the fields that changed).

    Across two branches the default compares their heads, as the recompute report does; on one
    branch, the conversation's start with its end."""
    key = key_of(owner, conversation)
    earlier, later = branch_key(key, from_branch), branch_key(key, to_branch)  # every id checked before any read
    if source is None and from_branch == to_branch:
        source = 0
    before = await _state_of(runtime, earlier, source, None)
    after = await _state_of(runtime, later, target, None)
    return diff(before, after).as_dict()


async def _state_of(runtime: GatewayRuntime, key: StreamKey, at: int | None, at_time: str | None) -> Any:
    if at is not None and at_time is not None:
        raise HTTPException(400, "give at (a seq) or at_time (an ISO time), not both")
    when = None if at_time is None else _parse_time(at_time)
    last = await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    return await (await runtime.history(key.tenant)).state_at(key, at, at_time=when, last=last)  # settled once


def _parse_time(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"at_time {text!r} is not an ISO 8601 time (e.g. 2026-11-23T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
