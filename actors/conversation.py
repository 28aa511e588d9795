"""One live conversation: answer at once, think in the background, append every fact fenced.

:class:`Conversation` is plain asyncio, so it runs inside a Ray actor (``ConversationActor``
in :mod:`mirror.actors.conversation_actor`) or directly in a test. On start it rebuilds its state
(:mod:`mirror.actors.rebuild`: the log's snapshot + tail, then what only the bus holds), so a
restarted or re-activated conversation continues exactly where the last one stopped.

A turn (one :class:`~mirror.cognition.turn.TurnRequest`) is the writer's turn code, the code
recompute and ``replay verify`` run too: with memory on and beliefs to recall, the message is
embedded and recalled first (through :attr:`Conversation.memory`, the index kept between turns);
the Talker replies from the newest narrative and that recall's block; the ``recall`` and
``turn`` events are appended together and acknowledged *before* the reply is returned; then the
Thinker runs in the background (:data:`~mirror.cognition.stages.STAGES`), one
thinking step after another, emitting monologue / narrative / thinker_failed events. A new turn
never waits for it unless asked (``sync=True``, the papers' benchmark setting). Appends and the
think loop are the :class:`~mirror.cognition.writer.ConversationWriter`'s (serial appends), the
same writer recompute uses.

Single writer: every append is fenced. A conversation that loses the fence (another writer
appended, or the stream went backwards under it) stops for good — :class:`Fenced` — and must
be replaced by one that reloads; it never forks the sequence. The reload trusts the log over
the stream: a stream that ends behind the log (a broker's store came back older) is re-fenced
on what it holds now, and appending goes on after the log's last seq, without a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from mirror import metrics, tracing
from mirror.cognition.embeddings import Embedder
from mirror.cognition.errors import LLMError, ReflectionRefused
from mirror.cognition.llm import TokenSink
from mirror.cognition.memory.turn import TurnMemory, TurnRecall, recall_for_turn
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.stages import StageContext, stages_behind
from mirror.cognition.turn import TurnRequest
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import EventBus, Head
from mirror.events.envelope import Event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey
from mirror.events.log import LogAccess, Snapshot
from mirror.events.payloads import PersonaChosen, Reflection, Turn
from mirror.projections.persona import PersonaState
from mirror.projections.snapshot import PROJECTION_VERSION, snapshot_bytes
from mirror.projections.state import ConversationState, initial_state

from .branching import BranchTranscript, place
from .clients import ConversationClients
from .errors import Fenced, IdempotencyKeyReused, Passivated, SettingConflict
from .persona_mind import persona_events, persona_to_record
from .rebuild import RebuildReport, rebuild
from .results import ConversationSummary, ReflectionResult, TurnResult
from .settings import RuntimeSettings, settings_prompts

log = logging.getLogger(__name__)

REPLY_HEAD_START_S = 0.005
"""How long the thinker waits before its first step. A turn's reply goes back through Ray's own
threads, which need the GIL to serialize and send it; started at once, the thinker's prompt
building and model call held the GIL first and added ~4 ms to every turn (measured with
``mirror bench turns``). Thinking takes hundreds of milliseconds: 5 ms later costs it nothing."""


class Conversation:
    """The state and the writer of one (tenant, conversation, branch)."""

    def __init__(self, key: StreamKey, settings: RuntimeSettings, *, prompts: PromptSet | None = None) -> None:
        self.key = key
        self.settings = settings
        self.writer: ConversationWriter | None = None
        """Made by the rebuild, from the rebuilt state and the bus head."""
        self.passivating = False
        self._fence_reported = False
        self._thinker: asyncio.Task[None] | None = None
        self._snapshotter: asyncio.Task[None] | None = None
        self.rebuilt: RebuildReport | None = None
        self._snapshot_seq: int | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._replied = time.perf_counter()
        self._caused_by = tracing.cause()  # the turn the Thinker's run links to (set by each reply)
        self.config = MirrorConfig(
            model=settings.llm.model, mode=settings.mode,  # type: ignore[arg-type]  # a str setting; MirrorConfig refuses one outside MODES
            talker_max_tokens=settings.talker_max_tokens, thinker_max_tokens=settings.thinker_max_tokens,
            memory=settings.memory, reflection=settings.reflection,
        )
        self.policy = settings.reflection_policy
        """When this conversation reflects (:class:`~mirror.cognition.reflection.policy.ReflectionPolicy`)."""
        self._reflecting: asyncio.Task[ReflectionResult] | None = None
        self.embedder: Embedder | None = None
        self.memory = TurnMemory()
        """The recall index kept between turns: a cache of the state's beliefs and edges."""
        self.prompts: PromptSet = prompts or settings_prompts(settings)
        """The settings' prompt set; a host reads it once for all its conversations."""
        self.persona_prompts: PromptSet = default_persona_prompts()
        """The persona mind's prompt set (:mod:`mirror.cognition.persona.prompting`)."""
        self._keyed: dict[str, asyncio.Future[TurnResult]] = {}
        """Turns running for an idempotency key: a retry that arrives meanwhile waits for its turn."""

    @property
    def state(self) -> ConversationState:
        return initial_state(self.key) if self.writer is None else self.writer.state

    @property
    def thinking(self) -> bool:
        """Is the Thinker running (or about to)?"""
        return not self._idle.is_set()

    @property
    def head(self) -> Head:
        return Head(0, 0) if self.writer is None else self.writer.head

    @property
    def fenced(self) -> AppendConflict | None:
        """The conflict that stopped this conversation for good, if one did."""
        return None if self.writer is None else self.writer.failure

    # ------------------------------------------------------------------------ lifecycle

    async def start(self, clients: ConversationClients | None = None) -> Conversation:
        """Rebuild from the log and the stream; ``clients``: shared connections (a host's), else its own."""
        if clients is None:
            clients = await ConversationClients.open(self.settings, name=f"mirror-conversation-{self.key.conversation}")
        self.clients = clients
        self.bus: EventBus = clients.connections.bus
        self.log: LogAccess = clients.connections.log(self.key.tenant)
        self._transcript = BranchTranscript(self.key, self.log)  # its turns' digest, for quickly placed turns
        # The model through the process's fair share: the Talker's calls first, the Thinker's behind (and shed).
        self.llm, self.thinker_llm = clients.talker(self.key.tenant), clients.thinker(self.key.tenant)
        self.embedder = clients.embedder
        try:
            writer = await self._rebuild()
        except BaseException:
            if clients.owned:
                await clients.close()
            raise
        self.config = self._recorded_config(writer.state)
        if self._unfinished(writer.state):
            self._start_thinking()  # a step left unthought by the previous incarnation
        return self

    def _recorded_config(self, state: ConversationState) -> MirrorConfig:
        """How the turns of ``state`` fixed it to think, whatever the stack's default is now (the
        config as it is, before a first turn)."""
        if not state.turn_count:
            return self.config
        recorded, reflects = state.memory, state.reflection
        return replace(self.config, mode=state.mode,  # type: ignore[arg-type]  # a recorded Mode
                       memory=self.config.memory if recorded is None else recorded,
                       reflection=self.config.reflection if reflects is None else reflects)

    def _adopted_config(self, state: ConversationState, request: TurnRequest) -> MirrorConfig:
        """The settings a client's adopted exchanges are recorded with on ``state``'s branch: its
        turns', or before any, the ones ``request`` asks for (its turn must not conflict with them)."""
        if state.persona is not None:
            return replace(self.config, mode="baseline", memory=False, reflection=False)  # the persona cycle alone
        config = self._recorded_config(state)
        if state.turn_count:
            return config
        asked = {name: getattr(request, name) for name in ("mode", "memory", "reflection")
                 if getattr(request, name) is not None}
        return replace(config, **asked)

    def _unfinished(self, state: ConversationState) -> bool:
        """Is a thinking stage left to do for the newest turn (:data:`~mirror.cognition.stages.STAGES`)?"""
        return bool(stages_behind(state, self._stage_context()))

    def _stage_context(self) -> StageContext:
        """What this conversation's stages run with (the same the think loop is given)."""
        return StageContext(self.thinker_llm, self.prompts, self.config, self.embedder, self.policy, self.persona_prompts)

    def _choose(self, state: ConversationState, *, mode: str | None, memory: bool | None,
                reflection: bool | None = None) -> None:
        """A first turn's mode, memory and reflection become the conversation's; a later turn's
        must match them.

        Memory can be turned off for a conversation, but not on where the stack runs without it
        (``--no-memory``: no embedder was made). Reflection can be turned on or off by a first
        turn whatever the stack's default.
        """
        if memory and not self.settings.memory:
            raise SettingConflict(self.key, "memory", memory, False,
                                  why="the stack runs without memory (--no-memory), so no conversation can turn it on")
        if mode is not None and mode != self.config.mode:
            if state.turn_count:
                raise SettingConflict(self.key, "mode", mode, self.config.mode)
            self.config = replace(self.config, mode=mode)  # type: ignore[arg-type]  # MirrorConfig refuses one outside MODES
        if memory is not None and memory != self.config.memory:
            if state.turn_count:
                raise SettingConflict(self.key, "memory", memory, self.config.memory)
            self.config = replace(self.config, memory=memory)
        if reflection is not None and reflection != self.config.reflection:
            if state.turn_count:
                raise SettingConflict(self.key, "reflection", reflection, self.config.reflection)
            self.config = replace(self.config, reflection=reflection)

    async def passivate(self) -> None:
        """Finish the thinking in progress, write a snapshot, stop (the next message re-activates).

        The snapshot is taken at the last seq once the log has committed it, so the next
        incarnation starts from it with an empty tail: re-activation costs the same for a
        conversation of ten events as for one of ten thousand.
        """
        self.passivating = True
        await self._idle.wait()
        if self._reflecting is not None:
            await asyncio.gather(self._reflecting, return_exceptions=True)
        if self.writer is not None:
            async with self.writer.lock:
                if self.state.last_seq and self.state.last_seq != self._snapshot_seq:
                    await self._save_snapshot(self.state, self.head.fence)
        await self.stop()

    async def stop(self) -> None:
        for task in (self._thinker, self._snapshotter):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.clients.owned:
            await self.clients.close()

    async def _rebuild(self) -> ConversationWriter:
        """The state rebuilt (:func:`~mirror.actors.rebuild.rebuild`), and the writer that continues it."""
        rebuilt = await rebuild(self.key, self.log, self.bus, snapshot_every=self.settings.snapshot_every)
        self.writer = ConversationWriter(self.bus, self.key, rebuilt.state, rebuilt.head, on_appended=self._appended)
        self._snapshot_seq = rebuilt.report.snapshot_seq
        self.rebuilt = rebuilt.report
        return self.writer

    # ------------------------------------------------------------------------ turns

    async def turn(self, request: TurnRequest, on_token: TokenSink | None = None) -> TurnResult:
        """Reply to ``request.message``; the ``turn`` event is acknowledged before this returns.

        A request with an idempotency key that a turn of this conversation already answered (within
        ``idempotency_window_s``) gets that turn's answer again (:attr:`TurnResult.replayed`),
        appending nothing; one whose first attempt is still running waits for it, so a turn never
        runs twice; a key reused for another request is :class:`IdempotencyKeyReused`. The key is
        recorded in the ``turn`` event, so this holds across gateways, re-activations and restarts.

        ``on_token``: the reply's pieces as the model writes them (joined, exactly the reply); the
        steps before the reply (recall, a persona's think, plan and appraisal) are not streamed.

        The request's ``mode``, ``memory`` and ``reflection``: how this conversation thinks. The
        first turn fixes them (the stack's defaults when not given; the ``turn`` event records
        them); asking a later turn for other ones is :class:`SettingConflict`, and changes nothing.
        The turn itself is the writer's (:meth:`~mirror.cognition.writer.ConversationWriter.take_turn`),
        the code recompute and ``replay verify`` run too.
        """
        key = request.idempotency_key
        if key is None:
            return await self._observed_turn(request, on_token)
        running = self._keyed.get(key)
        if running is not None:  # the same key still running: wait for it, never run twice
            await asyncio.gather(asyncio.shield(running), return_exceptions=True)
        answered = await self._answered(request)
        if answered is not None:
            if on_token is not None:
                on_token(answered.reply)
            return answered
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        self._keyed[key] = future
        try:
            result = await self._observed_turn(request, on_token)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a waiting retry looks at the state, not at this
            raise
        finally:
            self._keyed.pop(key, None)
        future.set_result(result)
        return result

    async def _observed_turn(self, request: TurnRequest, on_token: TokenSink | None) -> TurnResult:
        """:meth:`_turn`, counted (:mod:`mirror.metrics`): its time and the model's, its first token, its failure."""
        tenant = self.key.tenant
        try:
            # Busy until it returns (its model calls excepted): the host's thinking steps wait (TalkerFirst).
            with tracing.turn(self.key, request), self.clients.talker_first.turn():
                result = await self._turn(request, metrics.first_token_sink(on_token, tenant))
        except Exception as exc:
            metrics.turn_failed(tenant, exc)
            raise
        metrics.turn_done(tenant, "mirror" if self.state.persona is None else "persona", result.turn_ms, result.llm_ms)
        return result

    async def _answered(self, request: TurnRequest) -> TurnResult | None:
        """The earlier turn the request's idempotency key names, as its answer (``None``: no turn
        of this conversation used the key within the window)."""
        assert request.idempotency_key is not None  # the caller checked
        state = self.state
        keyed = state.keyed_turn(request.idempotency_key)
        if keyed is None or keyed.timestamp < time.time() - self.settings.idempotency_window_s:
            return None
        record = next((turn for turn in state.recent_turns if turn.seq == keyed.seq), None)
        if record is not None:
            message, reply, narrative_seq = record.user_message, record.reply, record.narrative_seq
        else:  # older than the recent turns kept in the state: the log has it
            (event,) = await self.log.read(self.key, after_seq=keyed.seq - 1, until_seq=keyed.seq)
            payload = event.payload
            assert isinstance(payload, Turn)  # the projection keeps keys of turn events alone
            message, reply, narrative_seq = payload.user_message, payload.reply, payload.narrative_seq
        why = _another_request(request, message, self.config, state.persona)
        if why is not None:
            raise IdempotencyKeyReused(self.key, request.idempotency_key, keyed.seq, why)
        return TurnResult(reply=reply, turn=keyed.turn, seq=keyed.seq, narrative_seq=narrative_seq, llm_ms=0.0,
                          talk_ms=0.0, append_ms=0.0, turn_ms=0.0, replayed=True)

    async def _turn(self, request: TurnRequest, on_token: TokenSink | None) -> TurnResult:
        self._check_not_fenced()
        if self.passivating:
            raise Passivated(self.key)
        if request.sync:
            with self.clients.talker_first.waiting():  # the thinking it waits for waits for busy turns
                await self._idle.wait()
        self.llm.check()  # the fair share's refusal (429/503) before any work, not after the recall
        writer = self._writer()
        self.bus.prepare_append(self.key, writer.head)  # a new conversation's data key made while the Talker answers
        if request.continuation is not None:  # placed by the client's transcript (issue 35)
            placed = request.continuation
            if request.mind is not None and request.mind.mind == "persona" and writer.state.persona is None:
                placed = replace(placed, adopted=())  # a character starts from its card: no exchanges before it
            try:
                await place(writer, placed, self.log, prompts=self.prompts,
                            persona_prompts=self.persona_prompts,
                            config=lambda state: self._adopted_config(state, request), transcript=self._transcript)
            except AppendConflict as conflict:
                raise self._fenced_off(conflict) from conflict
            self.config = self._recorded_config(writer.state)
        chosen = await persona_to_record(self.key, writer.state, request.mind, self.embedder)
        if chosen is not None or writer.state.persona is not None:
            for setting in ("mode", "memory", "reflection"):
                asked = getattr(request, setting)
                if asked not in (None, False, "baseline"):
                    raise SettingConflict(self.key, setting, asked, "persona", why="a persona conversation runs its own "
                                          "cycle: the MIRROR mind's mode, memory and reflection do not apply to it")
            return await self._persona_turn(writer, request, chosen, on_token)
        self._choose(writer.state, mode=request.mode, memory=request.memory, reflection=request.reflection)
        started = time.perf_counter()
        try:
            composed, event = await writer.take_turn(request.message, llm=self.llm, prompts=self.prompts,
                                                     config=self.config, recaller=self._recall, on_token=on_token,
                                                     idempotency_key=request.idempotency_key,
                                                     instructions=request.instructions)
        except LLMError as failure:  # nothing was appended; the gateway answers it as a 502 or 503
            failure.during("talker")
            metrics.model_failed("talker", failure)
            raise
        except AppendConflict as conflict:
            raise self._fenced_off(conflict) from conflict
        appended = time.perf_counter()
        self._start_thinking()
        # Where the turn's time went, in this process: recall (the message's embedding within
        # it), the Talker (its LLM call within it) and the fenced append until JetStream
        # acknowledged it. The gateway sends these on as a Server-Timing header.
        recalled, provenance = composed.recall, composed.provenance
        turn_ms = (appended - started) * 1000
        return TurnResult(
            reply=composed.turn.reply, turn=event.turn, seq=event.seq, narrative_seq=composed.turn.narrative_seq,
            llm_ms=round(0.0 if provenance is None else provenance.latency_ms, 3), talk_ms=round(composed.talk_ms, 3),
            append_ms=round(turn_ms - composed.recall_ms - composed.talk_ms, 3), turn_ms=round(turn_ms, 3),
            recall_ms=round(composed.recall_ms, 3),
            embed_ms=0.0 if recalled is None else round(recalled.embed_ms, 3),
            recall_seq=None if recalled is None else event.seq - 1,
            prompt_tokens=0 if provenance is None else provenance.prompt_tokens,
            completion_tokens=0 if provenance is None else provenance.completion_tokens,
            finish_reason=composed.finish_reason,
        )

    async def _recall(self, state: ConversationState, message: str, now: float) -> TurnRecall | None:
        """The live turn's recall: the message embedded, recalled through the index kept between turns."""
        return await recall_for_turn(state, message, self.embedder, now, memory=self.memory)

    async def _persona_turn(self, writer: ConversationWriter, request: TurnRequest, chosen: PersonaChosen | None,
                            on_token: TokenSink | None) -> TurnResult:
        """A turn of the persona mind: the MIRROR stages are off."""
        self.config = replace(self.config, mode="baseline", memory=False, reflection=False)
        started = time.perf_counter()
        try:
            composed, turn = await writer.take_persona_turn(
                request.message, llm=self.llm, embedder=self.embedder, prompts=self.persona_prompts,
                config=self.config, chosen=chosen, on_token=on_token, idempotency_key=request.idempotency_key,
                instructions=request.instructions)
        except LLMError as failure:  # nothing was appended; the gateway answers it as a 502 or 503
            failure.during("talker")
            metrics.model_failed("talker", failure)
            raise
        except AppendConflict as conflict:
            raise self._fenced_off(conflict) from conflict
        appended = time.perf_counter()
        self._start_thinking()
        said = composed.said
        talk_ms = sum(said.step_ms.values())
        formulation = said.thoughts[-1].provenance
        return TurnResult(
            reply=said.reply, turn=turn.turn, seq=turn.seq, narrative_seq=None, llm_ms=said.llm_ms,
            talk_ms=round(talk_ms, 3), append_ms=round((appended - started) * 1000 - talk_ms, 3),
            turn_ms=round((appended - started) * 1000, 3), recall_ms=round(said.step_ms.get("retrieval", 0.0), 3),
            steps_ms=dict(said.step_ms),
            prompt_tokens=0 if formulation is None else formulation.prompt_tokens,
            completion_tokens=0 if formulation is None else formulation.completion_tokens,
            finish_reason=said.finish_reason,
        )

    async def choose(self, mind: MindChoice) -> ConversationSummary:
        """Fix the mind before the first turn: a ``persona`` event for a character (nothing for
        ``mirror``, which a first turn fixes); the same choice again changes nothing, another one is
        :class:`SettingConflict`."""
        self._check_not_fenced()
        if self.passivating:
            raise Passivated(self.key)
        writer = self._writer()
        chosen = await persona_to_record(self.key, writer.state, mind, self.embedder)
        if chosen is not None:
            now = time.time()
            try:
                await writer.append(lambda state: persona_events(self.key, state, chosen, now))
            except AppendConflict as conflict:
                raise self._fenced_off(conflict) from conflict
        return self.summary()

    def _writer(self) -> ConversationWriter:
        if self.writer is None:
            raise RuntimeError(f"{self.key} is not started: call start() first")
        return self.writer

    def _fenced_off(self, conflict: AppendConflict) -> Fenced:
        """Losing the fence stops this conversation for good (the writer refuses every later append)."""
        if not self._fence_reported:
            self._fence_reported = True
            metrics.fenced(self.key.tenant)
            log.warning("%s was fenced off: %s", self.key, conflict)
        return Fenced(self.key, str(conflict))

    def _appended(self, events: Sequence[Event]) -> None:
        """After each acknowledged append (under the writer's lock): counted, and a snapshot at every boundary."""
        metrics.appended(self.key.tenant, events)
        every = self.settings.snapshot_every
        if events and events[-1].seq // every > (events[0].seq - 1) // every:
            self._snapshot_in_background()
    def _snapshot_in_background(self) -> None:
        """Snapshot the current state once the log has it, without holding up the turn."""
        if self._snapshotter is not None and not self._snapshotter.done():
            return  # one at a time; the next boundary takes a newer one
        self._snapshotter = asyncio.create_task(
            self._save_snapshot(self.state, self.head.fence), name=f"snapshot-{self.key}"
        )

    async def _save_snapshot(self, state: ConversationState, stream_seq: int) -> None:
        """Save ``state`` (whose last event is at ``stream_seq``) after the log has committed it.

        The log refuses a snapshot ahead of what it has committed, so waiting comes first. A
        snapshot is a cache: failing to write one costs only a longer rebuild, never state.
        """
        try:
            if not await self.log.wait_committed(stream_seq, self.settings.snapshot_commit_timeout_s):
                log.warning("%s: no snapshot at seq %d, the log did not commit stream seq %d in %ss",
                            self.key, state.last_seq, stream_seq, self.settings.snapshot_commit_timeout_s)
                metrics.snapshot("skipped")
                return
            await self.log.save_snapshot(Snapshot(self.key, state.last_seq, PROJECTION_VERSION, snapshot_bytes(state)))
            self._snapshot_seq = state.last_seq
            metrics.snapshot("written")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.snapshot("failed")
            log.warning("%s: snapshot at seq %d failed: %r", self.key, state.last_seq, exc)

    def _check_not_fenced(self) -> None:
        if self.fenced is not None:
            raise self._fenced_off(self.fenced)

    # ------------------------------------------------------------------------ thinking

    def _start_thinking(self) -> None:
        self._replied = time.perf_counter()  # the newest reply: the thinking ends its lag (mirror_thought_lag_seconds)
        self._caused_by = tracing.cause()
        nothing_to_do = (self.config.mode == "baseline" and not self.config.memory and not self.config.reflection
                         and self.state.persona is None)
        if nothing_to_do or (self._thinker is not None and not self._thinker.done()):
            return
        self._idle.clear()
        self._thinker = asyncio.create_task(self._think_in_background(), name=f"thinker-{self.key}")

    async def _think_in_background(self) -> None:
        """The writer's think loop, after the reply's head start; what stops it is logged, not raised."""
        await asyncio.sleep(REPLY_HEAD_START_S)
        try:
            with tracing.thinking(self.key, self._caused_by):  # a trace of its own, linked to the turn
                await self._writer().think_until_current(
                    self.thinker_llm, self.prompts, self.config, attempts=self.settings.thinking_attempts,
                    embedder=self.embedder, policy=self.policy, persona_prompts=self.persona_prompts,
                    yield_to=self.clients.talker_first.quiet,
                )
        except AppendConflict as conflict:
            self._fenced_off(conflict)
        except Exception:
            log.exception("%s thinker crashed", self.key)
        finally:
            self._idle.set()
            metrics.thought_through(time.perf_counter() - self._replied)

    async def reflect(self) -> ReflectionResult:
        """Force a reflection now, once the thinker is current; its ``reflection`` event's seq and what it did.

        Raises :class:`~mirror.cognition.errors.ReflectionRefused` (nothing written) within the
        cooldown (``turns_left``), at the hourly cap (``next_slot``), with reflection off or
        before the first turn; :class:`~mirror.cognition.errors.ReflectionFailed` when its model
        calls failed every attempt (each failure recorded, the portrait unchanged). It never
        races the think loop (:meth:`~mirror.cognition.writer.ConversationWriter.reflect_now`)
        and a passivation waits for it.
        """
        self._check_not_fenced()
        if self.passivating:
            raise Passivated(self.key)
        writer = self._writer()
        if not self.config.reflection:
            raise ReflectionRefused(str(self.key), "off", "reflection is off for this conversation "
                                    "(its first turn, or the stack's --no-reflection, turned it off)")
        task = asyncio.create_task(self._reflect(writer), name=f"reflect-{self.key}")
        self._reflecting = task
        try:
            return await asyncio.shield(task)
        except AppendConflict as conflict:
            raise self._fenced_off(conflict) from conflict
        finally:
            if self._reflecting is task and task.done():
                self._reflecting = None

    async def _reflect(self, writer: ConversationWriter) -> ReflectionResult:
        event = await writer.reflect_now(self.thinker_llm, self.prompts, self.config, attempts=self.settings.thinking_attempts,
                                         embedder=self.embedder, policy=self.policy, yield_to=self.clients.talker_first.quiet)
        payload = event.payload
        assert isinstance(payload, Reflection)  # reflect_now returns the reflection event
        provenance = event.provenance
        tokens = payload.decay_tokens + (0 if provenance is None else provenance.prompt_tokens + provenance.completion_tokens)
        return ReflectionResult(
            seq=event.seq, for_turn=payload.for_turn, accepted=payload.accepted, reason=payload.reason,
            triggers=payload.triggers, portrait=writer.state.portrait, warning=payload.warning,
            decayed=sum(1 for decision in payload.decisions if decision[2] == "decay"),
            forgotten=sum(1 for decision in payload.decisions if decision[2] == "forget"),
            overruled=sum(1 for decision in payload.decisions if decision[3]),
            tokens=tokens, ms=round(payload.decay_ms + (0.0 if provenance is None else provenance.latency_ms), 3),
        )

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no thinking is running (tests, sync mode, passivation)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def summary(self) -> ConversationSummary:
        state = self.state
        return ConversationSummary(
            tenant=self.key.tenant, conversation=self.key.conversation, branch=self.key.branch,
            turns=state.turn_count, last_seq=state.last_seq, narrative=state.narrative,
            narrative_seq=state.narrative_seq, thought_turn=state.thought_turn,
            thinking=not self._idle.is_set(), mode=self.config.mode,
            mind="mirror" if state.persona is None else "persona", greeting=state.greeting,
            last_failure=None if state.last_failure is None else state.last_failure.message,
            updated_at=state.last_timestamp or time.time(),
        )


def _another_request(request: TurnRequest, message: str, config: MirrorConfig, persona: PersonaState | None) -> str | None:
    """Why ``request`` is not the one its idempotency key first came with (``None``: it is): another
    message, or a setting other than the conversation's (which that request fixed or matched)."""
    if request.message != message:
        return "another message"
    for setting in ("mode", "memory", "reflection"):
        asked = getattr(request, setting)
        if asked is not None and asked != getattr(config, setting):
            return f"{setting} {asked!r}, not {getattr(config, setting)!r}"
    mind = request.mind
    if mind is not None:
        running = "mirror" if persona is None else "persona"
        if mind.mind != running or (mind.persona is not None and persona is not None
                                    and mind.persona.version != persona.version):
            return f"another mind ({mind.mind})"
    return None


__all__ = ["Conversation", "REPLY_HEAD_START_S", "RebuildReport"]
