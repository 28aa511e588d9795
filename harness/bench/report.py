"""`mirror bench report`: re-run the quick benchmarks and regenerate the table in docs/benchmarks.md.

The docs' figures are never typed by hand: this runs each quick benchmark as its own command
(``mirror bench NAME … --json``, in a process of its own, as a user would run it), reads the
JSON it printed, and renders one row per headline figure — the value exactly as printed, beside
the raw limit measured in the same run where the bench has one, and the issue's target. The
section between :data:`START` and :data:`END` in the doc is replaced; the rest of the doc is
kept. ``only`` re-runs some benches and keeps the other benches' rows, each row naming the run
it came from, each run listed with its date, machine, load average and command.

Quick means well under two minutes each on two shared cores, at the sizes in :data:`QUICK`:
``timetravel`` (10,000 events), ``recall`` (10,000 beliefs), ``pipeline`` against the simulator
(three turns; the offline model takes ~30 s a turn), ``embed`` (skipped, and said so, without the
``[local]`` extra), ``storage`` (20 turns), ``ingest`` (10,000 events, the sync comparison off)
and ``turns`` (5 users × 6 turns, pausing ~1 s, every other turn as a limited tenant with an
idempotency key: ``--compare-limits``). The long ones (``actors``, ``recovery``,
``recompute``, ``reflection``, ``inspector``) stay in the hand-kept table above the section.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "END", "QUICK", "START", "Headline", "Machine", "QuickBench", "ReportError", "Run", "current_section",
    "machine_now", "render_section", "replace_section", "run_bench", "today",
]

START = "<!-- bench-report:start -->"
END = "<!-- bench-report:end -->"
NOT_INSTALLED_EXIT = 2
"""What ``mirror bench embed`` exits with when the ``[local]`` extra is missing."""


class ReportError(Exception):
    """The report cannot be made: a bench failed, or the doc has no generated section."""


@dataclass(frozen=True, slots=True)
class Headline:
    """One figure of a bench's JSON: ``key`` (dotted), with the raw limit's key where the same run
    measures one, and the target it is judged against (words, or empty)."""

    label: str
    key: str
    limit: str | None = None
    target: str = ""


@dataclass(frozen=True, slots=True)
class QuickBench:
    name: str
    args: tuple[str, ...]
    headlines: tuple[Headline, ...]

    @property
    def command(self) -> str:
        return " ".join(("mirror", "bench", self.name, *self.args, "--json"))


QUICK: tuple[QuickBench, ...] = (
    QuickBench("timetravel", (), (
        Headline("state_at p50 ms at random positions", "p50_ms", target="≤ 50"),
        Headline("deep / shallow p50", "ratio_deep_vs_shallow", target="≤ 1.5"),
        Headline("state_at p99 ms", "p99_ms"),
        Headline("first look ms (folds all, writes the snapshots)", "cold_first_call_ms"),
    )),
    QuickBench("recall", (), (
        Headline("recall p50 ms at 10,000 beliefs", "p50_ms", target="≤ 10"),
        Headline("p50 at 10,000 / p50 at 100", "ratio_10k_vs_100", target="≤ 3"),
        Headline("add one belief ms (a bm25s rebuild beside it)", "add_one_belief_ms", limit="bm25s_rebuild_ms"),
    )),
    QuickBench("pipeline", ("--llm", "sim"), (
        Headline("turn p50 ms, the simulator at 0 ms", "turn_p50_ms"),
        Headline("Talker p50 ms", "talker_p50_ms"),
    )),
    QuickBench("embed", (), (
        Headline("one sentence p50 ms", "single_p50_ms"),
        Headline("sentences/s at batch 32", "batch32_sentences_per_s"),
    )),
    QuickBench("storage", (), (
        Headline("bytes per turn, memory off", "memory_off.bytes_per_turn"),
        Headline("bytes per turn, memory on", "memory_on.bytes_per_turn"),
        Headline("vectors' share, memory on", "memory_on.vector_share"),
    )),
    QuickBench("ingest", ("--events", "10000", "--writers", "0"), (
        Headline("events/s end to end (raw: JetStream publishes/s)", "events_per_s", limit="raw_publish_per_s"),
        Headline("end to end / raw", "ratio", target="≥ 0.6"),
    )),
    QuickBench("turns", ("--conversations", "5", "--turns", "6", "--pause-ms", "1000", "--compare-limits"), (
        Headline("turn overhead p50 ms (raw: the three hops)", "overhead_p50_ms", limit="floor_p50_ms.total"),
        Headline("overhead over the hops p50 ms", "overhead_over_floor_p50_ms", target="≤ 5"),
        Headline("turn overhead p99 ms", "overhead_p99_ms", target="≤ 25"),
        Headline("limits and idempotency: limited − plain overhead p50 ms", "limits.added_p50_ms", target="≤ 0.5"),
        Headline("limits: the gateway's decision p50 ms", "limits.admission_p50_ms"),
    )),
)


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int
    memory_gb: float
    cpu: str
    load_before: float
    load_after: float

    def describe(self) -> str:
        return (f"{self.cores} cores ({self.cpu}), {self.memory_gb:g} GB, "
                f"load average {self.load_before:.2f} before, {self.load_after:.2f} after")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def machine_now(load_before: float) -> Machine:
    """This machine, with the 1-minute load average before the benches and now."""
    return Machine(os.cpu_count() or 0, _memory_gb(), _cpu_model(), load_before, os.getloadavg()[0])


@dataclass(frozen=True, slots=True)
class Run:
    """One invocation of the report: when, the command, the machine, and what each bench printed
    (a bench's JSON, or the reason it was skipped, as a string)."""

    date: str
    command: str
    machine: Machine
    results: dict[str, dict[str, Any] | str] = field(default_factory=dict)


def run_bench(bench: QuickBench, runner: Callable[[Sequence[str]], subprocess.CompletedProcess[str]] | None = None
              ) -> dict[str, Any] | str:
    """Run ``bench`` as its command and return the JSON it printed; a string saying why when it
    was skipped (the embedder's extra missing); :class:`ReportError` when it failed."""
    argv = [sys.executable, "-m", "mirror", "bench", bench.name, *bench.args, "--json"]
    done = (runner or _run)(argv)
    if bench.name == "embed" and done.returncode == NOT_INSTALLED_EXIT:
        return "skipped: needs the [local] extra"
    if done.returncode != 0:
        raise ReportError(f"`{bench.command}` exited {done.returncode}: {done.stderr.strip()[-400:]}")
    try:
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise ReportError(f"`{bench.command}` printed no JSON object: {done.stdout[-200:]!r}") from exc
    return result


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _figure(result: dict[str, Any], key: str) -> str:
    """The value at dotted ``key`` exactly as the bench printed it (JSON), or — when absent."""
    value: Any = result
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return "—"
        value = value[part]
    return json.dumps(value)


def _rows(run: Run) -> list[str]:
    rows = []
    for bench in QUICK:
        result = run.results.get(bench.name)
        if result is None:
            continue
        if isinstance(result, str):
            rows.append(f"| {bench.name} | {result} | — | — | — | `{bench.command}` | {run.date} |")
            continue
        for headline in bench.headlines:
            limit = _figure(result, headline.limit) if headline.limit else "—"
            rows.append(f"| {bench.name} | {headline.label} | {_figure(result, headline.key)} | {limit} | "
                        f"{headline.target or '—'} | `{bench.command}` | {run.date} |")
    return rows


HEADER = ("| bench | figure | Mirror | raw limit | target | command | run |",
          "| --- | --- | --- | --- | --- | --- | --- |")
_ROW = re.compile(r"^\| (?P<bench>[a-z_]+) \|.*\| (?P<date>[^|]+) \|$")
_RUN = re.compile(r"^- run (?P<date>.+? UTC): ")


def render_section(run: Run, previous: str = "") -> str:
    """The generated section (markers included): ``run``'s rows, and from ``previous`` (an earlier
    section) the rows of benches ``run`` did not re-run, with the runs they came from."""
    kept_rows = [line for line in previous.splitlines()
                 if (match := _ROW.match(line)) and match["bench"] not in run.results and line not in HEADER]
    kept_dates = {_ROW.match(line)["date"] for line in kept_rows}  # type: ignore[index]  # matched above
    kept_runs = [line for line in previous.splitlines()
                 if (match := _RUN.match(line)) and match["date"] in kept_dates and match["date"] != run.date]
    order = {bench.name: index for index, bench in enumerate(QUICK)}
    rows = sorted(kept_rows + _rows(run), key=lambda line: order.get(_ROW.match(line)["bench"], len(order)))  # type: ignore[index]  # every row matches
    runs = [f"- run {run.date}: `{run.command}` on {run.machine.describe()}; "
            f"{', '.join(run.results)}", *kept_runs]
    return "\n".join([
        START,
        "<!-- generated by `mirror bench report` from the benches' JSON: do not edit by hand -->",
        "",
        *runs,
        "",
        *HEADER,
        *rows,
        END,
    ])


def replace_section(doc: str, section: str) -> str:
    """``doc`` with its generated section replaced by ``section``; :class:`ReportError` if the doc
    has no (or a broken) pair of markers."""
    start, end = doc.find(START), doc.find(END)
    if start < 0 or end < start or doc.count(START) != 1 or doc.count(END) != 1:
        raise ReportError(f"the doc needs one {START} line followed by one {END} line where the table goes")
    return doc[:start] + section + doc[end + len(END):]


def current_section(doc: str) -> str:
    """The generated section of ``doc`` (empty when it has none yet)."""
    start, end = doc.find(START), doc.find(END)
    return doc[start:end + len(END)] if 0 <= start < end else ""


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
