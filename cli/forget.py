"""`mirror forget CONVERSATION`: erase a conversation (every branch) through a running stack's API.

The gateway answers with the erasure job at once (the tombstone is written); this command then
polls the job until the sweep has finished (``--no-wait``: print the job and return), so when it
returns no byte of the conversation is left in the log's files. See docs/operations.md,
"Forgetting and retention", for what is erased where.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from mirror.cli.options import CONVERSATION, DATA_DIR, GATEWAY_TOKEN, GATEWAY_URL, gateway_client

__all__ = ["POLL_S", "forget", "waited"]

POLL_S = 0.2
"""Between polls of the erasure job."""


def waited(job: dict[str, Any], again: Callable[[], dict[str, Any]], *, timeout_s: float, stalled: str,
           progress: Callable[[dict[str, Any]], str] | None = None) -> dict[str, Any]:
    """Poll an erasure job (``again``) until it is ``forgotten``; each change of ``progress(job)``
    on standard error; ``stalled`` is the error's words after ``timeout_s``."""
    deadline, shown = time.monotonic() + timeout_s, None
    while job["status"] != "forgotten":
        line = progress(job) if progress is not None else None
        if line is not None and line != shown:
            typer.echo(line, err=True)
            shown = line
        if time.monotonic() > deadline:
            raise ValueError(stalled)
        time.sleep(POLL_S)
        job = again()
    return job


def forget(
    conversation: str = CONVERSATION,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the sweep has finished."),
    timeout_s: float = typer.Option(300.0, "--timeout", min=1.0, help="Seconds to wait for the sweep."),
    as_json: bool = typer.Option(False, "--json", help="Print the job's JSON."),
    data: Path = DATA_DIR, url: str = GATEWAY_URL, token: str = GATEWAY_TOKEN,
) -> None:
    """Forget CONVERSATION for good: every branch, its events, snapshots, memory and persona
    events, recompute branches, stream copies; a tombstone without content stays (later turns to
    it are refused with 410 Gone). Cannot be undone."""
    with gateway_client(data, url, token) as client:
        job = client.forget(conversation)
        if wait:
            job = waited(job, lambda: client.forget_job(conversation), timeout_s=timeout_s,
                         stalled=f"forgetting {conversation} has not finished after {timeout_s:g} s; it goes on "
                                 f"in the ingester: `mirror forget {conversation}` again to wait")
    if as_json:
        typer.echo(json.dumps(job))
    elif job["status"] == "forgotten":
        typer.echo(f"forgot {conversation}: {job['events']} event(s) erased")
    else:
        typer.echo(f"forgetting {conversation} ({job['events']} event(s)); poll {job['poll']}")
