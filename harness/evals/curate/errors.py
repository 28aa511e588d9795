"""Errors of the CuRaTe eval, under the harness's :class:`~mirror.harness.errors.HarnessError`.

    HarnessError                     (mirror.harness.errors)
    └── CurateError
        ├── CurateOptionError        an option of ``mirror eval curate`` is invalid (nothing started)
        ├── CurateDataError          a spreadsheet is missing, unreadable, or a cell is wrong (names file, row, column)
        └── CurateDriveError         the gateway refused or failed a turn of a dialogue

The CLI prints each as one line; the first two are exit status 2, before anything is started.
"""

from __future__ import annotations

from pathlib import Path

from mirror.harness.errors import HarnessError

__all__ = ["CurateDataError", "CurateDriveError", "CurateError", "CurateOptionError"]


class CurateError(HarnessError):
    """Something went wrong running the CuRaTe eval."""


class CurateOptionError(CurateError, ValueError):
    """An option of ``mirror eval curate`` is invalid; nothing was started."""


class CurateDataError(CurateError, ValueError):
    """A CuRaTe spreadsheet is missing or holds something the eval cannot use."""

    def __init__(self, path: Path | str, problem: str, *, row: int | None = None, column: str | None = None) -> None:
        self.path = Path(path)
        self.row = row
        self.column = column
        where = str(self.path) + (f", row {row}" if row is not None else "") + (f", column {column!r}" if column else "")
        super().__init__(f"{where}: {problem}")


class CurateDriveError(CurateError):
    """A turn of a dialogue failed at the gateway; the unit is left unrated and a re-run retries it."""

    def __init__(self, conversation: str, turn: int, detail: str) -> None:
        self.conversation = conversation
        self.turn = turn
        self.detail = detail
        super().__init__(f"conversation {conversation}, turn {turn}: {detail}; the gateway's log says more; "
                         "run the same command again to retry the unfinished dialogues")
