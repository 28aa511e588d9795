"""The simulator's CuRaTe judge answered by the real server over loopback HTTP, with provenance
(the rule alone: ``tests/unit/test_sim_curate.py``)."""

from __future__ import annotations

import asyncio

from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.harness.evals.curate.judge import rate
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.judge_cases import ANSWERS, CONSTRAINT, QUESTION


def test_the_judge_gets_the_rule_through_the_server_with_provenance() -> None:
    async def ratings() -> list[tuple[int, str]]:
        with SimLLMServer(SimSettings()) as server:
            async with OpenAIChatClient(LLMSettings(base_url=server.base_url, model="mirror-sim")) as client:
                found = []
                for answer in ANSWERS.values():
                    rating = await rate(client, CONSTRAINT, QUESTION, answer)
                    assert rating.provenance["model"] == "mirror-sim" and rating.provenance["request_fingerprint"]
                    found.append((rating.rating, rating.rationale))
                return found

    first = asyncio.run(ratings())
    assert [rating for rating, _ in first] == [0, 1, 2]
    assert asyncio.run(ratings()) == first
