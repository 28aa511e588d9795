"""Errors the gateway itself raises: what failed between a request and the conversation or the embedder.

    MirrorError                        (mirror.events.errors)
    └── GatewayError
        ├── UnknownConversation        a conversation with no events (in the log or the stream)
        ├── ConversationUnavailable    no live process answered; asking again can help
        │   ├── ConversationRefencing  still fenced after every attempt: its next incarnation re-fences
        │   ├── ConversationNotLive    still passivating, or its process unavailable, after every attempt
        │   └── HostLost               the machine running it was declared dead while (or before) it was asked
        ├── ConversationTimedOut       no answer within the gateway's ``actor_timeout_s``
        ├── EmbedderError              the memory API's embedder failed on a query
        │   ├── EmbedderUnavailable    it could not be reached in time (asking again can help)
        │   ├── EmbedderFailed         it answered, but not with vectors
        │   └── QueryDoesNotFit        its vector has another size than the conversation's beliefs'
        ├── TenantError                the tenants file refused a change
        │   ├── UnknownTenant          a limit for a tenant that has no token
        │   ├── InvalidLimit           a limit that is not a whole number of at least 1
        │   └── InvalidRetention       a retention policy that is not a whole number of days, or is refused
        ├── LimitReached               the tenant is at one of its limits (a 429 with ``Retry-After``)
        │   └── TokenBudgetSpent       its model tokens of the day are used up
        └── PersonaLookupError         a persona named by a request is not one persona of the store
            ├── UnknownPersona         no stored name and no card's name matches
            └── AmbiguousPersona       several cards show that name (the candidates are named)

Routes and the runtime raise these (and the layers' own errors) and never decide an HTTP status:
:mod:`mirror.gateway.error_table` says what each one is answered with.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = [
    "ConversationNotLive", "ConversationRefencing", "ConversationTimedOut", "ConversationUnavailable",
    "EmbedderError", "EmbedderFailed", "EmbedderUnavailable", "GatewayError", "HostLost", "InvalidLimit", "InvalidRetention", "LimitReached",
    "QueryDoesNotFit", "TenantError", "TokenBudgetSpent", "UnknownConversation", "UnknownTenant",
    "PersonaLookupError", "UnknownPersona", "AmbiguousPersona",
]


class GatewayError(MirrorError):
    """Something between a request and what serves it failed."""


class UnknownConversation(GatewayError):
    def __init__(self, conversation: str) -> None:
        self.conversation = conversation
        super().__init__(f"no conversation {conversation!r} for this tenant")


class ConversationUnavailable(GatewayError):
    """The conversation has no process that answers now; it will, so ask again."""


class ConversationRefencing(ConversationUnavailable):
    def __init__(self, key: object, fenced: object) -> None:
        self.key = key
        super().__init__(f"conversation {key} is being re-fenced after losing its fence ({fenced}); ask again")


class ConversationNotLive(ConversationUnavailable):
    def __init__(self, key: object, error_type: str) -> None:
        self.key = key
        self.error_type = error_type
        super().__init__(f"conversation {key} has no live process yet ({error_type}); ask again")


class HostLost(ConversationUnavailable):
    """Ray declared the node running the conversation's process dead (:mod:`mirror.gateway.node_watch`).

    ``started``: the call was in flight then, so it may have appended (the runtime sends it again
    elsewhere only when that is safe: a keyed turn, a read); otherwise it was never sent."""

    def __init__(self, node: str, *, started: bool) -> None:
        self.node = node
        self.started = started
        when = "while it was running" if started else "before it was sent"
        super().__init__(f"the machine running this conversation was lost (Ray declared node {node[:12]} dead) {when}; "
                         "ask again: it starts on another machine (send the same Idempotency-Key so that a turn "
                         "that was appended is answered, not run twice)")


class ConversationTimedOut(GatewayError):
    def __init__(self, key: object, timeout_s: float) -> None:
        self.key = key
        self.timeout_s = timeout_s
        super().__init__(f"conversation {key} did not answer within {timeout_s:g} s; "
                         "its process may be overloaded: ask again")


class EmbedderError(GatewayError):
    """The embedder of memory queries failed (the error it raised is the ``__cause__``)."""


class EmbedderUnavailable(EmbedderError):
    def __init__(self, model: str, detail: object) -> None:
        self.model = model
        super().__init__(f"the embedder ({model}) is unavailable: {detail or 'timed out'}")


class EmbedderFailed(EmbedderError):
    def __init__(self, model: str, detail: object) -> None:
        self.model = model
        super().__init__(f"the embedder ({model}) gave no usable vector: {detail}")


class QueryDoesNotFit(EmbedderError):
    def __init__(self, model: str | None, detail: object) -> None:
        self.model = model
        super().__init__(f"the query's embedding does not fit this conversation's beliefs "
                         f"(embedder model {model!r}): {detail}")


class TenantError(GatewayError):
    """A change of the tenants file that was refused: the file is left as it was."""


class UnknownTenant(TenantError):
    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        super().__init__(f"no tenant {tenant!r}: create it first with `mirror tenants add {tenant}`")


class InvalidLimit(TenantError, ValueError):
    def __init__(self, limit: str, value: object) -> None:
        self.limit = limit
        self.value = value
        super().__init__(f"invalid limit {limit}={value!r}: a limit is a whole number of at least 1 "
                         "(leave it out, or clear the tenant's limits, for no limit)")


class InvalidRetention(TenantError, ValueError):
    """A retention setting that is not a whole number of days of at least 1, or one Mirror refuses
    (``events_days``: see docs/operations.md, "Retention", for why)."""

    def __init__(self, setting: str, value: object, why: str = "") -> None:
        self.setting = setting
        self.value = value
        super().__init__(f"invalid retention {setting}={value!r}: " + (
            why or "a retention period is a whole number of days of at least 1 (leave it out for none)"))


class LimitReached(GatewayError):
    """The tenant is at ``limit`` (a :class:`~mirror.gateway.tenants.TenantLimits` field) of ``value``.

    ``retry_after_s``: whole seconds, at least 1, until asking again can succeed; ``headers``: the
    ``x-ratelimit-*`` headers of the tenant's limits as they stood (:mod:`mirror.gateway.limits`)."""

    def __init__(self, tenant: str, limit: str, value: int, retry_after_s: int, headers: dict[str, str],
                 detail: str) -> None:
        self.tenant = tenant
        self.limit = limit
        self.value = value
        self.retry_after_s = retry_after_s
        self.headers = headers
        super().__init__(f"tenant {tenant!r} is at its limit of {value} {limit.replace('_', ' ')}: {detail}; "
                         f"retry in {retry_after_s} s")


class TokenBudgetSpent(LimitReached):
    """The tenant's model tokens of the day are used up: no turn until the next UTC day."""


class PersonaLookupError(GatewayError):
    """A persona named by a request (a stored name, or the name its card shows) is not one persona."""


class UnknownPersona(PersonaLookupError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no persona {name!r} in this tenant's store, by stored name or by the name its card "
                         "shows (POST /v1/personas first; GET /v1/personas lists them)")


class AmbiguousPersona(PersonaLookupError):
    def __init__(self, name: str, candidates: list[str]) -> None:
        self.name = name
        self.candidates = candidates
        super().__init__(f"{len(candidates)} personas of this tenant's store show the name {name!r}: "
                         f"{', '.join(candidates)}; name one of them by its stored name")
