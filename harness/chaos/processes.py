"""The local stack's process tree, read from ``/proc`` (Linux), and the kill targets in it.

``mirror up`` starts everything it runs as its descendants: the nats-server and the simulator
as children, Ray's head (gcs_server, raylet) as children, and Ray's workers under the raylet.
A Ray worker sets its process title (its ``/proc/<pid>/cmdline``) to ``ray::<ActorClass>``,
sometimes with the actor's name in front (``ray::acme/c1/main:ConversationActor.__init__``), so
each kind of target is told by its title among the *descendants of the stack's pid* — never
machine-wide, where other stacks' workers carry the same titles.

``/proc`` rather than psutil: the four facts needed (parent pid, name, title, existence) are one
file each, and a dependency for them would be heavier than the code.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TARGET_TITLES", "Target", "descendants", "find_targets", "process_title"]

PROC = Path("/proc")

TARGET_TITLES: dict[str, re.Pattern[str]] = {
    "ingester": re.compile(r"^ray::(?:\S*:)?IngesterActor\b"),
    "actor": re.compile(r"^ray::(?:\S*:)?(?:ConversationHost|ConversationActor)\b"),
    "gateway": re.compile(r"^ray::(?:\S*:)?GatewayActor\b"),
}
"""Ray process titles of the kinds that are Ray actors (classes in actors/ingester_actor.py,
actors/placement/host.py, actors/conversation_actor.py, actors/gateway/actor.py)."""
NATS_NAME = "nats-server"


@dataclass(frozen=True)
class Target:
    kind: str
    pid: int
    title: str


def _parent_pids() -> dict[int, int]:
    """Every process's parent: pid → ppid (from ``/proc/<pid>/stat``; the name may hold spaces and parentheses)."""
    parents = {}
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            stat = (PROC / entry.name / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(root: int) -> list[int]:
    """The pids descending from ``root`` (not ``root`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parent_pids().items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop(0)
        for child in sorted(children.get(pid, ())):
            found.append(child)
            frontier.append(child)
    return found


def process_title(pid: int) -> str:
    """The process's title: its cmdline with NULs as spaces, trimmed ("" if gone)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _name(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].startswith("Z")


def find_targets(root: int, kind: str) -> list[Target]:
    """The live processes of ``kind`` among ``root``'s descendants."""
    found = []
    for pid in descendants(root):
        if _zombie(pid):
            continue
        title = process_title(pid)
        if kind == "nats":
            hit = _name(pid) == NATS_NAME
        else:
            hit = bool(TARGET_TITLES[kind].match(title))
        if hit:
            found.append(Target(kind, pid, title[:120]))
    return found
