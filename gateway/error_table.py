"""The one table of what the gateway answers each error with: status, ``Retry-After``, OpenAI code, body.

Routes and the runtime raise (the layers' errors, :mod:`mirror.gateway.errors`, or an
``HTTPException`` for input a route itself refuses); the app's handlers
(:mod:`mirror.gateway.failures`) look the error up here and answer, in the native body
(``{"detail": ..., **fields}``) or, on the OpenAI-compatible routes, in OpenAI's
(``{"error": {"message", "type", "param", "code"}}``: ``type`` follows from the status, ``code``
is the row's, else also the status's: :func:`mirror.gateway.openai.errors.error_body`).

Lookup walks the error's class's MRO: the first class that has a row answers, so a subclass
takes its own row when it has one and its nearest ancestor's otherwise (``LLMTimeout`` is an
``LLMUnavailable`` is an ``LLMError``: the ``LLMError`` row), and ``Exception``'s row (a 500
naming the error) answers anything else. A row whose answer depends on the error itself (a
model's status, a refusal's wait, an ``HTTPException``'s own status) has a ``refine`` that
returns the row for that one error.

``from_actor`` rows are raised in a conversation's process and carried across Ray as the call's
``cause``: the runtime raises those as themselves (:meth:`~mirror.gateway.runtime.GatewayRuntime.ask`),
so they are answered as if the gateway had met them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException, Request

from mirror.actors.errors import HistoryMoved, IdempotencyKeyReused, SettingConflict
from mirror.cognition.errors import (
    AdmissionRefused,
    LLMError,
    LLMRateLimited,
    LLMUnavailable,
    PersonaInvalid,
    ReflectionFailed,
    ReflectionRefused,
)
from mirror.cognition.persona.choice import InvalidMindChoice
from mirror.cognition.turn import InvalidTurnRequest
from mirror.events.errors import (
    ArchiveInvalid,
    BusError,
    ConversationForgotten,
    ImportRefused,
    InvalidIdentifier,
    LogUnavailable,
)
from mirror.gateway.errors import (
    AmbiguousPersona,
    ConversationTimedOut,
    ConversationUnavailable,
    EmbedderFailed,
    EmbedderUnavailable,
    HostLost,
    LimitReached,
    QueryDoesNotFit,
    TokenBudgetSpent,
    UnknownConversation,
    UnknownPersona,
)
from mirror.replay import ReplayError

__all__ = [
    "EMBEDDER_RETRY_AFTER_S", "REFLECTION_RETRY_AFTER_S", "RETRYABLE_MODEL_STATUSES", "RETRY_AFTER_S", "TABLE", "Answer",
    "Rule", "answer", "from_actor", "model_failure_status", "rule_for",
]

RETRY_AFTER_S = 2
"""What a 503 for a dependency that is down (the broker, the log's owner, a conversation's process) tells the client to wait."""
EMBEDDER_RETRY_AFTER_S = 5
"""What a 503 for an unreachable embedder tells the client to wait, in seconds."""
REFLECTION_RETRY_AFTER_S = 30
"""What a 503 for a reflection whose model calls all failed tells the client to wait, in seconds."""
RETRYABLE_MODEL_STATUSES = frozenset({429, 502, 503, 504})
"""What a model server may answer that says "later", not "never": a turn that got one is a 503."""


@dataclass(frozen=True)
class Answer:
    """One error's answer: the status, the headers, the native body's ``detail`` and other fields, the OpenAI code and param."""

    status: int
    detail: Any
    fields: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    code: str | None = None
    param: str | None = None
    unexpected: bool = False
    openai_type: str | None = None
    """OpenAI's ``type`` when it is not the status's (``insufficient_quota`` is a 429 too)."""

    @property
    def message(self) -> str:
        return self.detail if isinstance(self.detail, str) else str(self.detail)


def _said(error: BaseException, request: Request | None) -> Any:
    return str(error)


def _no_fields(error: BaseException, request: Request | None) -> dict[str, Any]:
    return {}


def _tombstone(error: ConversationForgotten, request: Request | None) -> dict[str, Any]:
    """What is left of a forgotten conversation, where the log said (the inspector shows it)."""
    return {"tombstone": error.tombstone or {"tenant": error.tenant, "conversation": error.conversation}}


@dataclass(frozen=True)
class Rule:
    """A row: ``status``, ``retry_after_s`` (None: no ``Retry-After``), the OpenAI ``code`` (None:
    by status), how ``detail`` and the native body's other ``fields`` are built, and ``refine``
    for a row that depends on the error; ``openai_type``: OpenAI's ``type``, where the status's is not it."""

    status: int
    retry_after_s: int | None = None
    code: str | None = None
    detail: Callable[[Any, Request | None], Any] = _said
    fields: Callable[[Any, Request | None], dict[str, Any]] = _no_fields
    refine: Callable[[Any, Rule, float | None], Rule] | None = None
    headers: Mapping[str, str] | None = None
    param: str | None = None
    from_actor: bool = False
    unexpected: bool = False
    openai_type: str | None = None


def model_failure_status(exc: LLMError) -> tuple[int, int | None]:
    """The status a failed model call is answered with, and the ``Retry-After`` seconds of a 503."""
    if isinstance(exc, LLMUnavailable) and (exc.status is None or exc.status in RETRYABLE_MODEL_STATUSES):
        wait = exc.retry_after_s if isinstance(exc, LLMRateLimited) else None
        return 503, max(RETRY_AFTER_S, math.ceil(wait)) if wait else RETRY_AFTER_S
    return 502, None


def _model_refined(exc: LLMError, rule: Rule, now: float | None) -> Rule:
    status, retry_after = model_failure_status(exc)
    return replace(rule, status=status, retry_after_s=retry_after)


def _model_url(exc: LLMError, request: Request | None) -> str | None:
    """The model's URL: the error's own, else the runtime's (a request's app knows it)."""
    own: str | None = getattr(exc, "base_url", None)
    if own or request is None:
        return own
    return str(request.app.state.runtime.settings.runtime.llm.base_url)


def _model_detail(exc: LLMError, request: Request | None) -> str:
    """Names the stage whose call failed and the model's URL."""
    model_url = _model_url(exc, request)
    detail = f"the {exc.stage}'s model call failed: {exc}" if exc.stage else f"a model call failed: {exc}"
    if model_url is not None and model_url not in detail:
        detail += f" (model at {model_url})"
    return detail


