"""The warnings of Mirror's Ray processes, in one file the stack relays to whoever runs it.

A Ray actor's process writes its log to Ray's worker files (``/tmp/ray/session_*/logs``), which
nobody running ``mirror up`` reads. With :attr:`RuntimeSettings.warnings_log
<mirror.actors.settings.RuntimeSettings.warnings_log>` set, each gateway process and each
conversation process (host or dedicated actor) also appends its warnings and errors there, one
record per line in :data:`LINE_FORMAT` (an error's traceback follows on its own lines); the
stack follows the file and logs those lines again in its own process
(:mod:`mirror.stack.log_relay`), so a turn that failed, and why, shows in ``mirror up``'s stderr.

Processes append (``O_APPEND``), so records of several processes interleave but are never cut.
"""

from __future__ import annotations

import logging
import os

__all__ = ["LINE_FORMAT", "append_warnings_to"]

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""One record's first line: ``2026-11-25 14:38:47,089 WARNING mirror.gateway.failures: …``."""

_appending: set[str] = set()
"""The files this process already appends to (an actor restarted in the same process, or several in one)."""


def append_warnings_to(path: str | None) -> None:
    """Append this process's warnings and errors (every logger's) to ``path``; nothing for None.

    Idempotent per process and file; nothing when the file's directory is not on this machine
    (a process on another machine than the stack's). The handler sits on the root logger at WARNING, so it takes
    Mirror's warnings and those of the libraries under it (uvicorn's "Exception in ASGI
    application", Ray's) without changing what else the process logs.
    """
    if path is None:
        return
    path = os.path.abspath(path)
    if path in _appending:
        return
    if not os.path.isdir(os.path.dirname(path)):
        # The file is in the data directory of the machine that runs `mirror up`; a process Ray
        # placed on another machine has no such directory, and its warnings stay in Ray's logs.
        logging.getLogger(__name__).info("not appending warnings to %s: no such directory on this machine", path)
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    logging.getLogger().addHandler(handler)
    _appending.add(path)
