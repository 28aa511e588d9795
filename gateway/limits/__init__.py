"""Per-tenant limits: requests per minute, concurrent turns, model tokens per day, live conversations.

The limits are set in the tenants file (:class:`~mirror.gateway.tenants.TenantLimits`, ``mirror
tenants limits``); their use is counted in the deployment's shared counters on the broker
(:mod:`mirror.events.counters`), so a limit holds across every gateway, and survives restarts.

- ``usage``: a tenant's record of use and the pure steps that change it (admit, release, renew, charge);
- ``admission``: the ASGI middleware that enforces them, the ``x-ratelimit-*`` headers, and the
  metering of a turn's (or a front end's background task's) tokens.
"""

from .admission import Limiter, LimitsMiddleware, metered, metered_tokens
from .usage import LEASE_S, Usage, reset_duration, usage_key

__all__ = ["LEASE_S", "Limiter", "LimitsMiddleware", "Usage", "metered", "metered_tokens", "reset_duration", "usage_key"]
