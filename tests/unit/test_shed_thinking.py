"""A thinking step the fair share shed (its backlog full) is recorded, skipped and explained.

The writer's think loop runs with the model behind a :class:`~mirror.cognition.fair_share.FairShare`
whose one slot is held and whose thinking queue is full: the step is a ``thinker_failed``
(``ThinkingShed``, "shed: backlog"), written once (not retried ``attempts`` times), the
narrative stays the one before, the next turn thinks again, and ``replay verify`` passes on the
log that holds the skipped step, with no model call.
"""

from __future__ import annotations

import asyncio

from mirror.cognition.fair_share import TALKER, THINKER, AdmittedLLM, FairShare, FairShareSettings
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Narrative, ThinkerFailed
from mirror.projections.state import initial_state
from mirror.replay import verify_conversations

from .test_verify_log import ScriptedModel

KEY = StreamKey("acme", "busy")


async def test_a_shed_thinking_step_is_one_failure_event_and_replay_verify_explains_it() -> None:
    infrastructure = InMemoryInfrastructure()
    connections = await infrastructure.connect(name="test")
    model = ScriptedModel()
    share = FairShare(1, FairShareSettings(thinker_queue=1))
    talker, thinker = AdmittedLLM(model, share, KEY.tenant, TALKER), AdmittedLLM(model, share, KEY.tenant, THINKER)
    writer = ConversationWriter(connections.bus, KEY, initial_state(KEY), Head(0, 0))
    prompts, config = default_prompt_set(), MirrorConfig(model="scripted", memory=False, reflection=False)

    await writer.take_turn("I keep bees.", llm=talker, prompts=prompts, config=config, recaller=no_recall)
    await writer.think_until_current(thinker, prompts, config, attempts=3)
    thought = writer.state.narrative
    assert thought

    await writer.take_turn("They sting sometimes.", llm=talker, prompts=prompts, config=config, recaller=no_recall)
    # Now another tenant holds the one slot and this tenant's thinking queue is full: the step is shed.
    release = asyncio.Event()
    holding = asyncio.Event()

    async def hold(tenant: str, priority: str) -> None:
        async with share.slot(tenant, priority):  # type: ignore[arg-type]  # TALKER / THINKER
            holding.set()
            await release.wait()

    holder = asyncio.create_task(hold("other", TALKER))
    await holding.wait()
    queued = asyncio.create_task(hold(KEY.tenant, THINKER))
    while share.figures()["tenants"]["acme"]["waiting_thinker"] != 1:  # type: ignore[index]  # figures' nested dicts
        await asyncio.sleep(0)
    calls_before = model.calls
    await writer.think_until_current(thinker, prompts, config, attempts=3)
    assert model.calls == calls_before  # shed at once: no model call
    assert writer.state.narrative == thought  # the good state before stays in force
    release.set()
    await asyncio.gather(holder, queued)

    await writer.take_turn("Honey is my reward.", llm=talker, prompts=prompts, config=config, recaller=no_recall)
    await writer.think_until_current(thinker, prompts, config, attempts=3)
    assert writer.state.narrative != thought and writer.state.thought_turn == 2  # the next turn thought again

    log = connections.log(KEY.tenant)
    events = await log.read(KEY)
    shed = [event for event in events if isinstance(event.payload, ThinkerFailed)]
    assert len(shed) == 1, [event.payload for event in shed]  # skipped once, not retried into the full backlog
    failure = shed[0].payload
    assert isinstance(failure, ThinkerFailed)
    assert (failure.stage, failure.error_type, failure.for_turn) == ("monologue", "ThinkingShed", 1)
    assert failure.message.startswith("shed: backlog")
    assert sum(isinstance(event.payload, Narrative) for event in events) == 2

    (report,) = await verify_conversations(log, KEY.tenant, KEY.conversation)
    assert report.ok, report.divergences
    assert report.steps >= 3 and report.model_calls == 0
