"""A whole chaos run: find the local stack, drive while killing and sampling, check, report.

The stack to kill is the one ``mirror up`` recorded in ``<data>/stack.json`` if it is alive and
its URL is the one driven (``localhost`` and ``127.0.0.1`` are the same host); otherwise — a
remote deployment, or no ``--data`` — the run only drives and checks, and the report's
``killer`` says why. Processes are counted (every ``sample_every_s``) among the stack pid's
descendants, the stack process itself not included.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from mirror.harness._http_events import read_events
from mirror.harness.chaos.checker import Acknowledged, ConversationCheck, check_conversation
from mirror.harness.chaos.driver import Driver
from mirror.harness.chaos.killer import Killer
from mirror.harness.chaos.processes import descendants
from mirror.harness.chaos.report import build_report
from mirror.harness.chaos.settings import ChaosSettings
from mirror.serving import ServerUnavailable
from mirror.stack.embedded import running_stack

__all__ = ["find_local_stack", "run_chaos"]

READ_PAUSE_S = 0.25


def _same_url(first: str, second: str) -> bool:
    def normal(url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url.rstrip("/"))
        host = "127.0.0.1" if parts.hostname in ("localhost", "::1") else (parts.hostname or "")
        return parts.scheme, host, parts.port

    return normal(first) == normal(second)


def find_local_stack(data_dir: Path | None, url: str) -> tuple[int | None, str]:
    """The pid of the live local stack serving ``url`` (or None) and a sentence saying what was found."""
    if data_dir is None:
        return None, "off: no --data directory, so no local stack to kill (drive and check only)"
    running = running_stack(data_dir)
    if running is None:
        return None, f"off: no live stack recorded in {data_dir}/stack.json (drive and check only)"
    if not _same_url(running["url"], url):
        return None, f"off: the stack in {data_dir} serves {running['url']}, not {url} (drive and check only)"
    return int(running["pid"]), f"on: the stack of {data_dir}, pid {running['pid']}"


async def _sample(root: int | None, every_s: float, counts: list[int], stop: asyncio.Event) -> None:
    while root is not None and not stop.is_set():
        counts.append(len(await asyncio.to_thread(descendants, root)))
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except TimeoutError:
            pass


async def _events(client: httpx.AsyncClient, conversation: str, through: int, deadline: float) -> list[dict[str, Any]]:
    """Every committed event, once the log holds seq ``through`` (or the deadline passed: what it holds)."""
    while True:
        try:
            events = await read_events(client, conversation)
        except httpx.HTTPError:  # the ingester or a gateway restarting: ask again
            if time.monotonic() >= deadline:
                raise
        else:
            if max((event["seq"] for event in events), default=0) >= through or time.monotonic() >= deadline:
                return events
        await asyncio.sleep(READ_PAUSE_S)


async def _check(driver: Driver, client: httpx.AsyncClient, settings: ChaosSettings) -> list[ConversationCheck]:
    """Each conversation answers one more turn, then its log is checked against its acknowledgements."""
    deadline = time.monotonic() + settings.catch_up_s
    probes = await asyncio.gather(*(driver.turn(conversation, "after the chaos", deadline=deadline)
                                    for conversation in driver.conversation_ids()))
    checks = []
    for conversation, probe in zip(driver.conversation_ids(), probes, strict=True):
        acks = [ack for ack in driver.acknowledged if ack.conversation == conversation]
        try:
            events = await _events(client, conversation, max((ack.seq for ack in acks), default=0), deadline)
        except httpx.HTTPError as exc:  # the log cannot be read over HTTP: nothing can be checked
            check = ConversationCheck(conversation, acknowledged=len(acks), unreadable=f"{type(exc).__name__}: {exc}")
        else:
            check = check_conversation(conversation, acks, events, message_prefix=driver.message_prefix())
        check.answers = probe is not None
        checks.append(check)
    return checks


async def _run(settings: ChaosSettings, on_ack: Callable[[Acknowledged], None]) -> dict[str, Any]:
    root, killer_note = find_local_stack(settings.data_dir, settings.url)
    if root is None and settings.kill:
        killer_note += f"; --kill {','.join(settings.kill)} ignored"
        settings = replace(settings, kill=())
    headers = {"Authorization": f"Bearer {settings.token}"}
    limits = httpx.Limits(max_connections=settings.conversations + 4)
    async with httpx.AsyncClient(base_url=settings.url, headers=headers, timeout=settings.request_timeout_s,
                                 limits=limits) as client:
        try:
            (await client.get("/healthz")).raise_for_status()
        except httpx.HTTPError as exc:
            raise ServerUnavailable("the gateway", settings.url, f"/healthz failed ({type(exc).__name__}: {exc})",
                                    "check --url (or that `mirror up` runs for --data)") from exc
        started = time.monotonic()
        driver = Driver(client, uuid.uuid4().hex[:8], settings.conversations, settings.turns, started,
                        started + settings.timeout_s, settings.retry_pause_s, settings.turn_pause_s, on_ack)
        killer = Killer(root or 0, settings.kill, settings.every_s, started, settings.seed)
        stop = asyncio.Event()
        processes: list[int] = []
        background = [asyncio.create_task(killer.run(stop)),
                      asyncio.create_task(_sample(root, settings.sample_every_s, processes, stop))]
        try:
            await driver.run()
        finally:
            stop.set()
            await asyncio.gather(*background)
        checks = await _check(driver, client, settings)
    as_settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in asdict(settings).items()
                   if key != "token"}
    return build_report(url=settings.url, run_id=driver.run_id, settings=as_settings, killer=killer_note,
                        duration_s=time.monotonic() - started, acknowledged=driver.acknowledged,
                        failures=driver.failures, unacknowledged=driver.unacknowledged, kills=killer.kills,
                        checks=checks, processes=processes)


def run_chaos(settings: ChaosSettings, on_ack: Callable[[Acknowledged], None] = lambda ack: None) -> dict[str, Any]:
    """Run it (see the module docstring) and return the report (:func:`~.report.build_report`)."""
    return asyncio.run(_run(settings, on_ack))
