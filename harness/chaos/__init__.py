"""``mirror chaos``: drive conversations over HTTP while killing the stack's processes, then check the log.

What lives here, one module per part:

- :mod:`.settings` — the run's frozen :class:`ChaosSettings` and the kill kinds (validated
  before anything starts);
- :mod:`.processes` — the local stack's process tree read from ``/proc`` (Linux) and the kill
  targets in it, found by name (``nats-server``) or Ray process title (``ray::IngesterActor``…);
- :mod:`.driver` — N conversations × T turns, closed loop, recording every acknowledged turn and
  every error by kind;
- :mod:`.killer` — the schedule: every S seconds ``kill -9`` of the next kind, round robin;
- :mod:`.checker` — what must hold of each conversation's log afterwards (pure, on event dicts);
- :mod:`.report` — the figures (lost, duplicated, gaps, errors, recovery times, peak processes);
- :mod:`.run` — the whole run: find the stack, drive + kill + sample, check, report.

May import the standard library, httpx and ``mirror.stack`` (to find a stack from its
``stack.json``); it reaches the service only over its public HTTP API, as a user would, so it
works against a remote deployment too (there it only drives and checks: nothing to kill).
"""

from mirror.harness.chaos.checker import ConversationCheck, check_conversation
from mirror.harness.chaos.run import run_chaos
from mirror.harness.chaos.settings import KILL_KINDS, ChaosOptionError, ChaosSettings, parse_kill_kinds

__all__ = [
    "KILL_KINDS", "ChaosOptionError", "ChaosSettings", "ConversationCheck", "check_conversation", "parse_kill_kinds",
    "run_chaos",
]
