"""Reading the user's own copy of the CuRaTe spreadsheets (Mirror never ships or downloads them).

``inputs.xlsx``: the first sheet, a header row, then one dialogue per row with the columns in
this order (:data:`INPUT_COLUMNS`): the user's hard constraint; person B's preferences; person
C's strong preferences; person D's super strong preferences; question (user only); biased
question (user only); question (user and others); biased question (user and others); category.
A row whose first cell is empty is skipped. ``facts.xlsx``, ``trivia.xlsx`` and ``prefs.xlsx``:
one item per row in the first column of the first sheet (facts about the user, general-knowledge
questions, third persons' preferences); empty cells are skipped, and a header is not expected.

A dialogue's id is ``d`` and its row number in the sheet (``d0002`` for the first data row), so
it stays the same however many rows are selected with ``--limit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.harness.evals.curate.errors import CurateDataError

__all__ = ["DATA_FILES", "INPUT_COLUMNS", "CurateData", "CurateRow", "load_data", "read_items", "read_rows"]

INPUT_COLUMNS = ("constraint", "prefs_b", "prefs_c", "prefs_d", "question_user", "biased_user",
                 "question_others", "biased_others", "category")
REQUIRED_COLUMNS = ("constraint", "prefs_b", "prefs_c", "prefs_d", "biased_user", "biased_others")
"""What assembly uses; the unbiased questions and the category are kept but may be empty."""
DATA_FILES = ("inputs.xlsx", "facts.xlsx", "trivia.xlsx", "prefs.xlsx")
MIN_ITEMS = {"facts.xlsx": 1, "trivia.xlsx": 3, "prefs.xlsx": 3}
"""Assembly draws one fact, three trivia questions and three third-person preferences per dialogue."""


@dataclass(frozen=True, slots=True)
class CurateRow:
    """One dialogue of ``inputs.xlsx``; ``row`` is its 1-based row number in the sheet."""

    row: int
    constraint: str
    prefs_b: str
    prefs_c: str
    prefs_d: str
    question_user: str
    biased_user: str
    question_others: str
    biased_others: str
    category: str

    @property
    def dialogue_id(self) -> str:
        return f"d{self.row:04d}"


@dataclass(frozen=True, slots=True)
class CurateData:
    dialogues: tuple[CurateRow, ...]
    facts: tuple[str, ...]
    trivia: tuple[str, ...]
    prefs: tuple[str, ...]


def _text(value: Any) -> str:
    return "" if value is None else " ".join(str(value).split())


def _sheet_rows(path: Path) -> list[tuple[Any, ...]]:
    """The first sheet's rows as value tuples (openpyxl read-only); a missing file is a clear error."""
    from openpyxl import load_workbook  # imported here: the CLI stays quick to import

    if not path.is_file():
        raise CurateDataError(path, "no such file; --data must name the directory holding "
                                    f"{', '.join(DATA_FILES)} (your own copy of the CuRaTe benchmark)")
    try:
        workbook = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zipfile, KeyError, InvalidFileException… for a broken file
        raise CurateDataError(path, f"not a readable xlsx workbook ({type(exc).__name__}: {exc})") from exc
    try:
        if not workbook.worksheets:
            raise CurateDataError(path, "the workbook has no sheet")
        return [tuple(row) for row in workbook.worksheets[0].iter_rows(values_only=True)]
    finally:
        workbook.close()


def read_rows(path: Path) -> tuple[CurateRow, ...]:
    """The dialogues of ``inputs.xlsx`` (header skipped, rows with an empty first cell skipped)."""
    rows = _sheet_rows(path)
    if not rows:
        raise CurateDataError(path, "the first sheet is empty; expected a header row and one dialogue per row")
    dialogues = []
    for number, values in enumerate(rows[1:], start=2):
        cells = [_text(value) for value in values[:len(INPUT_COLUMNS)]]
        if not cells or not cells[0]:
            continue
        cells += [""] * (len(INPUT_COLUMNS) - len(cells))
        fields = dict(zip(INPUT_COLUMNS, cells, strict=True))
        for position, name in enumerate(INPUT_COLUMNS):
            if name in REQUIRED_COLUMNS and not fields[name]:
                raise CurateDataError(path, f"the {name.replace('_', ' ')} cell is empty (column {position + 1} of "
                                            f"{len(INPUT_COLUMNS)}: {', '.join(INPUT_COLUMNS)})", row=number, column=name)
        dialogues.append(CurateRow(row=number, **fields))
    if not dialogues:
        raise CurateDataError(path, "no dialogue rows after the header (rows with an empty first cell are skipped)")
    return tuple(dialogues)


def read_items(path: Path, minimum: int = 1) -> tuple[str, ...]:
    """The non-empty first-column cells of the first sheet, in order."""
    items = tuple(text for text in (_text(row[0]) if row else "" for row in _sheet_rows(path)) if text)
    if len(items) < minimum:
        raise CurateDataError(path, f"{len(items)} item(s) in the first column; at least {minimum} needed", column="A")
    return items


def load_data(directory: Path) -> CurateData:
    """All four spreadsheets of ``directory``, checked (errors name the file, row and column)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CurateDataError(directory, "no such directory; --data must name the directory holding "
                                         f"{', '.join(DATA_FILES)}")
    return CurateData(
        dialogues=read_rows(directory / "inputs.xlsx"),
        facts=read_items(directory / "facts.xlsx", MIN_ITEMS["facts.xlsx"]),
        trivia=read_items(directory / "trivia.xlsx", MIN_ITEMS["trivia.xlsx"]),
        prefs=read_items(directory / "prefs.xlsx", MIN_ITEMS["prefs.xlsx"]),
    )