def _model_fields(exc: LLMError, request: Request | None) -> dict[str, Any]:
    return {"error": type(exc).__name__, "stage": exc.stage, "model_url": _model_url(exc, request)}


def _http_refined(exc: HTTPException, rule: Rule, now: float | None) -> Rule:
    return replace(rule, status=exc.status_code, headers=exc.headers, code=getattr(exc, "code", None),
                   param=getattr(exc, "param", None))


def _http_detail(exc: HTTPException, request: Request | None) -> Any:
    return exc.detail


def _refusal_wait(refused: ReflectionRefused, now: float | None) -> int | None:
    """Seconds until the hourly cap's next slot (at least 1); None for any other refusal."""
    if refused.reason != "hourly_cap" or refused.next_slot is None:
        return None
    return max(1, math.ceil(refused.next_slot - (time.time() if now is None else now)))


def _refusal_refined(refused: ReflectionRefused, rule: Rule, now: float | None) -> Rule:
    wait = _refusal_wait(refused, now)
    if wait is None:
        return rule
    slot = refused.next_slot
    when = datetime.fromtimestamp(slot or 0, UTC).isoformat(timespec="seconds")
    return replace(rule, status=429, retry_after_s=wait,
                   detail=lambda error, request: f"{error}; try again after {when} (in {wait} s)",
                   fields=lambda error, request: {"reason": error.reason, "next_slot": slot, "next_slot_iso": when})


def _refusal_fields(refused: ReflectionRefused, request: Request | None) -> dict[str, Any]:
    return {"reason": refused.reason, **({"turns_left": refused.turns_left} if refused.reason == "cooldown" else {})}


def _limit_refined(reached: LimitReached, rule: Rule, now: float | None) -> Rule:
    """The wait the limit named, and the ``x-ratelimit-*`` headers of the tenant's limits as they stood."""
    return replace(rule, retry_after_s=reached.retry_after_s, headers=reached.headers)


def _limit_fields(reached: LimitReached, request: Request | None) -> dict[str, Any]:
    return {"limit": reached.limit, "value": reached.value, "retry_after_s": reached.retry_after_s}


def _admission_refined(refused: AdmissionRefused, rule: Rule, now: float | None) -> Rule:
    """429 when the tenant's own share is used up (others are served), 503 when the stack is; the wait either way."""
    return replace(rule, status=429 if refused.scope == "tenant" else 503, retry_after_s=max(1, refused.retry_after_s))


def _admission_fields(refused: AdmissionRefused, request: Request | None) -> dict[str, Any]:
    return {"error": type(refused).__name__, "scope": refused.scope, "tenant": refused.tenant,
            "waiting": refused.waiting, "slots": refused.slots, "stage": refused.stage}


def _unexpected_detail(exc: BaseException, request: Request | None) -> str:
    return f"internal error: {type(exc).__name__}: {exc}"


