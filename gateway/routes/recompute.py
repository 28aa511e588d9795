"""Recompute: re-think a tenant's conversations on a branch with a changed prompt set.

``GET /v1/prompts`` answers the templates a recompute may replace, as served (the runtime's
``prompts_dir``, else the built-in set; the persona mind's built-in set), so a client can show one
and send it back edited.
``POST /v1/recompute`` starts a detached driver actor (``main`` is never written); ``GET
/v1/recompute/{job}`` follows it. Once a job has finished, its final status goes into the
runtime's :class:`~mirror.gateway.runtime.FinishedJobs` and its driver is killed; that
record keeps the last ``max_finished_jobs``, so a long-finished job is forgotten (a 404 that
says so). A running job is never forgotten: it is its driver, found by name.

Ray and the recompute driver are imported inside the routes that use them: every CLI command
imports this package (through the stack's settings), and importing ``ray`` measured ~0.5 s on
top of the gateway's ~0.8 s (``recompute_driver`` ~0.6 s).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from mirror.actors.settings import settings_prompts
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.prompts import PromptSet
from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import validate_identifier
from mirror.gateway.runtime import Runtime, Tenant
from mirror.replay import RecomputePlan

__all__ = ["RecomputeIn", "get_prompts", "ray_get_actor", "ray_kill", "router"]

router = APIRouter()


class RecomputeIn(BaseModel):
    prompts: dict[str, str] = {}
    """Templates that replace the served prompt set's (file name → text); the rest stay."""
    persona_prompts: dict[str, str] = {}
    """Persona templates that replace the built-in persona set's, for persona conversations."""
    conversations: list[str] = []
    """Conversation ids to recompute; empty: all of the tenant's."""
    from_seq: int = 1
    mode: str | None = None
    counterfactual: bool = False
    branch: str | None = None
    concurrency: int = 8


@router.post("/v1/recompute", status_code=202)
async def post_recompute(body: RecomputeIn, owner: Tenant, runtime: Runtime,
                         wait: bool = Query(False, description="answer with the report when done")) -> Any:
    """Re-think conversations on a branch with a changed prompt set; ``main`` is never written.

    The job runs in a driver actor on the Ray cluster; follow it with ``GET /v1/recompute/{job}``.
    Starting the same recompute again after an interruption resumes its branches.
    """
    from mirror.actors.conversation_actor import NAMESPACE
    from mirror.actors.recompute_driver import (
        RecomputeDriver,
        RecomputeJob,
        driver_name,
        persona_prompt_set_with,
        prompt_set_with,
    )

    settings = runtime.settings.runtime
    try:
        base = settings_prompts(settings)
        plan = RecomputePlan(prompt_set_with(body.prompts, base), from_seq=body.from_seq, mode=body.mode,
                             counterfactual=body.counterfactual, branch=body.branch,
                             persona_prompts=persona_prompt_set_with(body.persona_prompts))
        job = RecomputeJob(owner, plan, tuple(body.conversations), concurrency=body.concurrency)
    except (ValueError, InvalidIdentifier) as exc:
        raise HTTPException(400, str(exc)) from None
    job_id = uuid.uuid4().hex[:16]
    driver = RecomputeDriver.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
        name=driver_name(owner, job_id), namespace=NAMESPACE, lifetime="detached",
    ).remote(settings, job, job_id)
    running = driver.run.remote()
    if not wait:
        return (await driver.status.remote()).as_dict()
    status = (await running).as_dict()
    runtime.finished_jobs.record(owner, job_id, status)
    ray_kill(driver)
    if status["status"] == "failed":
        raise HTTPException(400 if "RecomputeError" in status["error"] else 500, status["error"])
    return JSONResponse(status, status_code=200)


@router.get("/v1/prompts")
async def get_prompts(owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    """The served prompt sets: each template's text by file name, exactly the names ``POST
    /v1/recompute`` takes in ``prompts`` and ``persona_prompts``; ``prompt_set`` is each set's
    version (name and digest), as the events' provenance records it."""
    return {**_prompt_set(settings_prompts(runtime.settings.runtime)), "persona": _prompt_set(default_persona_prompts())}


def _prompt_set(prompts: PromptSet) -> dict[str, Any]:
    return {"prompt_set": prompts.version, "templates": dict(prompts.templates)}


@router.get("/v1/recompute/{job}")
async def get_recompute(job: str, owner: Tenant, runtime: Runtime) -> dict[str, Any]:
    """A recompute job's progress, and its report once done."""
    from mirror.actors.conversation_actor import NAMESPACE
    from mirror.actors.recompute_driver import driver_name

    finished = runtime.finished_jobs.get(owner, job)
    if finished is not None:
        return finished
    try:
        validate_identifier("job", job)
        driver = ray_get_actor(driver_name(owner, job), NAMESPACE)
    except (ValueError, InvalidIdentifier):
        raise HTTPException(404, f"no recompute job {job!r} for this tenant: none was started, or it finished and "
                            f"was forgotten (a gateway remembers the last {runtime.finished_jobs.limit} finished "
                            "jobs)") from None
    try:
        status = (await driver.status.remote()).as_dict()
    except Exception as exc:  # the driver's process died: its tasks died with it
        status = {"job": job, "status": "failed", "error": f"the driver died ({type(exc).__name__}); "
                  "start the same recompute again to resume it"}
    if status["status"] != "running":
        runtime.finished_jobs.record(owner, job, status)
        ray_kill(driver)
    return status


def ray_get_actor(name: str, namespace: str) -> Any:
    import ray

    return ray.get_actor(name, namespace=namespace)


def ray_kill(handle: Any) -> None:
    import ray

    ray.kill(handle, no_restart=True)
