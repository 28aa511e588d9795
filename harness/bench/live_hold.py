"""`mirror bench actors --hold N`: N conversations live at once in the conversation hosts of one node.

Production path: first turns through the HTTP gateway of the embedded stack, hosted placement;
the per-host cap is raised above N and idle passivation pushed past the run (the defaults: 5,000
a host, 300 s), so what is read is N live conversations' memory.

The embedded stack (hosted placement) with the per-host cap above N and idle passivation
beyond the run, so every conversation activated stays live. First each host serves one
warm-up conversation (its connections, prompt set and imports paid), and the hosts' resident
memory is read (``rss_mb_idle``). Then N brand-new conversations get one turn each through the
HTTP gateway, ``concurrency`` in flight; ``errors`` counts turns without a reply (the target:
none). A turn refused for overload (429/503 with ``Retry-After``: the hosts' fair share, or the
gateway's view of it) is waited out and sent again as the ``openai`` SDK does, at most twice,
and counted apart (``refusals``; ``unavailable`` for a dependency that was behind;
``refused_by_hosts`` of them the hosts', the rest the gateway's view; :mod:`._refusals`). The bench then waits until every conversation's background thinking is done
(``wait_idle`` on each; ``thinking_unfinished`` counts those that were not within
``idle_timeout_s``), so the memory read afterwards holds each conversation's whole state, and
reports the hosts' resident memory: in all, per host, per live conversation
(``(rss_mb_total − rss_mb_idle) / N``, in KB), whether it is ``within_4gb``, and
``activations_per_s`` (N over the activation phase's wall time, gateway and model included).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from mirror.actors.placement import HostedConversation, conversation_handle, placement_of
from mirror.events.ids import StreamKey
from mirror.harness.bench._hosts import host_stats, hosts_figures, progress_line
from mirror.harness.bench._refusals import Refusals, post_retrying
from mirror.harness.bench._stacks import sim_stack
from mirror.stack.embedded import DEFAULT_TENANT, EmbeddedStack

BUDGET_MB = 4_096.0
"""The target: N = 10,000 live conversations in 4 GB of hosts."""


@dataclass(frozen=True, slots=True)
class HoldBenchConfig:
    conversations: int = 10_000
    hosts: int = 0
    """Conversation hosts; 0: one per CPU of the Ray cluster."""
    concurrency: int = 32
    llm_latency_ms: float = 10.0
    mode: str = "full"
    memory: bool = True
    idle_timeout_s: float = 600.0
    timeout_s: float = 7_200.0
    show_progress: bool = False


async def _bounded(count: int, concurrency: int, step: Any, description: str, show: bool) -> None:
    slots = asyncio.Semaphore(concurrency)
    with progress_line(description, count, show) as advance:
        async def one(index: int) -> None:
            async with slots:
                await step(index)
            advance()

        await asyncio.gather(*(one(index) for index in range(count)))


# The bench's calls on a conversation: which host holds it, and waiting until its thinking is done.

def _host_slot(stack: EmbeddedStack, name: str) -> int:
    """The slot of the host that holds the default tenant's conversation ``name``."""
    conversation = conversation_handle(StreamKey(DEFAULT_TENANT, name), stack.runtime)
    assert isinstance(conversation, HostedConversation), "a hold is measured on hosted conversations"
    return conversation.slot


async def _wait_idle(stack: EmbeddedStack, name: str, timeout_s: float) -> bool:
    """Whether conversation ``name``'s background thinking was done within ``timeout_s``."""
    return await conversation_handle(StreamKey(DEFAULT_TENANT, name), stack.runtime).wait_idle(timeout=timeout_s)


# The gateway: one turn over HTTP, an error recorded instead of raised.

def _gateway(stack: EmbeddedStack, concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=600,
                             limits=httpx.Limits(max_connections=concurrency + 4))


async def _turn(client: httpx.AsyncClient, name: str, errors: list[str], refusals: Refusals) -> None:
    """A first turn; a refusal for overload waited out and sent again, as the ``openai`` SDK does
    (:mod:`._refusals`), and counted apart from the errors."""
    try:
        response = await post_retrying(client, f"/v1/conversations/{name}/turns", {"message": "hello, I am new here"},
                                       refusals)
        response.raise_for_status()
    except Exception as exc:
        errors.append(f"{name}: {exc!r}")


# The phases: warm each host, activate N new conversations, wait for their thinking.

