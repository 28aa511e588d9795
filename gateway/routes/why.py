"""Why: what produced an event, a belief or an edge of a conversation (:mod:`mirror.replay.why`).

``GET /v1/conversations/{id}/why`` takes exactly one question — ``seq=N`` (an event), ``belief=ID``
or ``src=…&relation=…&dst=…`` (an edge) — and ``branch=`` (default ``main``). It reads the log
through the runtime's :class:`~mirror.replay.History` (a forked branch's inherited events
included), never the live actor: an event's question reads only up to its seq (and, for a belief
or an edge, the few events after it up to its memory step); a belief's reads only the events that
name it and its origin's turn and memory step (:mod:`mirror.replay.why_reads`), so it costs what
the belief's history holds, not the branch's length; an edge's reads the whole branch (paged by
the log port).

A belief's or an edge's recalls come a page at a time (``limit``, ``after``) with their total;
vectors are ``null`` unless ``vectors=true`` (as on ``/events``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mirror.gateway.runtime import Runtime, Tenant, branch_key, key_of
from mirror.replay.why import RecallPage, why_edge, why_event
from mirror.replay.why_reads import MEMORY_STEP_LOOKAHEAD, events_for_event, read_why_belief

__all__ = ["MEMORY_STEP_LOOKAHEAD", "RECALLS_PAGE", "router"]

router = APIRouter()

RECALLS_PAGE = 100
"""A belief's or an edge's recalls in one answer unless ``limit`` says otherwise."""


@router.get("/v1/conversations/{conversation}/why")
async def get_why(
    conversation: str, owner: Tenant, runtime: Runtime,
    seq: int | None = Query(None, ge=1, description="the event to explain"),
    belief: str | None = Query(None, min_length=1, description="the belief id to explain"),
    src: str | None = Query(None, min_length=1), relation: str | None = Query(None, min_length=1),
    dst: str | None = Query(None, min_length=1),
    branch: str = Query("main", description="the branch to read"),
    limit: int = Query(RECALLS_PAGE, ge=1, le=1000, description="a belief's or an edge's recalls in this answer"),
    after: int = Query(0, ge=0, description="the recalls after this seq (the previous page's next_after)"),
    vectors: bool = Query(False, description="include the events' vectors (base64); null otherwise"),
) -> dict[str, Any]:
    """What produced it (``causes``, most direct first, each with its event and model call) and,
    for a belief or an edge, every event that touched it (``history``, oldest first; its recalls
    apart, a page at a time: ``recalls``)."""
    key = branch_key(key_of(owner, conversation), branch)  # the ids first, as on every route
    edge = (src, relation, dst)
    asked = [name for name, given in (("seq", seq is not None), ("belief", belief is not None),
                                      ("src/relation/dst", any(part is not None for part in edge))) if given]
    if len(asked) != 1:
        raise HTTPException(400, "ask one question: seq=N (an event), belief=ID, or src=…&relation=…&dst=… (an "
                            "edge)" + (f"; got {' and '.join(asked)}" if asked else ""))
    if asked == ["src/relation/dst"] and not all(edge):
        missing = [name for name, part in zip(("src", "relation", "dst"), edge, strict=True) if not part]
        raise HTTPException(400, f"an edge is src, relation and dst: give {', '.join(missing)} too")
    await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    history = await runtime.history(key.tenant)
    last = await history.last_seq(key)  # a branch with no events, a belief or an edge never seen: a ReplayError
    if seq is not None:
        if seq > last:
            raise HTTPException(404, f"{key} has no seq {seq}: it ends at seq {last}")
        return why_event(key, await events_for_event(history, key, seq, last), seq).as_dict(vectors=vectors)
    page = RecallPage(after, limit)
    if belief is not None:
        return (await read_why_belief(history, key, belief, last)).as_dict(recalls=page, vectors=vectors)
    assert src and relation and dst  # checked above
    return why_edge(key, await history.events(key), (src, relation, dst)).as_dict(recalls=page, vectors=vectors)
