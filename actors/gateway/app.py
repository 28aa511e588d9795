"""The multi-tenant HTTP gateway (FastAPI; OpenAPI at /docs).

Every route but ``/healthz`` needs ``Authorization: Bearer <token>``; the token maps to exactly
one tenant, and every identifier a route touches is scoped by that tenant — no route can name
another tenant's conversation. Turns go to the conversation's Ray actor through its handle
(uvicorn → actor handle measured ~1.8 ms p50 here, against ~7.5 ms for Ray Serve's proxy, so
the gateway is plain uvicorn processes behind any load balancer). Reads go to the log's owner
over NATS; ``/stream`` relays the conversation's new events (a bus subscription) as server-sent events.

Bad input changes nothing: identifiers, message size, malformed JSON and unknown conversations
are refused with a 4xx that says what was wrong, before any actor or append is involved.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from mirror.actors._threaded_server import ThreadedServer
from mirror.actors.conversation import RuntimeSettings
from mirror.actors.errors import Fenced
from mirror.actors.gateway.tenants import TenantRegistry
from mirror.actors.results import ConversationSummary, TurnResult
from mirror.events.bus import EventBus
from mirror.events.codec import to_json_ready
from mirror.events.errors import InvalidIdentifier, LogUnavailable
from mirror.events.ids import StreamKey, validate_identifier
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024


@dataclass(frozen=True)
class GatewaySettings:
    runtime: RuntimeSettings
    tenants_file: str
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    actor_timeout_s: float = 300.0


async def require_tenant(request: Request) -> str:
    """The tenant of the request's bearer token; 401 without a valid one.

    Async on purpose: FastAPI runs a plain ``def`` dependency on a worker thread, a hop that
    cost more per request than the check itself.
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    registry: TenantRegistry = request.app.state.registry
    owner = registry.tenant_of(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if owner is None:
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
    return owner


Tenant = Annotated[str, Depends(require_tenant)]


class TurnIn(BaseModel):
    message: str


class TurnOut(BaseModel):
    reply: str
    turn: int
    seq: int
    narrative_seq: int | None
    llm_ms: float | None = None
    """How long the Talker's LLM call took, as Mirror saw it (so clients can tell Mirror's share)."""


def create_app(settings: GatewaySettings, actors: Any = None) -> FastAPI:
    """The ASGI app; ``actors(key) -> handle`` defaults to the Ray conversation actors."""
    if actors is None:
        from mirror.actors.conversation_actor import conversation_actor

        def actors(key: StreamKey) -> Any:
            return conversation_actor(key, settings.runtime)

    registry = TenantRegistry(settings.tenants_file)
    app = FastAPI(title="Mirror", summary="LLM conversations that think between turns", version="0.1.0")
    app.state.registry = registry
    opened: dict[str, Any] = {}
    handles: dict[StreamKey, Any] = {}

    async def bus() -> JetStreamBus:
        if "bus" not in opened:
            opened["bus"] = await JetStreamBus.connect(settings.runtime.nats_url, settings.runtime.stream)
        return opened["bus"]

    async def log_client() -> LogClient:
        return LogClient((await bus()).nc, shard=settings.runtime.shard)

    def key_of(tenant_id: str, conversation: str) -> StreamKey:
        try:
            return StreamKey(tenant_id, validate_identifier("conversation", conversation))
        except InvalidIdentifier as exc:
            raise HTTPException(400, str(exc)) from None

    async def existing(key: StreamKey) -> int:
        last_seq = await (await log_client()).last_seq(key)
        if last_seq == 0:
            bus_head = await _stream_last_seq(await bus(), key)
            if bus_head is None:
                raise HTTPException(404, f"no conversation {key.conversation!r} for this tenant")
            return bus_head
        return last_seq

    async def ask(key: StreamKey, method: str, *args: Any) -> Any:
        """Call the conversation's actor; a passivating or vanished one is re-activated and asked again."""
        from ray.exceptions import ActorDiedError

        from mirror.actors.conversation_actor import is_passivated

        attempts = 5
        for attempt in range(1, attempts + 1):
            handle = handles.get(key)
            if handle is None:  # get-or-create is a round trip to Ray's control store: once per actor
                handle = handles[key] = actors(key)
            try:
                return await asyncio.wait_for(getattr(handle, method).remote(*args), settings.actor_timeout_s)
            except Exception as exc:
                handles.pop(key, None)
                cause = getattr(exc, "cause", None) or exc
                if isinstance(cause, Fenced):
                    raise HTTPException(409, f"conversation moved on elsewhere; retry: {cause}") from None
                if not is_passivated(exc) or attempt == attempts:
                    raise
                if not isinstance(exc, ActorDiedError):  # a dead actor's name is free at once
                    await asyncio.sleep(0.05 * attempt)

    @app.exception_handler(LogUnavailable)
    async def log_unavailable(request: Request, exc: LogUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/conversations/{conversation}/turns", response_model=TurnOut)
    async def post_turn(conversation: str, body: TurnIn, owner: Tenant, response: Response,
                        sync: bool = Query(False, description="wait for the previous turn's thinking first")) -> Any:
        started = time.perf_counter()
        key = key_of(owner, conversation)
        if not body.message.strip():
            raise HTTPException(400, "message is empty")
        size = len(body.message.encode())
        if size > settings.max_message_bytes:
            raise HTTPException(413, f"message is {size} bytes; the limit is {settings.max_message_bytes}")
        result: TurnResult = await ask(key, "turn", body.message, sync)
        response.headers["Server-Timing"] = server_timing(result, (time.perf_counter() - started) * 1000)
        return result.as_dict()

    @app.get("/v1/conversations")
    async def list_conversations(owner: Tenant) -> dict[str, Any]:
        summaries = await (await log_client()).conversations(owner)
        return {"conversations": [
            {"id": s.conversation, "branches": list(s.branches), "events": s.events, "last_seq": s.last_seq,
             "updated_at": s.updated_at} for s in summaries
        ]}

    @app.get("/v1/conversations/{conversation}")
    async def get_conversation(conversation: str, owner: Tenant) -> dict[str, Any]:
        key = key_of(owner, conversation)
        await existing(key)
        summary: ConversationSummary = await ask(key, "summary")
        return {"id": conversation, **{k: v for k, v in summary.as_dict().items() if k not in ("tenant", "conversation")}}

    @app.get("/v1/conversations/{conversation}/events")
    async def get_events(conversation: str, owner: Tenant, after: int = Query(0, ge=0),
                         limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        key = key_of(owner, conversation)
        await existing(key)
        events = await (await log_client()).read(key, after_seq=after, limit=limit)
        return {"events": [_json(to_json_ready(event)) for event in events],
                "next_after": events[-1].seq if events else after}

    # ------------------------------------------------------------------ time travel

    async def history() -> Any:
        from mirror.replay import History

        if "history" not in opened:
            event_bus = await bus()
            opened["history"] = History(
                await log_client(), snapshot_every=settings.runtime.snapshot_every,
                stream_head=lambda key: _stream_last_seq(event_bus, key),
            )
        return opened["history"]

    def branch_key(key: StreamKey, branch: str) -> StreamKey:
        try:
            return StreamKey(key.tenant, key.conversation, validate_identifier("branch", branch))
        except InvalidIdentifier as exc:
            raise HTTPException(400, str(exc)) from None

    async def state_of(key: StreamKey, at: int | None, at_time: str | None) -> Any:
        from mirror.replay import ReplayError

        if at is not None and at_time is not None:
            raise HTTPException(400, "give at (a seq) or at_time (an ISO time), not both")
        when = None if at_time is None else _parse_time(at_time)
        await existing(StreamKey(key.tenant, key.conversation))
        try:
            return await (await history()).state_at(key, at, at_time=when)
        except ReplayError as exc:
            raise HTTPException(404, str(exc)) from None

    @app.get("/v1/conversations/{conversation}/state")
    async def get_state(
        conversation: str, owner: Tenant,
        at: int | None = Query(None, ge=0, description="the seq to look at (default: the last)"),
        at_time: str | None = Query(None, description="or an ISO 8601 time: the state as it was then"),
        branch: str = Query("main"),
    ) -> dict[str, Any]:
        """The projected state exactly as it was right after event ``at`` (or at ``at_time``)."""
        from mirror.replay import state_view

        key = branch_key(key_of(owner, conversation), branch)
        return state_view(await state_of(key, at, at_time))

    @app.get("/v1/conversations/{conversation}/diff")
    async def get_diff(
        conversation: str, owner: Tenant,
        source: int | None = Query(None, alias="from", ge=0, description="seq of the earlier state (default 0)"),
        target: int | None = Query(None, alias="to", ge=0, description="seq of the later state (default: the last)"),
        from_branch: str = Query("main"), to_branch: str = Query("main"),
    ) -> dict[str, Any]:
        """What changed between two states: narrative text diff, beliefs and edges added/removed/changed."""
        from mirror.replay import diff

        key = key_of(owner, conversation)
        before = await state_of(branch_key(key, from_branch), source or 0, None)
        after = await state_of(branch_key(key, to_branch), target, None)
        return diff(before, after).as_dict()

    # ------------------------------------------------------------------ recompute

    finished: dict[tuple[str, str], dict[str, Any]] = {}  # (tenant, job) → final status; its driver is stopped

    @app.post("/v1/recompute", status_code=202)
    async def post_recompute(body: RecomputeIn, owner: Tenant,
                             wait: bool = Query(False, description="answer with the report when done")) -> Any:
        """Re-think conversations on a branch with a changed prompt set; ``main`` is never written.

        The job runs in a driver actor on the Ray cluster; follow it with ``GET /v1/recompute/{job}``.
        Starting the same recompute again after an interruption resumes its branches.
        """
        import uuid

        from mirror.actors.conversation_actor import NAMESPACE
        from mirror.actors.recompute_driver import RecomputeDriver, RecomputeJob, driver_name, prompt_set_with
        from mirror.cognition.prompts import default_prompt_set, load_prompt_set
        from mirror.replay import RecomputePlan

        try:
            base = load_prompt_set(settings.runtime.prompts_dir) if settings.runtime.prompts_dir else default_prompt_set()
            plan = RecomputePlan(prompt_set_with(body.prompts, base), from_seq=body.from_seq, mode=body.mode,
                                 counterfactual=body.counterfactual, branch=body.branch)
            job = RecomputeJob(owner, plan, tuple(body.conversations), concurrency=body.concurrency)
        except (ValueError, InvalidIdentifier) as exc:
            raise HTTPException(400, str(exc)) from None
        job_id = uuid.uuid4().hex[:16]
        driver = RecomputeDriver.options(  # type: ignore[attr-defined]
            name=driver_name(owner, job_id), namespace=NAMESPACE, lifetime="detached",
        ).remote(settings.runtime, job, job_id)
        running = driver.run.remote()
        if not wait:
            return (await driver.status.remote()).as_dict()
        status = (await running).as_dict()
        finished[(owner, job_id)] = status
        ray_kill(driver)
        if status["status"] == "failed":
            raise HTTPException(400 if "RecomputeError" in status["error"] else 500, status["error"])
        return JSONResponse(status, status_code=200)

    @app.get("/v1/recompute/{job}")
    async def get_recompute(job: str, owner: Tenant) -> dict[str, Any]:
        """A recompute job's progress, and its report once done."""
        from mirror.actors.conversation_actor import NAMESPACE
        from mirror.actors.recompute_driver import driver_name

        if (owner, job) in finished:
            return finished[(owner, job)]
        try:
            validate_identifier("job", job)
            driver = ray_get_actor(driver_name(owner, job), NAMESPACE)
        except (ValueError, InvalidIdentifier):
            raise HTTPException(404, f"no recompute job {job!r} for this tenant") from None
        try:
            status = (await driver.status.remote()).as_dict()
        except Exception as exc:  # the driver's process died: its tasks died with it
            status = {"job": job, "status": "failed", "error": f"the driver died ({type(exc).__name__}); "
                      "start the same recompute again to resume it"}
        if status["status"] != "running":
            finished[(owner, job)] = status
            ray_kill(driver)
        return status

    @app.get("/v1/conversations/{conversation}/stream")
    async def stream(conversation: str, owner: Tenant) -> StreamingResponse:
        key = key_of(owner, conversation)
        await existing(key)
        return StreamingResponse(_sse(await bus(), key), media_type="text/event-stream")

    return app


class RecomputeIn(BaseModel):
    prompts: dict[str, str] = {}
    """Templates that replace the served prompt set's (file name → text); the rest stay."""
    conversations: list[str] = []
    """Conversation ids to recompute; empty: all of the tenant's."""
    from_seq: int = 1
    mode: str | None = None
    counterfactual: bool = False
    branch: str | None = None
    concurrency: int = 8


def ray_get_actor(name: str, namespace: str) -> Any:
    import ray

    return ray.get_actor(name, namespace=namespace)


def ray_kill(handle: Any) -> None:
    import ray

    ray.kill(handle, no_restart=True)


def _parse_time(text: str) -> float:
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"at_time {text!r} is not an ISO 8601 time (e.g. 2026-11-23T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


SERVER_TIMING = (("llm", "llm_ms"), ("talk", "talk_ms"), ("append", "append_ms"), ("actor", "turn_ms"))
"""Server-Timing metrics of a turn: the Talker's LLM call, the whole Talker, the fenced append,
the actor's whole turn; ``gateway`` is the gateway's handler around the actor call."""


def server_timing(result: TurnResult, gateway_ms: float) -> str:
    parts = [f"{name};dur={getattr(result, field):.3f}" for name, field in SERVER_TIMING
             if getattr(result, field) is not None]
    return ", ".join([*parts, f"gateway;dur={gateway_ms:.3f}"])


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


async def _stream_last_seq(bus: EventBus, key: StreamKey) -> int | None:
    """The last seq the bus holds for ``key`` (None: nothing), committed to the log yet or not."""
    return (await bus.head(key)).last_seq


SSE_KEEP_ALIVE_S = 15.0


async def _sse(bus: EventBus, key: StreamKey) -> AsyncIterator[bytes]:
    """New events of ``key`` as server-sent events, as they are appended."""
    subscription = await bus.subscribe(key)
    try:
        yield b": connected\n\n"
        while True:
            try:  # a cancelled wait loses nothing (see Subscription)
                event = await asyncio.wait_for(anext(subscription), SSE_KEEP_ALIVE_S)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            except StopAsyncIteration:
                return
            payload = json.dumps(to_json_ready(event), default=str)
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {payload}\n\n".encode()
    finally:
        await subscription.aclose()


class GatewayServer(ThreadedServer):
    """The gateway on a loopback port, served by uvicorn in a background thread (tests, `mirror up`)."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(app, name="mirror gateway", host=host, port=port, start_timeout=15.0)
