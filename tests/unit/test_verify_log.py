"""``replay verify`` over a log, in process (the in-memory bus and log, a scripted model behind
the LLM port): names are resolved, so a typo is an error rather than "ok, 0 steps"; a prompt
change that made a request the log never answered is said so, naming the stage and the template;
a recompute branch is verified with the prompt set its ``fork`` event recorded, with zero model
calls, also when it was made from one changed template and no directory exists.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet, default_prompt_set
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.ids import StreamKey
from mirror.events.log import LogAccess
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Fork, Narrative, Provenance
from mirror.projections.state import initial_state
from mirror.replay import (
    History,
    RecomputePlan,
    UnknownBranch,
    UnknownConversation,
    recompute_conversation,
    verify_conversations,
)
from mirror.replay.verify import RECORDING_MISS

TENANT = "acme"
MESSAGES = ("I never eat peanuts.", "Tell me about rivers.", "And mountains?")


class ScriptedModel:
    """The LLM port answered in process: a monologue's JSON or a sentence, both from the request's
    fingerprint (the same request, the same answer). Counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        digest = request.fingerprint()[:8]
        if request.json_schema is not None:
            content = json.dumps({"reasoning": f"I weigh {digest}.", "memory": f"I recall {digest}.",
                                  "goal": f"I aim at {digest}."})
        else:
            content = f"I answer {digest}."
        parameters: dict[str, float | int | str] = {"temperature": float(request.temperature),
                                                    "max_tokens": request.max_tokens}
        if request.seed is not None:
            parameters["seed"] = request.seed
        return ChatResponse(content, Provenance(request.model, request.prompt_set, request.fingerprint(), parameters,
                                                response=content))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("these conversations keep no memory: nothing is embedded")


def with_changed(template: str, extra: str, name: str = "custom") -> PromptSet:
    """The built-in set with one template changed, as ``POST /v1/recompute`` makes it."""
    default = default_prompt_set()
    return PromptSet(name, {**default.templates, template: default.templates[template] + "\n" + extra + "\n"})


async def converse(infrastructure: InMemoryInfrastructure, key: StreamKey, model: ScriptedModel,
                   prompts: PromptSet | None = None) -> LogAccess:
    """``MESSAGES`` on ``key``, each reply thought through (no memory stage); the log."""
    connections = await infrastructure.connect(name="test")
    prompts = prompts or default_prompt_set()
    writer = ConversationWriter(connections.bus, key, initial_state(key), Head(0, (await connections.bus.head(key)).fence))
    config = MirrorConfig(model="scripted", memory=False)
    for message in MESSAGES:
        await writer.take_turn(message, llm=model, prompts=prompts, config=config, recaller=no_recall)
        await writer.think_until_current(model, prompts, config, attempts=1)
    return connections.log(key.tenant)


async def recomputed(infrastructure: InMemoryInfrastructure, key: StreamKey, model: ScriptedModel,
                     prompts: PromptSet) -> StreamKey:
    connections = await infrastructure.connect(name="test")
    plan = RecomputePlan(prompts)
    await recompute_conversation(key, plan, history=History(connections.log(key.tenant)), bus=connections.bus,
                                 live=model)
    return StreamKey(key.tenant, key.conversation, plan.branch_name)


async def test_an_unknown_conversation_or_branch_is_an_error_not_an_empty_pass() -> None:
    infrastructure = InMemoryInfrastructure()
    log = await converse(infrastructure, StreamKey(TENANT, "known"), ScriptedModel())
    with pytest.raises(UnknownConversation, match="tenant 'acme' has no conversation 'nosuch'"):
        await verify_conversations(log, TENANT, "nosuch")
    with pytest.raises(UnknownBranch, match=r"acme/known/rc-typo: conversation 'known' has no branch 'rc-typo' "
                                            r"\(its branches: main\)"):
        await verify_conversations(log, TENANT, "known", "rc-typo")
    with pytest.raises(UnknownBranch, match="none of its 1 conversation"):
        await verify_conversations(log, TENANT, None, "rc-typo")
    assert await verify_conversations(log, "initech", None) == []  # a tenant with nothing yet: nothing to verify
    (report,) = await verify_conversations(log, TENANT, "known")
    assert report.ok and report.steps > 0 and report.model_calls == 0