def _warm_up_names(stack: EmbeddedStack) -> list[str]:
    """One conversation per host, found by its slot."""
    warmed: dict[int, str] = {}
    index = 0
    while len(warmed) < placement_of(stack.runtime).hosts:
        name = f"hold-warmup-{index}"
        warmed.setdefault(_host_slot(stack, name), name)
        index += 1
    return list(warmed.values())


async def _warm_up(client: httpx.AsyncClient, stack: EmbeddedStack, errors: list[str], refusals: Refusals) -> int:
    """A turn in each host, its thinking finished, so the memory read next is the hosts' idle cost; how many."""
    names = _warm_up_names(stack)
    await asyncio.gather(*(_turn(client, name, errors, refusals) for name in names))
    await asyncio.gather(*(_wait_idle(stack, name, 60) for name in names))
    return len(names)


async def _activate(client: httpx.AsyncClient, names: list[str], config: HoldBenchConfig, errors: list[str],
                    refusals: Refusals) -> float:
    """A first turn for each of ``names``, ``concurrency`` at once; returns the seconds."""
    started = time.perf_counter()
    await _bounded(len(names), config.concurrency, lambda index: _turn(client, names[index], errors, refusals), "activating",
                   config.show_progress)
    return time.perf_counter() - started


async def _wait_thinking(stack: EmbeddedStack, names: list[str], config: HoldBenchConfig) -> tuple[int, float]:
    """Wait until each conversation's thinking is done; those that were not within ``idle_timeout_s``, and the seconds."""
    outcomes: list[bool] = []

    async def wait_idle(index: int) -> None:
        outcomes.append(await _wait_idle(stack, names[index], config.idle_timeout_s))

    started = time.perf_counter()
    await _bounded(len(names), 64, wait_idle, "thinking", config.show_progress)
    return sum(not idle for idle in outcomes), time.perf_counter() - started


def _summarise(config: HoldBenchConfig, errors: list[str], refusals: Refusals, *, warmed: int, idle: list[dict[str, Any]],
               held: dict[str, Any], activate_s: float, unfinished: int, thinking_s: float) -> dict[str, Any]:
    """The figures: ``idle`` is the hosts' stats after the warm-up, ``held`` (:func:`hosts_figures`) with all live."""
    idle_mb = sum(host["rss_mb"] for host in idle)
    live = sum(held["live_per_host"])
    result: dict[str, Any] = {
        "benchmark": "actors_hold",
        "mode": config.mode,
        "memory": config.memory,
        "llm_latency_ms": config.llm_latency_ms,
        "conversations": config.conversations,
        "errors": len(errors),
        **refusals.figures(),
        "live": live,
        "all_live": live == config.conversations + warmed,
        "rss_mb_idle": round(idle_mb, 1),
        "rss_mb_idle_per_host": [host["rss_mb"] for host in idle],
        **held,
        "kb_per_live_conversation": round((held["rss_mb_total"] - idle_mb) * 1024 / config.conversations, 1),
        "within_4gb": held["rss_mb_total"] <= BUDGET_MB,
        "activations_per_s": round(config.conversations / activate_s, 1),
        "activate_s": round(activate_s, 1),
        "thinking_unfinished": unfinished,
        "thinking_wait_s": round(thinking_s, 1),
    }
    if errors:
        result["first_errors"] = errors[:3]
    return result


async def _measure(stack: EmbeddedStack, config: HoldBenchConfig) -> dict[str, Any]:
    errors: list[str] = []
    refusals = Refusals()
    names = [f"hold-{index}" for index in range(config.conversations)]
    async with _gateway(stack, config.concurrency) as client:
        warmed = await _warm_up(client, stack, errors, refusals)
        idle = host_stats(stack.runtime)
        activate_s = await _activate(client, names, config, errors, refusals)
    unfinished, thinking_s = await _wait_thinking(stack, names, config)
    return _summarise(config, errors, refusals, warmed=warmed, idle=idle, held=hosts_figures(host_stats(stack.runtime)),
                      activate_s=activate_s, unfinished=unfinished, thinking_s=thinking_s)


def run_hold_bench(config: HoldBenchConfig) -> dict[str, Any]:
    with sim_stack("hold", config.llm_latency_ms, config.mode, memory=config.memory, placement="hosted",
                   hosts=config.hosts, max_live_per_host=config.conversations + 1,
                   passivate_after_s=config.timeout_s) as stack:
        return asyncio.run(asyncio.wait_for(_measure(stack, config), config.timeout_s))


__all__ = ["BUDGET_MB", "HoldBenchConfig", "run_hold_bench"]
