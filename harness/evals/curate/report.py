"""The report of a run: accuracy per scenario and mode, each mode against the baseline, and plots.

Accuracy is the share of rated dialogues rated 2 (the answer respects the constraint); the
relative change of a mode is ``accuracy(mode) / accuracy(baseline) − 1`` in the same scenario
(``None`` when the baseline's is 0 or the baseline was not run). Written next to the results:
``report.md`` (markdown tables), ``accuracy_by_scenario.png`` (bars per scenario, one per mode)
and ``accuracy_vs_interposed_turns.png`` (a line per mode against the turns between the
constraint and the final question). matplotlib is imported only to draw, with the Agg backend.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mirror.harness.evals.curate.assembly import INTERPOSED_TURNS
from mirror.modes import MODES

__all__ = ["MODES", "PLOTS", "accuracy_table", "comparison_markdown", "mode_totals", "relative_change",
           "report_markdown", "rich_table", "write_plots"]

PLOTS = ("accuracy_by_scenario.png", "accuracy_vs_interposed_turns.png")
RATED = "rated"


def accuracy_table(rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """``{scenario: {mode: {"accuracy", "rated", "respected", "ratings": {0: n, 1: n, 2: n}}}}`` over rated rows."""
    counts: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["status"] == RATED and row["rating"] is not None:
            counts[int(row["scenario"])][str(row["mode"])].append(int(row["rating"]))
    table: dict[int, dict[str, dict[str, Any]]] = {}
    for scenario in sorted(counts):
        table[scenario] = {}
        for mode in sorted(counts[scenario], key=_mode_order):
            ratings = counts[scenario][mode]
            respected = sum(rating == 2 for rating in ratings)
            table[scenario][mode] = {"accuracy": respected / len(ratings), "rated": len(ratings), "respected": respected,
                                     "ratings": {value: ratings.count(value) for value in (0, 1, 2)}}
    return table


def _mode_order(mode: str) -> tuple[int, str]:
    return (MODES.index(mode) if mode in MODES else len(MODES), mode)


def relative_change(accuracy: float, baseline: float | None) -> float | None:
    """``accuracy / baseline − 1``; ``None`` when there is no baseline or it is 0."""
    if baseline is None or baseline == 0:
        return None
    return accuracy / baseline - 1


def with_changes(table: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The JSON summary's form: string keys, accuracy and change rounded to 4 places."""
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for scenario, modes in table.items():
        baseline = modes.get("baseline", {}).get("accuracy")
        figures[str(scenario)] = {}
        for mode, cell in modes.items():
            change = relative_change(cell["accuracy"], baseline)
            figures[str(scenario)][mode] = {**cell, "accuracy": round(cell["accuracy"], 4),
                                            "ratings": {str(k): v for k, v in cell["ratings"].items()},
                                            "change_vs_baseline": None if change is None else round(change, 4)}
    return figures


