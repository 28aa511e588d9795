"""Headless Chromium for the inspector's tests: Debian's ``chromium`` package, driven by Playwright.

Nothing here downloads a browser: Playwright is pointed at the installed binary
(``MIRROR_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on the PATH); with none installed the
browser tests skip (``.ci/run`` installs it with apt). The flags keep Chromium off the network
it would otherwise call home to (component updates, sync, background requests), which this
machine's closed network refuses.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["CHROMIUM_ARGS", "chromium_path"]

CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage")


def chromium_path() -> str | None:
    """The installed Chromium to drive, or None."""
    given = os.environ.get("MIRROR_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")
