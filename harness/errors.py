"""Errors of the harness: the benchmarks, evals and chaos runs.

    MirrorError                      (mirror.events.errors)
    └── HarnessError
        ├── ChaosOptionError         a `mirror chaos` option that cannot be used (also a ValueError; .chaos.settings)
        └── CurateError              the CuRaTe eval's inputs or run (and its kinds: .evals.curate.errors)

Each names the option, file or address it is about and says how to fix it; ``mirror`` prints it
as one line (exit status 2).
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["HarnessError"]


class HarnessError(MirrorError):
    """A benchmark, eval or chaos run cannot be done as asked."""
