"""`mirror prompts export|diff` and what `mirror recompute --prompts` reads, on files only (no stack)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from mirror.cli.app import app
from mirror.cli.prompts import TEMPLATE_COUNT
from mirror.cli.replay import persona_templates, recompute_templates
from mirror.cognition.errors import PromptSetError
from mirror.cognition.persona.prompting import default_persona_prompts, persona_prompt_set
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS, TEMPLATES, default_prompt_set
from tests.support.cli import run_main

DEFAULT = default_prompt_set().templates


def test_the_template_count_the_help_names_is_the_prompt_sets() -> None:
    assert TEMPLATE_COUNT == len(TEMPLATES) == len(list((DEFAULT_PROMPT_SETS / "default").glob("*.md")))
    recompute = typer.main.get_command(app).commands["recompute"]  # type: ignore[attr-defined]  # a group's
    (prompts,) = [param for param in recompute.params if param.name == "prompts"]
    assert f"any of the {len(TEMPLATES)} " in prompts.help
    assert "six" not in (recompute.help or "") + prompts.help


def test_export_writes_the_default_set_and_refuses_to_overwrite(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = tmp_path / "mine"
    ran = run_main(monkeypatch, capsys, "prompts", "export", str(directory))
    assert ran.code == 0, ran.err
    assert {path.name: path.read_text(encoding="utf-8") for path in directory.iterdir() if path.is_file()} == dict(DEFAULT)
    persona = default_persona_prompts()
    assert {path.name: path.read_text(encoding="utf-8") for path in (directory / "persona").iterdir()} == dict(persona.templates)
    assert f"the persona mind's {len(persona.templates)} ({persona.version}) to {directory / 'persona'}" in ran.out
    assert f"wrote the {len(TEMPLATES)} templates of prompt set {default_prompt_set().version} to {directory}" in ran.out

    (directory / "controller.md").write_text("mine\n")
    again = run_main(monkeypatch, capsys, "prompts", "export", str(directory))
    assert again.code == 2 and again.out == ""
    (line,) = again.err.splitlines()
    assert line.startswith(f"mirror: error: {directory} already holds talker.md, ") and "pass --force" in line
    assert (directory / "controller.md").read_text() == "mine\n"  # nothing written

    forced = run_main(monkeypatch, capsys, "prompts", "export", str(directory), "--force")
    assert forced.code == 0 and (directory / "controller.md").read_text(encoding="utf-8") == DEFAULT["controller.md"]


def test_export_refuses_even_one_existing_template(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    (tmp_path / "memory.md").write_text("kept\n")
    ran = run_main(monkeypatch, capsys, "prompts", "export", str(tmp_path))
    assert ran.code == 2 and f"{tmp_path} already holds memory.md; pass --force to overwrite it" in ran.err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["memory.md"]


def test_diff_exits_like_diff(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = tmp_path / "p"
    assert run_main(monkeypatch, capsys, "prompts", "export", str(directory)).code == 0
    same = run_main(monkeypatch, capsys, "prompts", "diff", str(directory))
    assert same.code == 0 and f"0 of the {len(TEMPLATES)} templates differ" in same.out and "---" not in same.out

    (directory / "controller.md").write_text(DEFAULT["controller.md"] + "Be brief.\n", encoding="utf-8")
    (directory / "memory.md").unlink()  # a template left out is the default's: no difference
    changed = run_main(monkeypatch, capsys, "prompts", "diff", str(directory))
    assert changed.code == 1
    lines = changed.out.splitlines()
    assert lines[:2] == ["--- default/controller.md", f"+++ {directory / 'controller.md'}"]
    assert "+Be brief." in lines and not any(line.startswith("+++") and "memory.md" in line for line in lines)
    assert (f"1 of the {len(TEMPLATES)} templates differs from the default set (controller.md); "
            f"{len(TEMPLATES) - 2} the same; 1 not in the directory") in changed.out

    (directory / "controller.md").write_text(DEFAULT["controller.md"], encoding="utf-8")
    (directory / "controler.md").write_text("a typo\n")
    (directory / ".hidden").write_text("ignored\n")
    unknown = run_main(monkeypatch, capsys, "prompts", "diff", str(directory))
    assert unknown.code == 1 and "not templates: controler.md (templates are talker.md," in unknown.out
    assert ".hidden" not in unknown.out

    missing = run_main(monkeypatch, capsys, "prompts", "diff", str(tmp_path / "nowhere"))
    assert missing.code == 2 and missing.out == "" and len(missing.err.splitlines()) == 1
    assert "does not exist (`mirror prompts export" in missing.err


def test_recompute_sends_only_the_templates_the_directory_holds(tmp_path: Path) -> None:
    (tmp_path / "controller.md").write_text("Think of $reasoning.\n")
    (tmp_path / "README").mkdir()  # folders and hidden files are not looked at
    (tmp_path / ".swp").write_text("")
    assert recompute_templates(tmp_path) == {"controller.md": "Think of $reasoning.\n"}
    (tmp_path / "controler.md").write_text("typo")
    with pytest.raises(PromptSetError, match=r"controler\.md is not a template \(templates are talker\.md,"):
        recompute_templates(tmp_path)
    with pytest.raises(PromptSetError, match="holds none of the templates"):
        recompute_templates(tmp_path / "README")


def test_recompute_sends_the_persona_templates_of_the_persona_sub_directory(tmp_path: Path) -> None:
    assert persona_templates(tmp_path) == {}
    (tmp_path / "persona").mkdir()
    (tmp_path / "persona" / "appraisal.md").write_text("React to $interpretation.\n")
    assert recompute_templates(tmp_path) == {}  # persona templates alone are a change too
    assert persona_templates(tmp_path) == {"appraisal.md": "React to $interpretation.\n"}
    (tmp_path / "persona" / "apraisal.md").write_text("typo")
    with pytest.raises(PromptSetError, match=r"apraisal\.md is not a persona template"):
        persona_templates(tmp_path)


@pytest.mark.parametrize(("options", "message"), [
    (("--mode", "fast"), "Invalid value for '--mode': "),
    (("--prompts-typo",), "No such option: --prompts-typo"),
])
def test_recompute_refuses_bad_options_before_any_request(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path, options: tuple[str, ...], message: str) -> None:
    (tmp_path / "controller.md").write_text("Think.\n")
    # Nothing listens at this URL: a request sent would fail with "cannot reach the Mirror gateway".
    ran = run_main(monkeypatch, capsys, "recompute", "--prompts", str(tmp_path), "--url", "http://127.0.0.1:9",
                   "--token", "t", *options)
    assert ran.code == 2 and ran.out == ""
    (line,) = ran.err.splitlines()
    assert message in line and "cannot reach" not in line
    if options[0] == "--mode":
        assert "'baseline', 'threads_only', 'controller_only', 'full'" in line


def test_diff_shows_a_changed_persona_template_too(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    directory = tmp_path / "p"
    assert run_main(monkeypatch, capsys, "prompts", "export", str(directory)).code == 0
    (directory / "persona" / "appraisal.md").write_text("I react.\n")
    (directory / "persona" / "apraisal.md").write_text("a typo\n")
    changed = run_main(monkeypatch, capsys, "prompts", "diff", str(directory))
    assert changed.code == 1 and "+I react." in changed.out
    assert "1 of the persona mind's 10 templates differs from its default set (appraisal.md)" in changed.out
    assert "not templates: apraisal.md" in changed.out
    merged = persona_prompt_set(directory)
    assert merged.templates["appraisal.md"] == "I react.\n" and merged.version != default_persona_prompts().version
    assert merged.templates["plan.md"] == default_persona_prompts().templates["plan.md"]
