"""A whole order-experiment run: the scripts with each order through a stack, every turn judged.

Where the stack comes from: ``settings.url`` (a running stack, with its token) or, with none, an
:class:`~mirror.stack.embedded.EmbeddedStack` started here on free ports against ``settings.llm``
(in ``settings.stack_data``, or a temporary directory removed afterwards) and stopped at the end,
as ``mirror eval curate`` does. The persona is sent with each conversation's first turn as a card
object, with the order (``appraisal_first`` / ``plan_first``), so the conversations are ordinary
persona conversations that ``mirror replay`` can inspect afterwards.

Every turn is synchronous (``?sync=true``): the previous turn's background steps (emotion,
relationship, goals) are done before the next, as in an unhurried conversation. After each turn
the appraisal it recorded is read from ``GET …/persona`` (the path's events are appended with the
turn), and the judge decides whether the reply expresses its emotion.

The judge is ``settings.judge`` (a URL, or ``sim``: a loopback simulator) or, by default, the
stack's own model (``--llm``'s: the embedded simulator or local model, or the URL).
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from mirror.cognition.errors import LLMError
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient, StructuredOutputMode
from mirror.cognition.persona import read_persona, to_card
from mirror.harness.errors import HarnessError
from mirror.harness.evals.persona_order.judge import judge_turn
from mirror.harness.evals.persona_order.scripts import chosen

__all__ = ["ORDERS", "PersonaOrderError", "PersonaOrderSettings", "run_persona_order", "summarise"]

ORDERS = ("appraisal_first", "plan_first")
REQUEST_TIMEOUT_S = 600.0  # a turn of the offline model is minutes of model time on a small machine
SIMULATED_MODEL = "mirror-sim"


class PersonaOrderError(HarnessError):
    """The run cannot go on (an option, the persona file, the stack or the gateway); one line says why."""


@dataclass(frozen=True)
class PersonaOrderSettings:
    persona: Path
    llm: str = "sim"
    """The embedded stack's model: ``sim``, ``local`` or an OpenAI-compatible base URL."""
    llm_model: str = ""
    llm_api_key: str | None = None
    judge: str | None = None
    """The judge: a base URL, ``sim``, or ``None`` for the stack's own model."""
    judge_model: str = ""
    judge_api_key: str | None = None
    judge_structured_output: StructuredOutputMode = "json_schema"
    conversations: int = 4
    turns: int | None = None
    url: str | None = None
    token: str | None = None
    stack_data: Path | None = None
    sim_latency: str = "fixed:5"
    concurrency: int = 2

    def check(self) -> None:
        if self.conversations < 1 or (self.turns is not None and self.turns < 1) or self.concurrency < 1:
            raise PersonaOrderError("--conversations, --turns and --concurrency must be 1 or more")
        if self.url is not None and not self.token:
            raise PersonaOrderError("--url needs --token (the gateway's bearer token)")
        if self.url is not None and self.judge is None:
            raise PersonaOrderError("against a running stack (--url) give --judge: its model is not known here")


@dataclass(frozen=True)
class _Stack:
    url: str
    token: str
    llm: LLMSettings | None
    note: str


@contextmanager
def _stack(settings: PersonaOrderSettings) -> Iterator[_Stack]:
    if settings.url is not None:
        yield _Stack(settings.url.rstrip("/"), settings.token or "", None, f"a running stack at {settings.url}")
        return
    from mirror.processes import free_port
    from mirror.stack.embedded import EmbeddedStack, StackSettings

    with tempfile.TemporaryDirectory(prefix="mirror-persona-order-") as scratch:
        data = settings.stack_data or Path(scratch) / "stack"
        stack = EmbeddedStack(StackSettings(
            data_dir=data, llm=settings.llm, llm_model=settings.llm_model, llm_api_key=settings.llm_api_key,
            gateway_port=free_port(), nats_port=free_port(), sim_latency=settings.sim_latency, memory=False,
            reflection=False)).start()
        try:
            yield _Stack(stack.url, stack.token, _stack_llm(stack, settings), f"an embedded stack in {data} "
                                                                              f"(--llm {settings.llm})")
        finally:
            stack.stop()


def _stack_llm(stack: Any, settings: PersonaOrderSettings) -> LLMSettings:
    """The stack's model, for a judge that defaults to it: where stack.json says it is served."""
    from mirror.stack.embedded import running_stack

    record = running_stack(stack.data_dir)
    if record is None:
        raise PersonaOrderError(f"the embedded stack in {stack.data_dir} recorded no stack.json")
    base_url = record["llm_url"]
    if settings.llm == "sim":
        return LLMSettings(base_url=base_url, model=SIMULATED_MODEL, timeout_s=REQUEST_TIMEOUT_S)
    if settings.llm == "local":
        from mirror.stack.local_model import STRUCTURED_OUTPUT

        model = httpx.get(f"{base_url}/models", timeout=30).json()["data"][0]["id"]
        return LLMSettings(base_url=base_url, model=model, structured_output=STRUCTURED_OUTPUT, timeout_s=REQUEST_TIMEOUT_S)
    return LLMSettings(base_url=base_url, model=settings.llm_model or "default", api_key=settings.llm_api_key,
                       timeout_s=REQUEST_TIMEOUT_S)


@contextmanager
def _judge(settings: PersonaOrderSettings, stack_llm: LLMSettings | None) -> Iterator[LLMSettings]:
    if settings.judge is None:
        assert stack_llm is not None  # PersonaOrderSettings.check: --url needs --judge
        yield stack_llm
    elif settings.judge == "sim":
        from mirror.sim.server import SimLLMServer, SimSettings

        with SimLLMServer(SimSettings()) as server:
            yield LLMSettings(base_url=server.base_url, model=SIMULATED_MODEL)
    else:
        yield LLMSettings(base_url=settings.judge, model=settings.judge_model or "default", api_key=settings.judge_api_key,
                          timeout_s=REQUEST_TIMEOUT_S, structured_output=settings.judge_structured_output)