async def test_a_changed_prompt_is_reported_as_a_request_the_log_never_answered() -> None:
    infrastructure = InMemoryInfrastructure()
    key = StreamKey(TENANT, "reprompted")
    log = await converse(infrastructure, key, ScriptedModel())
    changed = with_changed("controller.md", "I keep my narrative to three sentences.", name="mine")
    (report,) = await verify_conversations(log, TENANT, key.conversation, prompts=changed)
    narratives = [event.seq for event in await log.read(key) if isinstance(event.payload, Narrative)]
    # One divergence per controller step, at its narrative: no field-by-field noise, nothing after it.
    assert [d.seq for d in report.divergences] == narratives
    assert {(d.kind, d.stage) for d in report.divergences} == {(RECORDING_MISS, "controller")}
    reason = report.divergences[0].reason
    assert reason.startswith("controller: the replay asked a request the log never answered (controller.md changed "
                             "since the recording)"), reason
    assert "where the log has a narrative" in reason and "differs in" not in reason
    default = default_prompt_set().version
    assert report.prompt_notes == [f"controller.md changed compared with prompt set {default}, which the log was "
                                   f"recorded with (replaying with {changed.version})"]
    assert report.model_calls == 0
    as_json = report.as_dict()
    assert as_json["prompt_set"] == changed.version and as_json["divergences"][0]["kind"] == RECORDING_MISS


async def test_a_log_recorded_with_a_prompt_set_this_checkout_lacks_says_so() -> None:
    infrastructure = InMemoryInfrastructure()
    key = StreamKey(TENANT, "elsewhere")
    talker = with_changed("talker.md", "I answer in one line.", name="theirs")
    log = await converse(infrastructure, key, ScriptedModel(), talker)
    (report,) = await verify_conversations(log, TENANT, key.conversation)  # with the built-in set
    first = report.divergences[0]
    assert (first.kind, first.stage, first.seq) == (RECORDING_MISS, "talker", 1)
    assert f"the log was recorded with prompt set {talker.version}, the replay uses" in first.reason
    assert report.prompt_notes == [f"the log was recorded with prompt set {talker.version}, which this checkout does "
                                   f"not hold: its templates cannot be compared with {default_prompt_set().version}'s"]


async def test_a_recompute_branch_made_from_one_changed_template_verifies_with_its_recorded_prompt_set() -> None:
    infrastructure = InMemoryInfrastructure()
    key = StreamKey(TENANT, "rethought")
    model = ScriptedModel()
    log = await converse(infrastructure, key, model)
    changed = with_changed("controller.md", "I keep my narrative to three sentences.")
    branch = await recomputed(infrastructure, key, model, changed)
    fork = (await log.read(branch, limit=1))[0].payload
    assert isinstance(fork, Fork) and fork.prompt_set == changed.version
    assert fork.changed_templates == {"controller.md": changed.templates["controller.md"]}  # only what differs
    assert set(fork.template_digests) == set(changed.templates)

    calls = model.calls
    (report,) = await verify_conversations(log, TENANT, key.conversation, branch.branch)  # no prompts given
    assert report.ok, report.as_dict()["divergences"][:2]
    assert report.prompt_set == changed.version and report.steps > 0
    assert report.model_calls == 0 and model.calls == calls
    # Handed the built-in set instead, the same branch diverges where the controller was used, and says so.
    (wrong,) = await verify_conversations(log, TENANT, key.conversation, branch.branch, default_prompt_set())
    assert wrong.divergences and {d.stage for d in wrong.divergences} == {"controller"}
    assert wrong.prompt_notes == [f"controller.md changed compared with prompt set {changed.version}, which the log "
                                  f"was recorded with (replaying with {default_prompt_set().version})"]
