"""Where the model slots' time went during a bench phase, read from the hosts' own metrics.

Each conversation host's fair share counts slot-seconds (:meth:`~mirror.cognition.fair_share.FairShare.figures`):
held by Talker calls, held by Thinker calls (per tenant), and idle; the host exports them as
``mirror_model_slot_seconds_total{tenant,priority}`` and ``mirror_model_slots_idle_seconds_total``.
A bench reads every host (the targets the gateway lists, as Prometheus would) before and after a
phase; the difference, as fractions of the slot-time of the phase, says whether the slots were
answering users, thinking, or free.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

SLOT_SECONDS = "mirror_model_slot_seconds_total"
IDLE_SECONDS = "mirror_model_slots_idle_seconds_total"
WAITING = "mirror_model_calls_waiting"
THINKING = "mirror_conversations_thinking"
COUNTED = {"mirror_model_admissions_refused_total": "refused_by_hosts", "mirror_thinking_shed_total": "thinking_shed"}
DRAIN_TIMEOUT_S = 120.0
"""The longest :func:`drain_thinking` waits for the thinking a phase left (then the next phase starts anyway)."""


async def read_slot_time(client: httpx.AsyncClient) -> dict[str, float]:
    """Every host's slot-seconds summed: ``{"idle": s, "talker": s, "thinker": s, "talker:TENANT": s, …}``,
    and the calls waiting for a slot now (``waiting:talker``, ``waiting:thinker``)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    targets = (await client.get("/metrics/targets")).raise_for_status().json()
    for target in targets:
        if target["labels"].get("component") != "host":
            continue
        for address in target["targets"]:
            text = (await client.get(f"http://{address}/metrics")).raise_for_status().text
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == IDLE_SECONDS:
                        keys = ["idle"]
                    elif sample.name == SLOT_SECONDS:
                        priority, tenant = sample.labels["priority"], sample.labels["tenant"]
                        keys = [priority, f"{priority}:{tenant}"]
                    elif sample.name == WAITING:
                        keys = [f"waiting:{sample.labels['priority']}"]
                    elif sample.name == THINKING:
                        keys = ["thinking:now"]
                    elif sample.name in COUNTED:
                        keys = [f"count:{COUNTED[sample.name]}"]
                    else:
                        continue
                    for key in keys:
                        totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def slot_fractions(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The phase's slot-time (``slot_s``) and each part of it as a fraction of the whole; the
    calls waiting at its start and end (``waiting_thinker_at_start`` …); the Talker calls the
    hosts refused and the thinking calls they shed meanwhile."""
    spent = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after if ":" not in key or
             key.split(":")[0] in ("talker", "thinker")}
    waiting = {f"waiting_{key[len('waiting:'):]}_at_{when}": int(reading.get(key, 0))
               for when, reading in (("start", before), ("end", after)) for key in ("waiting:talker", "waiting:thinker")}
    waiting.update({name: int(after.get(f"count:{name}", 0) - before.get(f"count:{name}", 0))
                    for name in COUNTED.values()})
    whole = spent.get("idle", 0.0) + spent.get("talker", 0.0) + spent.get("thinker", 0.0)
    if whole <= 0:
        return {"slot_s": 0.0, **waiting}
    return {"slot_s": round(whole, 2), **{key: round(value / whole, 3) for key, value in sorted(spent.items())},
            **waiting}


async def drain_thinking(client: httpx.AsyncClient) -> float:
    """Wait until no conversation of any host is thinking (the Thinker's work a phase started is
    done or shed), so that each phase starts from the same state: the seconds it took."""
    started = time.perf_counter()
    while time.perf_counter() - started < DRAIN_TIMEOUT_S:
        if not (await read_slot_time(client)).get("thinking:now"):
            break
        await asyncio.sleep(0.2)
    return round(time.perf_counter() - started, 2)


__all__ = ["drain_thinking", "read_slot_time", "slot_fractions"]
