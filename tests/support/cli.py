"""Run ``mirror``'s entry point in this process, as the console script does, and collect what it printed."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from mirror.cli.app import main


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """``mirror ARGS`` through :func:`mirror.cli.app.main`: its exit status (0 when it returned), stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["mirror", *args])
    try:
        main()
        code = 0
    except SystemExit as exited:
        assert isinstance(exited.code, int | None), exited.code
        code = exited.code or 0
    out, err = capsys.readouterr()
    return Ran(code, out, err)
