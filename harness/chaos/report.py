"""The figures of a chaos run, from what the driver, the killer, the sampler and the checker recorded.

Recovery of a kill at time k (seconds since the start; a skipped kill has none):

- ``recovery_s``: from k to the first acknowledgement of a turn *sent after k*, on any
  conversation — how long until the service answers new work again;
- ``all_recovered_s``: from k until every conversation that sent a turn after k has had one of
  them acknowledged — how long until no conversation is still cut off (a killed host takes only
  its own conversations with it; this is the figure that sees them).

A turn sent before the kill and answered after it does not count: it may have been served by a
part the kill did not touch. ``None`` means it did not recover before the run ended.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from mirror.harness.chaos.checker import Acknowledged, ConversationCheck
from mirror.harness.chaos.driver import Failure
from mirror.harness.chaos.killer import Kill

__all__ = ["build_report", "percentile", "recovery"]


def percentile(values: Sequence[float], share: float) -> float | None:
    """Nearest rank, no interpolation (as the benchmarks report theirs); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def recovery(kill_at: float, acknowledged: Sequence[Acknowledged]) -> tuple[float | None, float | None]:
    """``(recovery_s, all_recovered_s)`` of a kill at ``kill_at`` (see the module docstring)."""
    first: dict[str, float] = {}
    for ack in acknowledged:
        if ack.sent_s >= kill_at:
            first[ack.conversation] = min(first.get(ack.conversation, ack.acked_s), ack.acked_s)
    if not first:
        return None, None
    return round(min(first.values()) - kill_at, 3), round(max(first.values()) - kill_at, 3)


def _figures(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 0.50), "p99": percentile(values, 0.99), "max": max(values, default=None)}


def build_report(*, url: str, run_id: str, settings: dict[str, Any], killer: str, duration_s: float,
                 acknowledged: Sequence[Acknowledged], failures: Sequence[Failure], unacknowledged: dict[str, int],
                 kills: Sequence[Kill], checks: Sequence[ConversationCheck], processes: Sequence[int]) -> dict[str, Any]:
    """One JSON-ready object: the totals first, then kills and conversations in detail.

    ``lost``, ``duplicated``, ``gaps`` and the like count over the conversations whose log could
    be read; the acknowledged turns of the others are ``turns_unverified`` (and ``ok`` is false).
    """
    kill_rows = []
    for index, kill in enumerate(kills):
        row: dict[str, Any] = {"kind": kill.kind, "pid": kill.pid, "title": kill.title, "at_s": round(kill.at_s, 3)}
        if kill.pid is not None:
            until = kills[index + 1].at_s if index + 1 < len(kills) else float("inf")
            row["recovery_s"], row["all_recovered_s"] = recovery(kill.at_s, acknowledged)
            row["errors"] = dict(Counter(f.kind for f in failures if kill.at_s <= f.at_s < until))
        kill_rows.append(row)
    made = [row for row in kill_rows if row["pid"] is not None]
    recoveries = [row["recovery_s"] for row in made if row["recovery_s"] is not None]
    all_recoveries = [row["all_recovered_s"] for row in made if row["all_recovered_s"] is not None]
    lost = sum(len(check.lost) for check in checks)
    duplicated = sum(len(check.duplicated) for check in checks)
    gaps = sum(len(check.gaps) for check in checks)
    not_answering = [check.conversation for check in checks if check.answers is False]
    return {
        "ok": all(check.ok for check in checks),
        "url": url,
        "run_id": run_id,
        "settings": settings,
        "killer": killer,
        "duration_s": round(duration_s, 3),
        "turns_acknowledged": len(acknowledged),
        "turns_unacknowledged": sum(unacknowledged.values()),
        "turns_unverified": sum(check.acknowledged for check in checks if check.unreadable),
        "lost": lost,
        "misplaced": sum(len(check.misplaced) for check in checks),
        "duplicated": duplicated,
        "gaps": gaps,
        "doubled_seqs": sum(len(check.doubled_seqs) for check in checks),
        "failure_narratives": sum(len(check.failure_narratives) for check in checks),
        "thinker_failed_events": sum(check.thinker_failed for check in checks),
        "unacknowledged_logged": sum(check.unacknowledged_logged for check in checks),
        "conversations_answering": sum(check.answers is True for check in checks),
        "conversations_not_answering": not_answering,
        "conversations_unchecked": [check.conversation for check in checks if check.unreadable],
        "errors": len(failures),
        "errors_by_kind": dict(sorted(Counter(failure.kind for failure in failures).items())),
        # Per HTTP error, what its body said was wrong (the broker, the log, a fence…), most frequent first.
        "errors_by_detail": dict(Counter(f"{failure.kind}: {failure.detail}" for failure in failures
                                         if failure.detail).most_common()),
        "kills_by_kind": dict(sorted(Counter(row["kind"] for row in made).items())),
        "kills_skipped": sum(row["pid"] is None for row in kill_rows),
        "recovery_s": {**_figures(recoveries), "not_recovered": len(made) - len(recoveries)},
        "all_recovered_s": {**_figures(all_recoveries), "not_recovered": len(made) - len(all_recoveries)},
        "peak_processes": max(processes, default=None),
        "processes_at_start": processes[0] if processes else None,
        "kills": kill_rows,
        "conversations": [check.as_dict() for check in checks],
    }
