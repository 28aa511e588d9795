"""``mirror top``: a live terminal view of a running stack's metrics (drawn by :mod:`mirror.cli.top_view`)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from mirror.cli.options import DATA_DIR, GATEWAY_URL

SCRAPE_TIMEOUT_S = 5.0


def top(
    data: Path = DATA_DIR,
    url: str = GATEWAY_URL,
    once: bool = typer.Option(False, "--once", help="Print one frame (everything since the processes started) and exit."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between frames."),
) -> None:
    """A live view of a running stack's metrics: per tenant, per model stage, per component (Ctrl-C ends it)."""
    import httpx
    from rich.console import Console
    from rich.live import Live

    from mirror.cli.errors import NoStackRunning
    from mirror.cli.top_view import frame, scrape
    from mirror.stack.embedded import running_stack

    gateway = url or (running_stack(data) or {}).get("url")
    if not gateway:
        raise NoStackRunning(data)
    gateway = gateway.rstrip("/")
    console = Console()
    with httpx.Client(timeout=SCRAPE_TIMEOUT_S) as http:
        before = scrape(gateway, http)
        if once:
            console.print(frame(before, None))
            return
        try:
            with Live(frame(before, None), console=console, refresh_per_second=4) as live:
                while True:
                    time.sleep(interval)
                    now = scrape(gateway, http)
                    live.update(frame(now, before))
                    before = now
        except KeyboardInterrupt:
            pass


__all__ = ["top"]
