"""Errors of the embedded stack: the processes ``mirror up`` starts and watches.

    MirrorError                      (mirror.events.errors)
    └── StackError
        └── LocalModelUnavailable    the offline llama.cpp model is missing or did not start

The ingester's own failure to start is :class:`mirror.actors.errors.IngesterUnavailable` (the
runtime raises it); a server that cannot listen is :class:`mirror.serving.ServerUnavailable`.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError

__all__ = ["LocalModelUnavailable", "StackError"]


class StackError(MirrorError):
    """A part of the embedded stack could not be started or stopped."""


class LocalModelUnavailable(StackError):
    """The offline llama.cpp model is not installed or its server did not come up (see mirror.stack.local_model)."""