async def _conversation(client: httpx.AsyncClient, judge: OpenAIChatClient, card: dict[str, Any], run: str,
                        script: str, messages: tuple[str, ...], order: str) -> list[dict[str, Any]]:
    conversation = f"po-{run}-{script}-{order.split('_')[0]}"
    verdicts: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        body: dict[str, Any] = {"message": message}
        if index == 0:
            body |= {"mind": "persona", "persona": card, "order": order}
        row: dict[str, Any] = {"order": order, "script": script, "conversation": conversation, "turn": index,
                               "message": message}
        response = await client.post(f"/v1/conversations/{conversation}/turns", json=body, params={"sync": "true"})
        if response.status_code != 200:
            verdicts.append({**row, "error": f"turn: HTTP {response.status_code}: {response.text[:300]}"})
            break  # the later turns would not be the same conversation
        answer = response.json()
        state = (await client.get(f"/v1/conversations/{conversation}/persona")).json()
        appraisal, plan = state.get("appraisal") or {}, state.get("plan") or {}
        row |= {"reply": answer["reply"], "appraisal": appraisal.get("text", ""), "plan": plan.get("text", ""),
                "steps_ms": answer.get("steps_ms"), "llm_ms": answer.get("llm_ms")}
        if appraisal.get("for_turn") != answer["turn"]:
            verdicts.append({**row, "error": f"no appraisal recorded for turn {answer['turn']}"})
            continue
        try:
            verdict = await judge_turn(judge, row["appraisal"], row["reply"])
        except LLMError as exc:
            verdicts.append({**row, "error": f"the judge failed: {type(exc).__name__}: {exc}"})
            continue
        verdicts.append({**row, "appraised_emotion": verdict.appraised_emotion, "expressed": verdict.expressed,
                         "reason": verdict.reason, "judge_model": verdict.provenance.get("model"),
                         "judge_ms": verdict.provenance.get("latency_ms")})
    return verdicts


async def _drive(settings: PersonaOrderSettings, stack: _Stack, judge_settings: LLMSettings,
                 card: dict[str, Any]) -> list[dict[str, Any]]:
    run = secrets.token_hex(3)
    slots = asyncio.Semaphore(settings.concurrency)
    judge = OpenAIChatClient(replace(judge_settings, max_concurrency=settings.concurrency))
    async with httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"},
                                 timeout=REQUEST_TIMEOUT_S) as client:
        try:
            try:
                (await client.get("/v1/conversations")).raise_for_status()
            except httpx.HTTPError as exc:
                raise PersonaOrderError(f"the gateway at {stack.url} refused or did not answer ({exc}); check --url "
                                        "and --token") from exc

            async def one(script: str, messages: tuple[str, ...], order: str) -> list[dict[str, Any]]:
                async with slots:
                    return await _conversation(client, judge, card, run, script, messages, order)

            done = await asyncio.gather(*(one(script, messages, order) for script, messages in
                                          chosen(settings.conversations, settings.turns) for order in ORDERS))
        finally:
            await judge.aclose()
    return [row for rows in done for row in rows]


def summarise(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per order: turns, judged, expressed, the rate (expressed / judged) and failures; and the
    "rational bias", appraisal-first's rate minus plan-first's (positive: plan first says the
    appraised emotion less)."""
    orders: dict[str, dict[str, Any]] = {}
    for order in ORDERS:
        rows = [row for row in verdicts if row["order"] == order]
        judged = [row for row in rows if "expressed" in row]
        expressed = sum(bool(row["expressed"]) for row in judged)
        orders[order] = {"turns": len(rows), "judged": len(judged), "expressed": expressed,
                         "rate": round(expressed / len(judged), 4) if judged else None,
                         "failed": len(rows) - len(judged)}
    first, second = orders["appraisal_first"]["rate"], orders["plan_first"]["rate"]
    return {"orders": orders, "rational_bias": None if first is None or second is None else round(first - second, 4)}


def run_persona_order(settings: PersonaOrderSettings) -> dict[str, Any]:
    """Run it (see the module docstring) and return the JSON summary with every per-turn verdict."""
    settings.check()
    persona = read_persona(settings.persona)  # a bad file: PersonaInvalid, before anything starts
    started = time.monotonic()
    with _stack(settings) as stack, _judge(settings, stack.llm) as judge_settings:
        verdicts = asyncio.run(_drive(settings, stack, judge_settings, to_card(persona)))
    notes = [f"Stack: {stack.note}.", f"Judge: {settings.judge or 'the stack model'} (model {judge_settings.model})."]
    models = {row.get("judge_model") for row in verdicts} | {judge_settings.model}
    if settings.llm == "sim" and settings.url is None or SIMULATED_MODEL in models:
        notes.append("The simulator's formulation says the appraised emotion whenever its plan (written after the "
                     "appraisal) means to show it, and one time in four otherwise, and its judge is a word rule: "
                     "these figures check the pipeline, not a model.")
    return {"persona": persona.name, "persona_version": persona.version, "llm": settings.url or settings.llm,
            "judge": settings.judge or "the stack's model", "judge_model": judge_settings.model,
            "conversations": settings.conversations, "turns_per_conversation": settings.turns,
            **summarise(verdicts), "verdicts": verdicts,
            "failed": [{"conversation": row["conversation"], "turn": row["turn"], "error": row["error"]}
                       for row in verdicts if "error" in row],
            "notes": notes, "seconds": round(time.monotonic() - started, 2)}
