"""`mirror bench pipeline`: wall time of each MIRROR stage per turn, in one process.

Production path: the MIRROR mind's own ``talk`` and ``think`` (:mod:`mirror.cognition.pipeline`),
which a conversation's turn and its thinking call, through the product's ``OpenAIChatClient``;
without memory, the actor, the bus or the log: the model's time and the pipeline's alone.

Runs a short scripted conversation through the real pipeline and the real httpx client —
against the offline local model, the simulator, or any OpenAI-compatible URL — and times the
Talker, the Inner Monologue and the Cognitive Controller separately. The events are folded in
memory (no broker or log involved), so the figures are the model's and the pipeline's alone.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.pipeline import MirrorConfig, talk, think
from mirror.cognition.prompts import PromptSet
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative, ThinkerFailed
from mirror.projections.conversation import apply, fold
from mirror.projections.state import initial_state
from mirror.sim.server import SimLLMServer, SimSettings
from mirror.stack.local_model import STRUCTURED_OUTPUT, LocalLLMServer

SCRIPT = (
    "Hi! I'm planning meals for the week. One thing first: I have a severe peanut allergy.",
    "I like spicy food, and I cook on weekday evenings in about thirty minutes.",
    "What is a good Thai dish for tonight? Satay with peanut sauce sounds great.",
)


class _TimedLLM:
    """Wraps a client and records how long each call took, by the stage that made it."""

    def __init__(self, client: OpenAIChatClient) -> None:
        self.client = client
        self.stage = "talker"
        self.timings: list[tuple[str, float]] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        stage = "monologue" if request.json_schema is not None else self.stage
        started = time.perf_counter()
        try:
            return await self.client.chat(request)
        finally:
            self.timings.append((stage, (time.perf_counter() - started) * 1000))

    async def embed(self, texts: Any) -> list[list[float]]:
        return await self.client.embed(texts)


@dataclass(frozen=True, slots=True)
class PipelineBenchConfig:
    base_url: str
    model: str
    mode: str = "full"
    turns: int = 3
    api_key: str | None = None
    structured_output: str = "json_schema"
    talker_max_tokens: int = 1024
    thinker_max_tokens: int = 3000


async def run_pipeline_bench(config: PipelineBenchConfig, prompts: PromptSet) -> dict[str, Any]:
    key = StreamKey("bench", "pipeline")
    settings = LLMSettings(
        base_url=config.base_url, model=config.model, api_key=config.api_key, timeout_s=300,
        structured_output=config.structured_output,  # type: ignore[arg-type]  # a str setting; LLMSettings refuses an unknown one
    )
    mirror_config = MirrorConfig(
        model=config.model, mode=config.mode,  # type: ignore[arg-type]  # a str setting; MirrorConfig refuses one outside MODES
        talker_max_tokens=config.talker_max_tokens, thinker_max_tokens=config.thinker_max_tokens,
    )
    state = initial_state(key)
    turns: list[dict[str, Any]] = []
    async with OpenAIChatClient(settings) as client:
        llm = _TimedLLM(client)
        for index in range(config.turns):
            message = SCRIPT[index % len(SCRIPT)]
            llm.timings.clear()
            llm.stage = "talker"
            started = time.perf_counter()
            said = await talk(state, message, llm, prompts, mirror_config)
            state = apply(state, make_event(key, state.last_seq + 1, said.turn, turn=index, provenance=said.provenance))
            llm.stage = "controller"
            thinking = await think(state, llm, prompts, mirror_config)
            state = fold(thinking.events(key, state.last_seq + 1), state)
            total = (time.perf_counter() - started) * 1000
            stages = {stage: round(ms, 1) for stage, ms in llm.timings}
            payloads = [thought.payload for thought in thinking.thoughts]
            turns.append({
                "turn": index,
                "reply_chars": len(said.reply),
                "threads_ok": any(isinstance(p, Monologue) for p in payloads),
                "narrative_ok": any(isinstance(p, Narrative) for p in payloads),
                "failures": [f"{p.stage}: {p.error_type}" for p in payloads if isinstance(p, ThinkerFailed)],
                "talker_ms": stages.get("talker"),
                "monologue_ms": stages.get("monologue"),
                "controller_ms": stages.get("controller"),
                "turn_ms": round(total, 1),
            })
    def median(name: str) -> float | None:
        values = [turn[name] for turn in turns if turn[name] is not None]
        return round(statistics.median(values), 1) if values else None

    return {
        "benchmark": "pipeline",
        "model": config.model,
        "mode": config.mode,
        "prompt_set": prompts.version,
        "turns": turns,
        "talker_p50_ms": median("talker_ms"),
        "monologue_p50_ms": median("monologue_ms"),
        "controller_p50_ms": median("controller_ms"),
        "turn_p50_ms": median("turn_ms"),
        "final_narrative": state.narrative,
    }


@contextlib.contextmanager
def llm_endpoint(llm: str, sim_latency: str = "fixed:0") -> Iterator[tuple[str, str, str]]:
    """(base_url, model, structured-output mode) for ``local``, ``sim`` or a URL; servers stop after."""
    if llm == "local":
        with LocalLLMServer() as server:
            yield server.base_url, server.model, STRUCTURED_OUTPUT
    elif llm == "sim":
        with SimLLMServer(SimSettings(latency=sim_latency)) as server:
            yield server.base_url, "mirror-sim", "json_schema"
    else:
        yield llm, "", "json_schema"


__all__ = ["PipelineBenchConfig", "SCRIPT", "llm_endpoint", "run_pipeline_bench"]
