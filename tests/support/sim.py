"""Clients of the simulator: the one model stand-in the tests use, over real loopback HTTP."""

from __future__ import annotations

from typing import Any

from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.sim.server import SimLLMServer

SIM_MODEL = "mirror-sim"


def sim_client(server: SimLLMServer, *, retries: int = 0, **overrides: Any) -> OpenAIChatClient:
    """An OpenAI client of ``server`` that gives up quickly (``retries`` retries, short backoff)."""
    options: dict[str, Any] = {"max_retries": retries, "backoff_initial_s": 0.01, "backoff_max_s": 0.02,
                               "timeout_s": 5.0, **overrides}
    return OpenAIChatClient(LLMSettings(base_url=server.base_url, model=SIM_MODEL, **options))
