"""CPU time by process role, from /proc: what a benchmark's stack spent, and whether the machine is quiet.

Every process of an embedded stack descends from the benchmark's own: the nats-server, the
simulator, Ray's GCS and raylet and, under the raylet, its workers, each titled by its actor
class (``ray::ConversationHost``, ``ray::GatewayActor``…). :class:`CpuMeter` samples the user +
system time of every descendant at :meth:`~CpuMeter.start` and :meth:`~CpuMeter.stop` and sums
the difference by role (:func:`role_of`): Mirror's own processes (:data:`MIRROR_ROLES`), the
simulator (the model's stand-in: a real model's cost is not Mirror's), Ray's system processes
and idle workers (``ray_and_other``, which tick with time rather than with turns) and the load
generator (this process). A process that exits inside the window takes its time with it; the
meter counts them (``exited``) so a figure that lost one says so.

:func:`settle` waits until the machine is quiet again, so a second run is not charged for the
first one's teardown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("conversations", ("ray::ConversationHost", "ray::ConversationActor")),
    ("gateway", ("ray::GatewayActor",)),
    ("ingester", ("ray::IngesterActor",)),
    ("nats", ("nats-server",)),
    ("simulator", ("mirror sim-llm",)),
)
"""A role and the command-line fragments that name its processes (a Ray worker's title is its actor's class)."""
MIRROR_ROLES: tuple[str, ...] = ("conversations", "gateway", "ingester", "nats")
"""The processes whose time is Mirror's: the conversations, the gateway, the ingester, the bus."""
OTHER = "ray_and_other"
LOAD_GENERATOR = "load_generator"


def role_of(command_line: str) -> str:
    """The role of a process from its command line (NUL separators as spaces); :data:`OTHER` when none matches."""
    for role, fragments in ROLES:
        if any(fragment in command_line for fragment in fragments):
            return role
    return OTHER


@dataclass(frozen=True, slots=True)
class ProcessTimes:
    """One process as /proc shows it: its parent, start time (ticks since boot) and CPU seconds."""

    ppid: int
    started: int
    cpu_s: float


def parse_stat(text: bytes) -> ProcessTimes:
    """``/proc/PID/stat`` -> parent, start time and user + system seconds (the command may hold spaces
    and parentheses: the fields are read after its last ``)``)."""
    fields = text.rpartition(b")")[2].split()
    return ProcessTimes(ppid=int(fields[1]), started=int(fields[19]), cpu_s=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS)


