"""A tenant's conversations: the list, one's summary (from its actor), its events, paged, and
its timeline (every event's seq, type, turn and time, for a page to draw and step through).

The list, the events and the timeline are read from the log's owner over NATS; only the summary
wakes the conversation's actor. Unknown conversations are a 404 before any actor is involved.
Events leave out their vectors (``null``) unless ``vectors=true``: a recall's or a memory step's
vector is most of its bytes and no reader of this route but an export needs it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query

from mirror.events.ids import MAIN_BRANCH
from mirror.gateway.runtime import Runtime, Tenant, branch_key, key_of
from mirror.replay.why import event_json

__all__ = ["router"]

router = APIRouter()

MAX_ANCESTRY = 64
"""How many forks back a timeline follows (a regenerated reply on a regenerated branch, …)."""


@router.get("/v1/conversations")
async def list_conversations(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    """The tenant's conversations, including ones whose first turn was acknowledged a moment ago.

    The list is read from the log, which commits a little after the bus acknowledges; so it
    first waits for the log to hold what the stream held when asked (read-your-writes:
    :meth:`~mirror.gateway.runtime.GatewayRuntime.settled_tenant`).
    """
    await runtime.settled_tenant(owner)
    summaries = await (await runtime.log(owner)).conversations(owner)
    return {"conversations": [
        {"id": s.conversation, "branches": list(s.branches), "events": s.events, "last_seq": s.last_seq,
         "updated_at": s.updated_at, "turns": s.turns, "mind": s.mind} for s in summaries
    ]}


@router.get("/v1/conversations/{conversation}")
async def get_conversation(conversation: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    # The live conversation's summary, with its branches from the log (["main"] until the log holds
    # its first event): what a client needs to find one conversation without the tenant's list.
    # (A comment, not a docstring: FastAPI would publish a docstring in /openapi.json.)
    key = key_of(owner, conversation)
    await runtime.existing(key)
    summary = await runtime.ask(key, lambda conversation: conversation.summary(), resend_safe=True)
    logged = await (await runtime.log(owner)).conversations(owner, conversation)
    branches = list(logged[0].branches) if logged else ["main"]
    return {"id": conversation, **{k: v for k, v in summary.as_dict().items() if k not in ("tenant", "conversation")},
            "branches": branches}


@router.get("/v1/conversations/{conversation}/events")
async def get_events(conversation: str, owner: Tenant, runtime: Runtime, after: int = Query(0, ge=0),
                     limit: int = Query(100, ge=1, le=1000),
                     branch: str = Query("main", description="a branch's own events (not those it inherits)"),
                     until: int | None = Query(None, ge=0, description="the events up to this seq only"),
                     listed_types: str | None = Query(None, alias="type",
                                                      description="only events of these types (comma-separated)"),
                     vectors: bool = Query(False, description="include vectors (base64); null otherwise")) -> dict[str, Any]:
    key = branch_key(key_of(owner, conversation), branch)  # both ids checked before anything is looked up
    types = _types(listed_types)
    await runtime.existing(key)  # read-your-writes: the log holds what the bus acknowledged
    event_log = await runtime.log(key.tenant)
    if types is None:
        events = await event_log.read(key, after_seq=after, until_seq=until, limit=limit)
    else:  # the log filters by type (a column); a range wider than a page is cut here
        events = (await event_log.find(key, types=types, after_seq=after, until_seq=until))[:limit]
    return {"events": [event_json(event, vectors=vectors) for event in events],
            "next_after": events[-1].seq if events else after}


def _types(listed: str | None) -> tuple[str, ...] | None:
    if listed is None:
        return None
    types = tuple(name.strip() for name in listed.split(",") if name.strip())
    if not types:
        raise HTTPException(400, "type lists event types, comma-separated (e.g. type=turn); it was empty")
    return types


@router.get("/v1/conversations/{conversation}/timeline")
async def get_timeline(conversation: str, owner: Tenant, runtime: Runtime,
                       branch: str = Query("main", description="the branch, with the events it inherits")) -> dict[str, Any]:
    # Every event's seq, type, turn and time, in columns, read without decoding a payload: what
    # the inspector draws its timeline from and pages events by (a comment, not a docstring: see above).
    key = branch_key(key_of(owner, conversation), branch)
    await runtime.existing(key)  # read-your-writes, as every read
    history = await runtime.history(key.tenant)
    entries = await history.index(key)
    fork = await history.fork_point(key) if key.branch != MAIN_BRANCH else None
    ancestry: list[dict[str, Any]] = []
    point = fork  # the branches it inherits from, nearest first: each up to the seq it forked after
    while point is not None and len(ancestry) < MAX_ANCESTRY:
        ancestry.append({"branch": point.parent.branch, "until": point.fork_seq})
        point = await history.fork_point(point.parent) if point.parent.branch != MAIN_BRANCH else None
    kinds: dict[str, int] = {}
    return {
        "branch": key.branch, "fork_seq": None if fork is None else fork.fork_seq, "ancestry": ancestry,
        "last_seq": entries[-1].seq if entries else 0,
        "seq": [entry.seq for entry in entries],
        "type": [kinds.setdefault(entry.type, len(kinds)) for entry in entries],
        "types": list(kinds),
        "turn": [entry.turn for entry in entries],
        "ts": [round(entry.timestamp, 3) for entry in entries],
    }

