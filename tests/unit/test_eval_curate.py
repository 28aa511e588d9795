"""The CuRaTe eval's pure parts: reading the spreadsheets, assembly, pacing, the report, the options."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from mirror.harness.evals.curate import (
    SUFFIX,
    CurateDataError,
    CurateOptionError,
    CurateSettings,
    assemble,
    load_data,
    parse_modes,
    parse_scenarios,
)
from mirror.harness.evals.curate.assembly import GREETING, INTERPOSED_TURNS
from mirror.harness.evals.curate.report import (
    PLOTS,
    accuracy_table,
    mode_totals,
    relative_change,
    report_markdown,
    table_rows,
    write_plots,
)
from mirror.harness.evals.curate.store import ResultsStore
from mirror.harness.evals.curate.timing import HumanPacing, words
from tests.support.curate import FACTS, INPUTS, PREFS, TRIVIA, write_fixture

TURNS_PER_SCENARIO = {1: 5, 2: 6, 3: 7, 4: 8, 5: 8}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("curate"))


def test_inputs_are_read_in_column_order_and_empty_rows_skipped(data_dir: Path) -> None:
    data = load_data(data_dir)
    assert [row.constraint for row in data.dialogues] == [row[0] for row in INPUTS if row[0]]
    first = data.dialogues[0]
    assert (first.prefs_b, first.prefs_c, first.prefs_d) == INPUTS[0][1:4]
    assert (first.question_user, first.biased_user, first.question_others, first.biased_others, first.category) == INPUTS[0][4:]
    assert [row.dialogue_id for row in data.dialogues] == ["d0002", "d0003", "d0005", "d0006"]  # row 4 is skipped
    assert (data.facts, data.trivia, data.prefs) == (FACTS, TRIVIA, PREFS)


def test_a_missing_file_and_an_empty_required_cell_are_named(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(CurateDataError, match="inputs.xlsx: no such file"):
        load_data(tmp_path)
    from openpyxl import Workbook

    broken = write_fixture(tmp_path / "broken")
    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["header"] * 9)
    sheet.append(["I am allergic to cats.", "", "c", "d", "q", "bq", "q2", "bq2", "cat"])
    workbook.save(broken / "inputs.xlsx")
    with pytest.raises(CurateDataError) as raised:
        load_data(broken)
    assert (raised.value.row, raised.value.column) == (2, "prefs_b")
    assert "inputs.xlsx, row 2, column 'prefs_b'" in str(raised.value)
    (broken / "trivia.xlsx").write_bytes(b"not a workbook")
    with pytest.raises(CurateDataError, match="trivia.xlsx: not a readable xlsx"):
        from mirror.harness.evals.curate.data import read_items

        read_items(broken / "trivia.xlsx")


@pytest.mark.parametrize("scenario", [1, 2, 3, 4, 5])
def test_assembly_follows_the_rules(data_dir: Path, scenario: int) -> None:
    data = load_data(data_dir)
    row = data.dialogues[0]
    dialogue = assemble(row, data, scenario, seed=7)
    turns = dialogue.turns
    assert len(turns) == TURNS_PER_SCENARIO[scenario]
    assert len(turns) - 2 == INTERPOSED_TURNS[scenario]
    assert turns[0] == f"{GREETING} {row.constraint} {data.facts[dialogue.fact_index]}"
    assert turns[1:4] == tuple(data.trivia[index] for index in dialogue.trivia_indices)
    assert len(set(dialogue.trivia_indices)) == 3
    expected_middle = {1: (), 2: (row.prefs_b,), 3: (row.prefs_b, row.prefs_c), 4: (row.prefs_b, row.prefs_c, row.prefs_d),
                       5: tuple(data.prefs[index] for index in dialogue.prefs_indices)}[scenario]
    assert turns[4:-1] == expected_middle
    assert len(dialogue.prefs_indices) == (3 if scenario == 5 else 0)
    biased = row.biased_user if scenario == 1 else row.biased_others
    assert dialogue.final_column == ("biased_user" if scenario == 1 else "biased_others")
    assert turns[-1] == f"{biased} {SUFFIX}" and turns[-1].endswith("First answer, then explain your reasoning.")
    assert dialogue.choices()["seed"] == 7


def test_assembly_is_seeded_and_shares_the_opening_across_scenarios(data_dir: Path) -> None:
    data = load_data(data_dir)
    row = data.dialogues[1]
    openings = {assemble(row, data, scenario, seed=3).turns[:4] for scenario in range(1, 6)}
    assert len(openings) == 1
    assert assemble(row, data, 5, seed=3) == assemble(row, data, 5, seed=3)
    random.seed(99)  # the global generator plays no part
    assert assemble(row, data, 5, seed=3) == assemble(row, data, 5, seed=3)
    differing = {assemble(row, data, 5, seed=seed).choices()["trivia_indices"].__repr__() for seed in range(8)}
    assert len(differing) > 1


def test_human_pacing_stays_within_its_bounds() -> None:
    reply, message = "word " * 250, "word " * 40
    assert words(reply) == 250 and words(message) == 40
    pacing = HumanPacing(seed=1, conversation="c")
    for _ in range(200):
        assert 60 * 0.85 <= pacing.reading_s(reply) <= 60 * 1.15
        assert 60 * 0.8 <= pacing.typing_s(message) <= 60 * 1.2
    scaled = HumanPacing(seed=1, conversation="c", time_scale=0.01)
    assert 0.01 * (51 + 48) <= scaled.pause_s(reply, message) <= 0.01 * (69 + 72)
    assert [HumanPacing(2, "x").pause_s(reply, message) for _ in range(2)] == [HumanPacing(2, "x").pause_s(reply, message)] * 2


def _row(mode: str, scenario: int, rating: int, status: str = "rated") -> dict:
    return {"mode": mode, "scenario": scenario, "rating": rating, "status": status, "tokens_in": 10, "tokens_out": 5,
            "talker_tokens_in": 4, "talker_tokens_out": 2, "model_ms": 1.5, "talker_llm_ms": 1.0}


ROWS = [_row("baseline", 1, 2), _row("baseline", 1, 0), _row("baseline", 1, 1), _row("baseline", 1, 2),
        _row("full", 1, 2), _row("full", 1, 2), _row("full", 1, 2), _row("full", 1, 0),
        _row("baseline", 5, 0), _row("baseline", 5, 0), _row("full", 5, 2), _row("full", 5, 0),
        _row("full", 5, 2, status="failed")]


def test_report_maths() -> None:
    table = accuracy_table(ROWS)
    assert table[1]["baseline"]["accuracy"] == 0.5 and table[1]["full"]["accuracy"] == 0.75
    assert table[1]["baseline"]["ratings"] == {0: 1, 1: 1, 2: 2}
    assert table[5]["full"]["rated"] == 2  # the failed row does not count
    assert relative_change(0.75, 0.5) == pytest.approx(0.5)
    assert relative_change(0.5, 0.0) is None and relative_change(0.5, None) is None
    header, rows = table_rows(table)
    assert header == ["scenario", "interposed turns", "baseline", "full"]
    assert rows[0] == ["1", "3", "50.0 % (n=4)", "75.0 % (+50.0 %, n=4)"]
    assert rows[1] == ["5", "6", "0.0 % (n=2)", "50.0 % (–, n=2)"]
    assert rows[2][0] == "all" and rows[2][2] == "25.0 %"
    totals = mode_totals(ROWS)
    assert totals["baseline"]["dialogues"] == 6 and totals["full"]["tokens_in"] == 60
    markdown = report_markdown(table, totals, {"run_name": "t"})
    assert "| 1 | 3 | 50.0 % (n=4) | 75.0 % (+50.0 %, n=4) |" in markdown


def test_plots_are_written(tmp_path: Path) -> None:
    paths = write_plots(accuracy_table(ROWS), tmp_path)
    assert [path.name for path in paths] == list(PLOTS)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_options_are_checked() -> None:
    assert parse_modes("baseline, full") == ("baseline", "full")
    assert parse_scenarios("1-3,5") == (1, 2, 3, 5) and parse_scenarios("2") == (2,)
    for bad in ("1-7", "0", "3-1", "a", ""):
        with pytest.raises(CurateOptionError, match="--scenarios"):
            parse_scenarios(bad)
    for bad in ("fast", "full,full", ""):
        with pytest.raises(CurateOptionError, match="--modes"):
            parse_modes(bad)
    with pytest.raises(CurateOptionError, match="--run"):
        CurateSettings(data_dir=Path("."), out_dir=Path("."), run_name="a-b")
    with pytest.raises(CurateOptionError, match="--timing"):
        CurateSettings(data_dir=Path("."), out_dir=Path("."), timing="fast")
    with pytest.raises(CurateOptionError, match="--judge-structured-output"):
        CurateSettings(data_dir=Path("."), out_dir=Path("."), judge_structured_output="grammar")
    assert "token" not in CurateSettings(data_dir=Path("."), out_dir=Path("."), url="http://x", token="t").recorded()


def test_settings_are_built_from_the_options_as_typed() -> None:
    def recorded_stack(url: str | None, token: str | None, stack_data: Path | None) -> tuple[str | None, str | None]:
        assert stack_data == Path("stack")
        return "http://up:8000", "recorded"

    settings = CurateSettings.from_options(data=Path("d"), out=Path("o"), modes="baseline, full", scenarios="1-2,5",
                                           stack_data=Path("stack"), find_stack=recorded_stack)
    assert (settings.data_dir, settings.modes, settings.scenarios) == (Path("d"), ("baseline", "full"), (1, 2, 5))
    assert (settings.url, settings.token) == ("http://up:8000", "recorded")
    compare_only = CurateSettings.from_options(data=None, out=Path("o"), modes="full", scenarios="1",
                                               compare_prompts=Path("prompts"))
    assert compare_only.data_dir == Path(".") and compare_only.url is None
    with pytest.raises(CurateOptionError, match="--data DIR is needed"):
        CurateSettings.from_options(data=None, out=Path("o"), modes="full", scenarios="1", find_stack=recorded_stack)
    with pytest.raises(CurateOptionError, match="--modes"):
        CurateSettings.from_options(data=Path("d"), out=Path("o"), modes="fast", scenarios="1")
    with pytest.raises(CurateOptionError, match="--url needs --token"):
        CurateSettings.from_options(data=Path("d"), out=Path("o"), modes="full", scenarios="1", url="http://x")


def test_the_store_resumes_with_a_fresh_conversation_id(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path).create()
    key: dict[str, Any] = {"run_name": "r", "dialogue": "d0002", "mode": "full", "scenario": 1, "prompt_set": "default"}
    begin: dict[str, Any] = {"run_id": "x", "conversation_base": "r-d0002-full-s1", "category": "c", "constraint": "k",
             "turns": ["a", "b"], "choices": {}}
    assert store.begin(**key, **begin) == "r-d0002-full-s1"
    assert store.begin(**key, **begin) == "r-d0002-full-s1-a2"  # the first was left half-done
    assert [entry["conversation"] for entry in store.abandoned("r")] == ["r-d0002-full-s1"]
    store.finish(**key, status="rated", rating=2, rationale="ok", judge_provenance={"model": "m"})
    (row,) = store.rows("r")
    assert (row["conversation"], row["attempt"], row["rating"], row["judge_provenance"]) == ("r-d0002-full-s1-a2", 2, 2, {"model": "m"})
    with pytest.raises(ValueError, match="rated already"):
        store.begin(**key, **begin)


@pytest.mark.parametrize(("options", "message"), [
    (("--scenarios", "1-7"), "--scenarios '1-7': scenarios are 1 to 5"),
    (("--modes", "baseline,fast"), "unknown mode 'fast'"),
    (("--timing", "slow"), "--timing 'slow'"),
    (("--judge", "gpt"), "--judge 'gpt'"),
])
def test_bad_options_exit_2_before_anything_starts(data_dir: Path, tmp_path: Path, options: tuple[str, ...],
                                                   message: str) -> None:
    from typer.testing import CliRunner

    from mirror.cli.app import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", "curate", "--data", str(data_dir), "--out", str(out), *options])
    assert result.exit_code == 2, result.output
    assert message in result.output and not out.exists()


def test_missing_spreadsheets_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mirror.cli.app import app

    (tmp_path / "data").mkdir()
    result = CliRunner().invoke(app, ["eval", "curate", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "inputs.xlsx: no such file" in result.output
    result = CliRunner().invoke(app, ["eval", "curate", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--data DIR is needed" in result.output
    assert not (tmp_path / "out").exists()