def _read(pid: int) -> tuple[ProcessTimes, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            times = parse_stat(stat.read())
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile
    return times, command


def descendants(root: int) -> dict[tuple[int, int], tuple[float, str]]:
    """Every process under ``root`` (not ``root`` itself): ``(pid, start time) -> (CPU seconds, role)``."""
    processes: dict[int, tuple[ProcessTimes, str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (read := _read(int(name))) is not None:
            processes[int(name)] = read
    children: dict[int, list[int]] = {}
    for pid, (times, _) in processes.items():
        children.setdefault(times.ppid, []).append(pid)
    found: dict[tuple[int, int], tuple[float, str]] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        times, command = processes[pid]
        found[(pid, times.started)] = (times.cpu_s, role_of(command))
        stack.extend(children.get(pid, ()))
    return found


def own_cpu_s() -> float:
    """This process's user + system seconds (its children's not included)."""
    times = os.times()
    return times.user + times.system


def by_role(before: Mapping[tuple[int, int], tuple[float, str]],
            after: Mapping[tuple[int, int], tuple[float, str]]) -> tuple[dict[str, float], int]:
    """CPU seconds spent between two :func:`descendants` samples, by role, and how many processes
    exited in between (their time is lost). A process born in between counts from zero."""
    spent: dict[str, float] = {role: 0.0 for role, _ in ROLES} | {OTHER: 0.0}
    for process, (cpu_s, role) in after.items():
        spent[role] += cpu_s - before.get(process, (0.0, role))[0]
    exited = sum(1 for process in before if process not in after)
    return spent, exited


@dataclass(slots=True)
class CpuMeter:
    """CPU seconds by role over a window, for the processes under ``root`` (default: this one)."""

    root: int = field(default_factory=os.getpid)
    _before: dict[tuple[int, int], tuple[float, str]] = field(default_factory=dict)
    _own_before: float = 0.0
    _started: float = 0.0

    def start(self) -> CpuMeter:
        self._before, self._own_before, self._started = descendants(self.root), own_cpu_s(), time.perf_counter()
        return self

    def stop(self) -> CpuSpent:
        spent, exited = by_role(self._before, descendants(self.root))
        spent[LOAD_GENERATOR] = own_cpu_s() - self._own_before
        return CpuSpent(spent, exited, time.perf_counter() - self._started)


@dataclass(frozen=True, slots=True)
class CpuSpent:
    """What :meth:`CpuMeter.stop` measured: seconds by role, exited processes, the window's wall seconds."""

    seconds_by_role: dict[str, float]
    exited: int
    wall_s: float

    @property
    def mirror_s(self) -> float:
        return sum(self.seconds_by_role[role] for role in MIRROR_ROLES)

    def ms_per(self, units: int) -> dict[str, float]:
        """Milliseconds per unit (a turn): by role, then ``mirror`` (:data:`MIRROR_ROLES`) and ``all``."""
        per = {role: round(seconds * 1000 / units, 2) for role, seconds in self.seconds_by_role.items()}
        per["mirror"] = round(self.mirror_s * 1000 / units, 2)
        per["all"] = round(sum(self.seconds_by_role.values()) * 1000 / units, 2)
        return per

    def ms_per_second(self) -> dict[str, float]:
        """Milliseconds of CPU per second of the window, by role (with ``mirror`` and ``all``)."""
        return {role: round(ms / self.wall_s, 2) for role, ms in self.ms_per(1).items()} if self.wall_s else {}

    def plus(self, other: CpuSpent) -> CpuSpent:
        """Two windows as one (their seconds and their lengths added): idle samples pooled."""
        roles = self.seconds_by_role.keys() | other.seconds_by_role.keys()
        return CpuSpent({role: self.seconds_by_role.get(role, 0.0) + other.seconds_by_role.get(role, 0.0) for role in roles},
                        self.exited + other.exited, self.wall_s + other.wall_s)

    def above(self, idle: CpuSpent) -> CpuSpent:
        """This window less what each role spends idle (``idle``'s rate over this window's length)."""
        rate = {role: seconds / idle.wall_s if idle.wall_s else 0.0 for role, seconds in idle.seconds_by_role.items()}
        return CpuSpent({role: seconds - rate.get(role, 0.0) * self.wall_s for role, seconds in self.seconds_by_role.items()},
                        self.exited, self.wall_s)


def busy_share(window_s: float = 1.0) -> float | None:
    """The machine's busy CPU share over ``window_s`` (/proc/stat), ``None`` where there is none."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total_before, idle_before = sample()
        time.sleep(window_s)
        total_after, idle_after = sample()
    except OSError:
        return None
    total = total_after - total_before
    return 1.0 - (idle_after - idle_before) / total if total else 0.0


def settle(busy_below: float = 0.15, at_most_s: float = 90.0) -> float:
    """Wait until the first run's stack has really gone (its Ray workers, NATS, the ingester
    finishing): measured straight after it, a second run pays for the first's teardown (in
    ``bench turns``, its floor 50% higher, its overhead p50 tripled). Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < at_most_s:
        busy = busy_share()
        if busy is None:
            time.sleep(15)
            break
        if busy < busy_below:
            break
    return round(time.monotonic() - started, 1)


__all__ = [
    "CLOCK_TICKS", "LOAD_GENERATOR", "MIRROR_ROLES", "OTHER", "ROLES", "CpuMeter", "CpuSpent", "ProcessTimes",
    "busy_share", "by_role", "descendants", "own_cpu_s", "parse_stat", "role_of", "settle",
]
