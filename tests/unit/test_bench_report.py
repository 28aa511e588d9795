"""`mirror bench report`'s table, rendered from JSON the benches really printed (``bench_report_results.json``:
one run of each quick bench's command, saved as printed), without running a bench."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mirror.harness.bench.report import (
    END,
    QUICK,
    START,
    Machine,
    ReportError,
    Run,
    current_section,
    render_section,
    replace_section,
)

RESULTS: dict[str, Any] = json.loads((Path(__file__).with_name("bench_report_results.json")).read_text())
MACHINE = Machine(2, 23.4, "Some CPU", 1.5, 2.25)


def value_at(result: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        result = result[part]
    return result


def test_every_headline_is_a_figure_its_bench_prints() -> None:
    """A headline whose key a bench does not print would show — in the docs: caught here."""
    for bench in QUICK:
        if isinstance(RESULTS[bench.name], str):
            continue
        for headline in bench.headlines:
            for key in filter(None, (headline.key, headline.limit)):
                assert isinstance(value_at(RESULTS[bench.name], key), int | float), (bench.name, key)


def test_the_table_shows_each_figure_exactly_as_printed() -> None:
    section = render_section(Run("2026-11-28 20:00 UTC", "mirror bench report", MACHINE, dict(RESULTS)))
    assert section.startswith(START) and section.endswith(END)
    assert "- run 2026-11-28 20:00 UTC: `mirror bench report` on 2 cores (Some CPU), 23.4 GB, load average 1.50 before, 2.25 after" in section
    lines = section.splitlines()
    for bench in QUICK:
        result = RESULTS[bench.name]
        if isinstance(result, str):
            assert any(line.startswith(f"| {bench.name} | {result} |") for line in lines)
            continue
        for headline in bench.headlines:
            limit = json.dumps(value_at(result, headline.limit)) if headline.limit else "—"
            row = (f"| {bench.name} | {headline.label} | {json.dumps(value_at(result, headline.key))} | {limit} | "
                   f"{headline.target or '—'} | `{bench.command}` | 2026-11-28 20:00 UTC |")
            assert row in lines


def test_only_keeps_the_other_benches_rows_and_their_run() -> None:
    first = render_section(Run("2026-11-27 10:00 UTC", "mirror bench report", MACHINE, dict(RESULTS)))
    again = dict(RESULTS["timetravel"], p50_ms=99.5)
    second = render_section(Run("2026-11-28 11:00 UTC", "mirror bench report --only timetravel", MACHINE,
                                {"timetravel": again}), first)
    rows = [line for line in second.splitlines() if line.startswith("| timetravel | state_at p50")]
    assert rows == [f"| timetravel | state_at p50 ms at random positions | 99.5 | — | ≤ 50 | "
                    f"`{QUICK[0].command}` | 2026-11-28 11:00 UTC |"]
    recall = [line for line in first.splitlines() if line.startswith("| recall |")]
    assert recall and all(line in second.splitlines() for line in recall)  # kept as they were
    assert "- run 2026-11-27 10:00 UTC:" in second and "- run 2026-11-28 11:00 UTC:" in second
    third = render_section(Run("2026-11-29 12:00 UTC", "mirror bench report", MACHINE, dict(RESULTS)), second)
    assert "2026-11-27" not in third and "2026-11-28" not in third  # every bench re-run: no older run is cited


def test_the_section_replaces_only_what_lies_between_the_markers() -> None:
    doc = f"# Benchmarks\n\nhand-kept\n\n{START}\nold\n{END}\n\n## After\n"
    section = render_section(Run("2026-11-28 20:00 UTC", "mirror bench report", MACHINE, {"recall": RESULTS["recall"]}))
    replaced = replace_section(doc, section)
    assert replaced.startswith("# Benchmarks\n\nhand-kept\n\n") and replaced.endswith("\n\n## After\n")
    assert current_section(replaced) == section and "old" not in replaced


@pytest.mark.parametrize("doc", ["no markers", f"{END}\n{START}", f"{START}\n{START}\n{END}"])
def test_a_doc_without_one_pair_of_markers_is_refused(doc: str) -> None:
    with pytest.raises(ReportError, match="bench-report:start"):
        replace_section(doc, "x")
