"""`mirror persona show|export` on files only (in this process, through ``main``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.cognition.persona import EXAMPLES, read_persona
from tests.support.cli import run_main

WREN = EXAMPLES / "wren.json"
ODILE = EXAMPLES / "odile.png"


def test_show_json_prints_the_persona_as_mirror_uses_it(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_main(monkeypatch, capsys, "persona", "show", str(ODILE), "--json")
    assert ran.code == 0, ran.err
    shown = json.loads(ran.out)
    assert set(shown) == {"name", "user_name", "description", "personality", "scenario", "greeting",
                          "example_messages", "system_prompt", "post_history_instructions", "big_five", "hard_goals",
                          "soft_goals", "biography", "emotions", "relationship", "source_format", "version"}
    assert shown == read_persona(ODILE).view() and shown["source_format"] == "chara_card_v3+png"


def test_show_prints_goals_in_order(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_main(monkeypatch, capsys, "persona", "show", str(WREN))
    assert ran.code == 0, ran.err
    assert ran.out.startswith("Wren Halloway  (chara_card_v2+json, version ")
    assert "  1. Find out where the stranger got the pocket watch" in ran.out
    assert "[1.00 lorebook] The Scarrow Point light" in ran.out


def test_an_invalid_file_is_exit_2_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"spec": "chara_card_v2", "data": {"name": "A", "extensions": {
        "mirror": {"big_five": {"openness": 1.7}}}}}))
    for command in (["show", str(bad), "--json"], ["export", str(bad), "--out", str(tmp_path / "out.json")]):
        ran = run_main(monkeypatch, capsys, "persona", *command)
        assert ran.code == 2 and ran.out == ""
        assert ran.err.splitlines() == [
            f"mirror: error: persona file {bad}: data.extensions.mirror.big_five.openness: 1.7 is not in [0, 1]"]
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("format", ["json", "png"])
def test_export_writes_a_v3_card_that_reads_back_equal(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       format: str) -> None:
    out = tmp_path / f"wren.{format}"
    ran = run_main(monkeypatch, capsys, "persona", "export", str(WREN), "--out", str(out), "--format", format)
    assert ran.code == 0, ran.err
    again, original = read_persona(out), read_persona(WREN)
    assert again == original and again.source_format == f"chara_card_v3+{format}"
    assert f"version {original.version[:12]}" in ran.out


def test_export_refuses_an_unknown_format(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    ran = run_main(monkeypatch, capsys, "persona", "export", str(WREN), "--out", str(tmp_path / "x"),
                   "--format", "webp")
    assert ran.code == 2 and "--format" in ran.err and not (tmp_path / "x").exists()