def mode_totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode over rated rows: dialogues, tokens in/out (all logged model calls, and the Talker's), model ms."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["status"] != RATED:
            continue
        total = totals.setdefault(str(row["mode"]), {"dialogues": 0, "tokens_in": 0, "tokens_out": 0, "talker_tokens_in": 0,
                                                     "talker_tokens_out": 0, "model_ms": 0.0, "talker_llm_ms": 0.0})
        total["dialogues"] += 1
        for name in ("tokens_in", "tokens_out", "talker_tokens_in", "talker_tokens_out"):
            total[name] += int(row[name] or 0)
        for name in ("model_ms", "talker_llm_ms"):
            total[name] = round(total[name] + float(row[name] or 0.0), 1)
    return dict(sorted(totals.items(), key=lambda item: _mode_order(item[0])))


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _change(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f} %"


def _modes_of(table: Mapping[int, Mapping[str, Any]]) -> list[str]:
    return sorted({mode for modes in table.values() for mode in modes}, key=_mode_order)


def table_rows(table: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows shared by the markdown and Rich tables: one row per scenario, accuracy (change) per mode."""
    modes = _modes_of(table)
    header = ["scenario", "interposed turns", *modes]
    rows = []
    for scenario, cells in table.items():
        baseline = cells.get("baseline", {}).get("accuracy")
        row = [str(scenario), str(INTERPOSED_TURNS.get(scenario, "?"))]
        for mode in modes:
            cell = cells.get(mode)
            if cell is None:
                row.append("–")
            elif mode == "baseline":
                row.append(f"{_percent(cell['accuracy'])} (n={cell['rated']})")
            else:
                row.append(f"{_percent(cell['accuracy'])} ({_change(relative_change(cell['accuracy'], baseline))}, n={cell['rated']})")
        rows.append(row)
    overall = _overall(table)
    if len(table) > 1:
        base = overall.get("baseline")
        rows.append(["all", "", *[("–" if mode not in overall else _percent(overall[mode]) if mode == "baseline"
                                   else f"{_percent(overall[mode])} ({_change(relative_change(overall[mode], base))})")
                                  for mode in modes]])
    return header, rows


def _overall(table: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> dict[str, float]:
    """Per mode, the mean of its scenarios' accuracies (the papers' "average")."""
    per_mode: dict[str, list[float]] = defaultdict(list)
    for cells in table.values():
        for mode, cell in cells.items():
            per_mode[mode].append(cell["accuracy"])
    return {mode: sum(values) / len(values) for mode, values in per_mode.items()}


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report_markdown(table: Mapping[int, Mapping[str, Mapping[str, Any]]], totals: Mapping[str, Mapping[str, Any]],
                    settings: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    header, rows = table_rows(table)
    parts = [f"# CuRaTe through Mirror: run `{settings.get('run_name', '?')}`", "",
             "Accuracy = share of final answers rated 2 (respects the constraint); in brackets the relative change "
             "against the baseline (accuracy / baseline − 1) and the number of dialogues rated. The last row is the "
             "mean over scenarios.", "", _markdown(header, rows), "", "## Model work per mode", "",
             _markdown(["mode", "dialogues", "tokens in", "tokens out", "Talker tokens in", "Talker tokens out",
                        "model ms (logged)", "Talker ms (turns)"],
                       [[mode, str(t["dialogues"]), str(t["tokens_in"]), str(t["tokens_out"]), str(t["talker_tokens_in"]),
                         str(t["talker_tokens_out"]), f"{t['model_ms']:.0f}", f"{t['talker_llm_ms']:.0f}"]
                        for mode, t in totals.items()]),
             "", "Tokens and model ms are summed from the provenance of the events each conversation's log held when its "
                 "dialogue ended (Talker and Thinker; thinking after the final turn may be missing); the Talker's own "
                 "columns are its turn events, and Talker ms is the `llm_ms` the gateway reported per turn.",
             "", "## Settings", "", "```json", _json(settings), "```"]
    if notes:
        parts += ["", "## Notes", "", *[f"- {note}" for note in notes]]
    parts += ["", f"Plots: `{PLOTS[0]}`, `{PLOTS[1]}`.", ""]
    return "\n".join(parts)


def comparison_markdown(before: Mapping[int, Mapping[str, Mapping[str, Any]]],
                        after: Mapping[int, Mapping[str, Mapping[str, Any]]], prompt_set: str, changed: int,
                        compared: int, prompt_files: Sequence[str]) -> str:
    modes = sorted({mode for table in (before, after) for modes in table.values() for mode in modes}, key=_mode_order)
    rows = []
    for scenario in sorted(set(before) | set(after)):
        row = [str(scenario)]
        for mode in modes:
            old, new = before.get(scenario, {}).get(mode), after.get(scenario, {}).get(mode)
            old_text = "–" if old is None else _percent(old["accuracy"])
            new_text = "–" if new is None else _percent(new["accuracy"])
            row.append(f"{old_text} → {new_text}")
        rows.append(row)
    return "\n".join([f"## Prompt comparison: prompt set `{prompt_set}` (changed: {', '.join(prompt_files)})", "",
                      "Each conversation recomputed counterfactually on a branch (the Talker answers again with the "
                      "changed prompts), its final answer judged again. Accuracy before → after:", "",
                      _markdown(["scenario", *modes], rows), "",
                      f"Ratings changed: {changed} of {compared} compared.", ""])


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True, default=str)


def rich_table(table: Mapping[int, Mapping[str, Mapping[str, Any]]], title: str) -> Any:
    from rich.table import Table

    header, rows = table_rows(table)
    rich = Table(title=title)
    for name in header:
        rich.add_column(name)
    for row in rows:
        rich.add_row(*row)
    return rich


def write_plots(table: Mapping[int, Mapping[str, Mapping[str, Any]]], out_dir: Path) -> list[Path]:
    """Both PNGs into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    scenarios = sorted(table)
    modes = _modes_of(table)
    width = 0.8 / max(1, len(modes))
    paths = [out_dir / PLOTS[0], out_dir / PLOTS[1]]

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for index, mode in enumerate(modes):
        xs = [position + (index - (len(modes) - 1) / 2) * width for position in range(len(scenarios))]
        ys = [100 * table[s][mode]["accuracy"] if mode in table[s] else 0.0 for s in scenarios]
        axes.bar(xs, ys, width=width, label=mode)
    axes.set_xticks(range(len(scenarios)), [f"scenario {s}" for s in scenarios])
    _finish(plt, figure, axes, "CuRaTe accuracy by scenario and mode", paths[0])

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for mode in modes:
        by_turns: dict[int, list[float]] = defaultdict(list)
        for scenario in scenarios:
            if mode in table[scenario]:
                by_turns[INTERPOSED_TURNS.get(scenario, 0)].append(100 * table[scenario][mode]["accuracy"])
        turns = sorted(by_turns)
        axes.plot(turns, [sum(by_turns[count]) / len(by_turns[count]) for count in turns], marker="o", label=mode)
    axes.set_xticks(sorted({INTERPOSED_TURNS.get(scenario, 0) for scenario in scenarios}))
    axes.set_xlabel("turns between the constraint and the final question")
    _finish(plt, figure, axes, "CuRaTe accuracy against interposed turns (scenarios 4 and 5 averaged at 6)", paths[1])
    return paths


def _finish(plt: Any, figure: Any, axes: Any, title: str, path: Path) -> None:
    """What both plots share: the accuracy axis, the title, the legend; written as PNG and closed."""
    axes.set_ylabel("accuracy (% rated 2)")
    axes.set_ylim(0, 100)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
