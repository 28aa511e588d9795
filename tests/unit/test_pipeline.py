"""The MIRROR pipeline's requests, in process: prompt sets, the thinker's history budget, token
estimates and the Talker's recall block. Whole turns through the real httpx client against the
simulator over HTTP are in ``tests/system/test_pipeline.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mirror.cognition.errors import PromptSetError
from mirror.cognition.history import bound_history
from mirror.cognition.llm import ChatMessage
from mirror.cognition.pipeline import (
    MODES,
    MirrorConfig,
    talker_request,
)
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS, default_prompt_set, load_prompt_set
from mirror.events.ids import StreamKey
from mirror.projections.monologue import estimate_tokens
from mirror.projections.state import initial_state

PROMPTS = default_prompt_set()


# ------------------------------------------------------------------------------ prompts


def test_prompt_set_version_is_the_hash_of_its_content(tmp_path: Path) -> None:
    copy = tmp_path / "default"
    shutil.copytree(DEFAULT_PROMPT_SETS / "default", copy)
    assert load_prompt_set(copy).version == PROMPTS.version
    (copy / "controller.md").write_text((copy / "controller.md").read_text() + " ")
    assert load_prompt_set(copy).version != PROMPTS.version
    (copy / "talker.md").unlink()
    with pytest.raises(PromptSetError, match="lacks talker.md"):
        load_prompt_set(copy)


# ------------------------------------------------------------------------------ history


def messages(sizes: list[int]) -> list[ChatMessage]:
    out = [ChatMessage("system", "s" * 4)]
    for index, size in enumerate(sizes):
        out.append(ChatMessage("user" if index % 2 == 0 else "assistant", "x" * (4 * size)))
    return out


@pytest.mark.parametrize(
    "budget, kept_tail",
    [(10_000, 12), (1 + 1 + 10 * 100, 10), (1 + 1 + 10 * 100 - 1, 6), (1 + 1 + 4 * 100, 4), (1 + 1 + 4 * 100 - 1, 2), (5, 2)],
)
def test_thinker_history_keeps_system_first_user_and_the_largest_tail_that_fits(budget: int, kept_tail: int) -> None:
    history = messages([1] + [100] * 12)  # first user message of 1 token, then 12 messages of 100
    kept = bound_history(history, budget)
    assert kept[0] == history[0] and kept[1] == history[1]
    assert list(kept[2:]) == history[-kept_tail:] if kept_tail < 12 else list(kept) == history


def test_token_estimate_boundaries() -> None:
    assert [estimate_tokens("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


@pytest.mark.parametrize("mode", MODES)
def test_the_recall_block_is_in_the_talkers_request_and_nothing_is_without_one(mode: str) -> None:
    """With nothing recalled the request is the one sent before recall existed (old logs replay);
    with a block, the memory section holds it, so the fingerprint covers what was recalled."""
    prompts = default_prompt_set()
    config = MirrorConfig(model="m", mode=mode)  # type: ignore[arg-type]  # MODES holds only valid modes
    state = initial_state(StreamKey("t", "c"))
    bare = talker_request(state, "Suggest a snack.", prompts, config)
    block = "What you remember about this conversation (strongest first):\n- (belief, strength 0.80) Peanut allergy."
    remembered = talker_request(state, "Suggest a snack.", prompts, config, block)
    assert "$memory" not in bare.messages[0].content and "remember" not in bare.messages[0].content.lower()
    assert block in remembered.messages[0].content
    assert remembered.messages[0].content.startswith(bare.messages[0].content)
    assert remembered.messages[1:] == bare.messages[1:] and remembered.fingerprint() != bare.fingerprint()
