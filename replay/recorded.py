"""``RecordedLLM``: the LLM port answered from the log, by request fingerprint.

Every LLM-produced event carries its provenance: the fingerprint of the exact request and the
model's answer (or, for a call that got no answer, the fingerprint and the failure the
``thinker_failed`` event recorded). Where the provenance points at the payload
(``response_in_payload``: one copy of each model output), the answer is rebuilt from the
payload (:func:`mirror.cognition.responses.response_from_payload`), which the pipeline parses
to the same payload, so old-form and new-form logs replay alike. A call an event keeps on its
payload besides (a reflection's decay call: :func:`~mirror.cognition.responses.side_answers`)
is answered the same way. Replaying the same pipeline over the same states asks the
same requests, so each is answered from the recording — zero model calls, identical events.

A request whose fingerprint was never recorded is a :class:`RecordingMiss` (an ``LLMError``, so
the pipeline records it like any failed call), or goes to ``live`` when one is given: that is
how a recompute reuses every answer a prompt change did not touch and asks the model the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import LLM, ChatRequest, ChatResponse
from mirror.cognition.responses import PayloadDoesNotMatch, recorded_response, side_answers
from mirror.events.envelope import Event
from mirror.events.payloads import Provenance, ThinkerFailed

from .errors import RecordingMiss


class ReplayedFailure(LLMError):
    """A call that failed when recorded fails the same way on replay (same kind, same message)."""

    def __init__(self, kind: str, message: str) -> None:
        self._kind = kind
        super().__init__(message)

    @property
    def kind(self) -> str:
        return self._kind


@dataclass(frozen=True, slots=True)
class _Recorded:
    provenance: Provenance
    failure: ThinkerFailed | None
    response: str | None
    mismatch: str | None = None


class RecordedLLM:
    """Answers from recorded provenance; ``live`` (optional) answers what was never recorded.

    Several recordings of one fingerprint are served in the order they were recorded, the last
    one again once they run out. ``replay_failures=False`` sends recorded non-answers to
    ``live`` instead of failing again (a recompute wants answers, a verify wants the past).
    """

    def __init__(self, events: Iterable[Event], *, live: LLM | None = None, replay_failures: bool = True) -> None:
        self.live = live
        self.replay_failures = replay_failures
        self._answers: dict[str, deque[_Recorded]] = {}
        self.recorded_calls = 0
        self.live_calls = 0
        self.misses = 0
        self.add(events)

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            for side in side_answers(event):  # e.g. a reflection's decay call, kept on its payload
                self._answers.setdefault(side.provenance.request_fingerprint, deque()).append(
                    _Recorded(side.provenance, None, side.response))
            provenance = event.provenance
            if provenance is None:
                continue
            failure = event.payload if isinstance(event.payload, ThinkerFailed) else None
            try:
                recorded = _Recorded(provenance, failure, recorded_response(event))
            except PayloadDoesNotMatch as exc:  # an edited event answers with its edit refused
                recorded = _Recorded(provenance, failure, None, str(exc))
            if recorded.response is None and failure is None and recorded.mismatch is None:
                continue  # nothing to answer with
            self._answers.setdefault(provenance.request_fingerprint, deque()).append(recorded)

    def __len__(self) -> int:
        return sum(len(answers) for answers in self._answers.values())

    async def chat(self, request: ChatRequest) -> ChatResponse:
        fingerprint = request.fingerprint()
        answers = self._answers.get(fingerprint)
        if answers:
            recorded = answers.popleft() if len(answers) > 1 else answers[0]
            if recorded.mismatch is not None:
                self.recorded_calls += 1
                raise ReplayedFailure("recording_mismatch", recorded.mismatch)
            if recorded.response is not None:
                self.recorded_calls += 1
                return ChatResponse(recorded.response, recorded.provenance)
            if self.replay_failures or self.live is None:
                self.recorded_calls += 1
                failure = recorded.failure
                assert failure is not None  # add() keeps no-answer recordings only with their failure
                raise ReplayedFailure(failure.error_type, failure.message)
        if self.live is None:
            self.misses += 1
            raise RecordingMiss(fingerprint, request.prompt_set)
        self.live_calls += 1
        return await self.live.chat(request)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.live is None:
            raise RecordingMiss("embeddings", "-")
        return await self.live.embed(texts)


__all__ = ["RecordedLLM", "ReplayedFailure"]
