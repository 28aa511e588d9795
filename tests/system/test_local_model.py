"""Three turns against the real offline model (llama.cpp + Gemma 3 270M), when it is installed."""

from __future__ import annotations

import asyncio

import pytest

from mirror.cognition.prompts import default_prompt_set
from mirror.harness.bench.pipeline import PipelineBenchConfig, run_pipeline_bench
from mirror.stack.local_model import (
    LOCAL_TALKER_MAX_TOKENS,
    LOCAL_THINKER_MAX_TOKENS,
    STRUCTURED_OUTPUT,
    LocalLLMServer,
    local_model_installed,
)

pytestmark = [
    pytest.mark.long,  # ~110 s of llama.cpp on two cores: .ci/run runs it with -m long
    pytest.mark.skipif(not local_model_installed(), reason="the [local] extra is not installed"),
]


def test_three_turns_with_the_local_model(tmp_path) -> None:
    with LocalLLMServer(log_path=tmp_path / "llama.log") as server:
        config = PipelineBenchConfig(
            base_url=server.base_url, model=server.model, turns=3, structured_output=STRUCTURED_OUTPUT,
            talker_max_tokens=LOCAL_TALKER_MAX_TOKENS, thinker_max_tokens=LOCAL_THINKER_MAX_TOKENS,
        )
        result = asyncio.run(run_pipeline_bench(config, default_prompt_set()))
    assert len(result["turns"]) == 3
    for turn in result["turns"]:
        assert turn["reply_chars"] > 0, turn
        assert turn["threads_ok"] and turn["narrative_ok"] and not turn["failures"], turn
    assert result["final_narrative"]
