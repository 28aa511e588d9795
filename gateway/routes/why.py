"""Why: what produced an event, a belief or an edge of a conversation (:mod:`mirror.replay.why`).

``GET /v1/conversations/{id}/why`` takes exactly one question — ``seq=N`` (an event), ``belief=ID``
or ``src=…&relation=…&dst=…`` (an edge) — and ``branch=`` (default ``main``). It reads the log
through the runtime's :class:`~mirror.replay.History` (a forked branch's inherited events
included), never the live actor: an event's question reads only up to its seq (and, for a belief
or an edge, the few events after it up to its memory step); a belief's or an edge's reads the
whole branch (paged by the log port).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Edge, MemoryStep
from mirror.gateway.runtime import Runtime, Tenant, branch_key, key_of
from mirror.replay import History
from mirror.replay.why import why_belief, why_edge, why_event

__all__ = ["MEMORY_STEP_LOOKAHEAD", "router"]

router = APIRouter()

MEMORY_STEP_LOOKAHEAD = 256
"""How many events past a belief or an edge a question about it reads to find its memory step
(the step's beliefs and edges come just before it: an extraction writes a few dozen at most)."""


@router.get("/v1/conversations/{conversation}/why")
async def get_why(
    conversation: str, owner: Tenant, runtime: Runtime,
    seq: int | None = Query(None, ge=1, description="the event to explain"),
    belief: str | None = Query(None, min_length=1, description="the belief id to explain"),
    src: str | None = Query(None, min_length=1), relation: str | None = Query(None, min_length=1),
    dst: str | None = Query(None, min_length=1),
    branch: str = Query("main", description="the branch to read"),
) -> dict[str, Any]:
    """What produced it (``causes``, most direct first, each with its event and model call) and,
    for a belief or an edge, every event that touched it (``history``, oldest first)."""
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
        return why_event(key, await _events_for(history, key, seq, last), seq).as_dict()
    events = await history.events(key)
    if belief is not None:
        return why_belief(key, events, belief).as_dict()
    assert src and relation and dst  # checked above
    return why_edge(key, events, (src, relation, dst)).as_dict()


async def _events_for(history: History, key: StreamKey, seq: int, last: int) -> list[Event]:
    """The events up to ``seq``; past it too, up to the memory step, when ``seq`` is a belief or an edge."""
    events = await history.events(key, until_seq=seq)
    if events and isinstance(events[-1].payload, Belief | Edge) and seq < last:
        later = await history.events(key, after_seq=seq, until_seq=min(last, seq + MEMORY_STEP_LOOKAHEAD))
        step = next((index for index, event in enumerate(later) if isinstance(event.payload, MemoryStep)), None)
        events += later if step is None else later[: step + 1]
    return events