def _error_name(exc: BaseException, request: Request | None) -> dict[str, Any]:
    return {"error": type(exc).__name__}


def _candidates(ambiguous: AmbiguousPersona, request: Request | None) -> dict[str, Any]:
    return {"name": ambiguous.name, "candidates": ambiguous.candidates}


TABLE: dict[type[Exception], Rule] = {
    HTTPException: Rule(500, detail=_http_detail, refine=_http_refined),  # a route's own refusal of its input: its status and headers
    InvalidIdentifier: Rule(400),
    PersonaInvalid: Rule(400),
    InvalidMindChoice: Rule(400),
    InvalidTurnRequest: Rule(400),  # e.g. a malformed Idempotency-Key
    UnknownConversation: Rule(404),
    ConversationForgotten: Rule(410, from_actor=True, fields=_tombstone),  # erased: its tombstone is in the body (routes/forget.py)
    ArchiveInvalid: Rule(400),  # an import's archive that is not one, or does not match its manifest (routes/transfer.py)
    ImportRefused: Rule(409),  # an import onto a conversation that exists, or a tombstone without force
    UnknownPersona: Rule(404, code="persona_not_found"),
    AmbiguousPersona: Rule(409, code="persona_ambiguous", fields=_candidates),
    ReplayError: Rule(404),  # a seq beyond the end, a branch with no events, a belief never seen...
    SettingConflict: Rule(409, from_actor=True),
    IdempotencyKeyReused: Rule(422, code="idempotency_key_reused", from_actor=True),
    HistoryMoved: Rule(409, code="history_moved", from_actor=True),  # a transcript-placed turn raced another: send again
    QueryDoesNotFit: Rule(409),
    ReflectionRefused: Rule(409, fields=_refusal_fields, refine=_refusal_refined, from_actor=True),  # 429 at the cap
    LimitReached: Rule(429, code="rate_limit_exceeded", fields=_limit_fields, refine=_limit_refined),  # mirror.gateway.limits
    TokenBudgetSpent: Rule(429, code="insufficient_quota", fields=_limit_fields, refine=_limit_refined,
                           openai_type="insufficient_quota"),
    EmbedderFailed: Rule(502),
    LLMError: Rule(502, detail=_model_detail, fields=_model_fields, refine=_model_refined, from_actor=True),  # or 503
    AdmissionRefused: Rule(503, 1, code="overloaded", fields=_admission_fields, refine=_admission_refined,
                           from_actor=True),  # the fair share refused the model call at once: 429 (the tenant's share) or 503
    BusError: Rule(503, RETRY_AFTER_S, from_actor=True),
    LogUnavailable: Rule(503, RETRY_AFTER_S, from_actor=True),
    ConversationUnavailable: Rule(503, RETRY_AFTER_S),
    HostLost: Rule(503, RETRY_AFTER_S, code="host_lost", fields=_error_name),  # mirror.gateway.node_watch: its machine declared dead
    EmbedderUnavailable: Rule(503, EMBEDDER_RETRY_AFTER_S),
    ReflectionFailed: Rule(503, REFLECTION_RETRY_AFTER_S, from_actor=True),
    ConversationTimedOut: Rule(504),
    Exception: Rule(500, detail=_unexpected_detail, fields=_error_name, unexpected=True),
}
"""Error class → its row, by status. Look a row up with :func:`rule_for` (the MRO walk), never with ``TABLE[...]``."""


def rule_for(error: BaseException) -> Rule:
    """The row of ``error``'s most specific class that has one (see the module docstring)."""
    for cls in type(error).__mro__:
        rule = TABLE.get(cls)
        if rule is not None:
            return rule
    return TABLE[Exception]  # a BaseException that is no Exception never reaches a handler: answered as one anyway


def from_actor(error: BaseException) -> bool:
    """Whether ``error``, raised in a conversation's process, is raised again as itself by the gateway."""
    return rule_for(error).from_actor


def answer(error: BaseException, request: Request | None = None, *, now: float | None = None) -> Answer:
    """What ``error`` is answered with; ``request`` names the runtime's model for a model error
    that does not name its own; ``now`` (default: the clock) counts a refusal's wait."""
    rule = rule_for(error)
    if rule.refine is not None:
        rule = rule.refine(error, rule, now)
    headers = dict(rule.headers or {})
    if rule.retry_after_s is not None:
        headers["Retry-After"] = str(rule.retry_after_s)
    return Answer(rule.status, rule.detail(error, request), rule.fields(error, request), headers,
                  rule.code, rule.param, rule.unexpected, rule.openai_type)
