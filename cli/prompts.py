"""``mirror prompts export|diff``: the default prompt set as files to edit, and what an edited one changes.

The default templates are package data (``mirror/cognition/prompt_sets/default/``), which a
user who installed a wheel cannot be asked to find inside site-packages: ``export`` writes
them into a directory of the user's, ``diff`` compares such a directory with them. A prompt
directory may hold only the templates it changes — ``recompute --prompts`` takes the others
from the stack's prompt set, as ``POST /v1/recompute`` does — so a template missing from it
is no difference; a file that is no template is named (``controler.md`` is a typo, not a
change). :func:`read_prompt_dir` is that reading, shared with ``recompute``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import typer

from mirror.cli.errors import CLIError, PromptFilesExist

# The commands import cognition (~0.4 s, for the templates' names and texts) in their bodies: see app.py.
__all__ = ["PromptDir", "TEMPLATE_COUNT", "changed_templates", "prompts_app", "read_prompt_dir", "template_diff"]

TEMPLATE_COUNT = 13
"""``len(mirror.cognition.prompts.TEMPLATES)``, spelt out for help texts
(importing cognition costs every command 0.4 s); tests/unit/test_cli_prompts.py checks it."""

DIFF_SAME, DIFF_DIFFERENT, DIFF_TROUBLE = 0, 1, 2
"""``prompts diff``'s exit statuses, as diff(1)'s (trouble: any error is exit status 2 in ``mirror``)."""

prompts_app = typer.Typer(help="The prompt templates: export the default set to edit, see what an edited set changes.",
                          rich_markup_mode="markdown")


@dataclass(frozen=True)
class PromptDir:
    """What a prompt directory holds: the templates it has (name → text) and the files that are no template."""

    directory: Path
    templates: Mapping[str, str]
    unknown: tuple[str, ...]


def read_prompt_dir(directory: Path, template_names: tuple[str, ...]) -> PromptDir:
    """The templates among ``directory``'s files, and its other files (hidden ones and folders aside)."""
    from mirror.cognition.errors import PromptSetError

    if not directory.is_dir():
        raise PromptSetError(f"prompt directory {directory} does not exist "
                             f"(`mirror prompts export {directory}` writes the default set there)")
    templates: dict[str, str] = {}
    unknown: list[str] = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.name in template_names:
            templates[path.name] = path.read_text(encoding="utf-8")
        else:
            unknown.append(path.name)
    return PromptDir(directory, templates, tuple(unknown))


def changed_templates(found: PromptDir, default: Mapping[str, str]) -> list[str]:
    """The templates of ``found`` whose text is not the default's, in the default set's order."""
    return [name for name in default if name in found.templates and found.templates[name] != default[name]]


def template_diff(name: str, default_text: str, text: str, directory: Path) -> list[str]:
    """A unified diff of one template, the default set's against the directory's."""
    return [line.rstrip("\n") for line in difflib.unified_diff(
        default_text.splitlines(keepends=True), text.splitlines(keepends=True),
        fromfile=f"default/{name}", tofile=str(directory / name))]


@prompts_app.command("export")
def export(
    directory: Path = typer.Argument(..., help="Where to write the templates (made if missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite templates the directory already holds."),
) -> None:
    """Write the default prompt set into DIRECTORY, one file per template, to edit (the persona
    mind's templates into DIRECTORY/persona).

    Then `mirror prompts diff DIRECTORY` shows what the edits change and `mirror recompute
    --prompts DIRECTORY` re-thinks conversations with them (templates left unchanged may be
    deleted: the others are taken from the stack's set). Refuses to overwrite a file unless --force.
    """
    from mirror.cognition.persona.prompting import default_persona_prompts
    from mirror.cognition.prompts import default_prompt_set

    default, persona = default_prompt_set(), default_persona_prompts()
    files = {**{directory / name: text for name, text in default.templates.items()},
             **{directory / "persona" / name: text for name, text in persona.templates.items()}}
    existing = [str(path.relative_to(directory)) for path in files if path.exists()]
    if existing and not force:
        raise PromptFilesExist(directory, existing)
    try:
        (directory / "persona").mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            path.write_bytes(text.encode("utf-8"))
    except OSError as exc:
        raise CLIError(f"cannot write the templates to {directory}: {exc.strerror or exc}") from None
    typer.echo(f"wrote the {len(default.templates)} templates of prompt set {default.version} to {directory}, "
               f"and the persona mind's {len(persona.templates)} ({persona.version}) to {directory / 'persona'}"
               + (f" (overwrote {len(existing)})" if existing else ""))


@prompts_app.command("diff")
def diff(directory: Path = typer.Argument(..., help="A prompt directory: all the templates, or only changed ones.")) -> None:
    """Show how the templates in DIRECTORY differ from the default set: a unified diff per changed template.

    A template missing from DIRECTORY is no difference (recompute takes it from the stack's set);
    a file that is no template is named. Exit status 0 when nothing differs, 1 when something does,
    2 on an error — like diff.
    """
    from mirror.cognition.prompts import TEMPLATES, default_prompt_set

    default = default_prompt_set().templates
    found = read_prompt_dir(directory, TEMPLATES)
    changed = changed_templates(found, default)
    for name in changed:
        for line in template_diff(name, default[name], found.templates[name], directory):
            typer.echo(line)
    same = [name for name in TEMPLATES if name in found.templates and name not in changed]
    absent = [name for name in TEMPLATES if name not in found.templates]
    typer.echo(f"{directory}: {len(changed)} of the {len(TEMPLATES)} templates {'differs' if len(changed) == 1 else 'differ'} "
               "from the default set"
               + (f" ({', '.join(changed)})" if changed else "")
               + (f"; {len(same)} the same" if same else "")
               + (f"; {len(absent)} not in the directory (the default's apply)" if absent else ""))
    if found.unknown:
        typer.echo(f"{directory}: not templates: {', '.join(found.unknown)} (templates are {', '.join(TEMPLATES)})")
    persona_changed = _persona_diff(directory / "persona")
    if changed or found.unknown or persona_changed:
        raise typer.Exit(DIFF_DIFFERENT)


def _persona_diff(folder: Path) -> bool:
    """The persona templates of ``folder`` against the built-in ones (printed); whether any differs
    or is no template. A missing folder is no difference."""
    from mirror.cognition.persona.prompting import PERSONA_TEMPLATES, default_persona_prompts

    if not folder.is_dir():
        return False
    default = default_persona_prompts().templates
    found = read_prompt_dir(folder, PERSONA_TEMPLATES)
    changed = changed_templates(found, default)
    for name in changed:
        for line in template_diff(name, default[name], found.templates[name], folder):
            typer.echo(line)
    typer.echo(f"{folder}: {len(changed)} of the persona mind's {len(PERSONA_TEMPLATES)} templates "
               f"{'differs' if len(changed) == 1 else 'differ'} from its default set"
               + (f" ({', '.join(changed)})" if changed else ""))
    if found.unknown:
        typer.echo(f"{folder}: not templates: {', '.join(found.unknown)} (templates are {', '.join(PERSONA_TEMPLATES)})")
    return bool(changed or found.unknown)
