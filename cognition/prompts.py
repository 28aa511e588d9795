"""Versioned prompt sets: one directory of templates, versioned by the hash of its content.

A prompt set's version is recorded in every event it produced (``Provenance.prompt_set``), so
a change of a single character in any template is a new version — which is what replay and
recompute rely on: the same version means the same requests, hence the recorded responses.

Templates use ``string.Template`` (``$name``), so JSON braces in the text need no escaping.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from .errors import PromptSetError

TEMPLATES = (
    "talker.md",
    "talker_baseline.md",
    "talker_memory.md",
    "monologue.md",
    "monologue_continue.md",
    "controller.md",
    "controller_only.md",
    "memory.md",
    "contradiction.md",
    "insight.md",
    "decay.md",
    "reflect.md",
    "talker_portrait.md",
)
DEFAULT_PROMPT_SETS = Path(__file__).with_name("prompt_sets")


@dataclass(frozen=True)
class PromptSet:
    name: str
    templates: Mapping[str, str] = field(repr=False)

    def __post_init__(self) -> None:
        # Its own copy: the caller's dict changed later changes neither the texts nor the version.
        object.__setattr__(self, "templates", dict(self.templates))

    @functools.cached_property
    def version(self) -> str:
        """``<name>-<12 hex>``: a hash over every template's name and text (made once: every
        model call's request carries it)."""
        digest = hashlib.sha256()
        for template in sorted(self.templates):
            digest.update(template.encode())
            digest.update(b"\0")
            digest.update(self.templates[template].encode())
            digest.update(b"\0")
        return f"{self.name}-{digest.hexdigest()[:12]}"

    def render(self, template: str, **values: object) -> str:
        """The template with ``$name`` fields filled; a missing value is a :class:`PromptSetError`."""
        try:
            return Template(self.templates[template]).substitute({k: str(v) for k, v in values.items()}).strip()
        except KeyError as exc:
            raise PromptSetError(f"prompt set {self.version}: {template} needs a value for {exc}") from None
        except ValueError as exc:
            raise PromptSetError(f"prompt set {self.version}: {template} is not a valid template: {exc}") from None


def load_prompt_set(directory: str | Path, names: tuple[str, ...] = TEMPLATES, set_name: str | None = None) -> PromptSet:
    """Read every template (``names``: the MIRROR mind's unless told) of a prompt-set directory;
    missing or empty files are an error. The set is named after the directory unless ``set_name``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PromptSetError(f"prompt set directory {directory} does not exist")
    templates: dict[str, str] = {}
    for name in names:
        path = directory / name
        if not path.is_file():
            raise PromptSetError(f"prompt set {directory} lacks {name} (needs: {', '.join(names)})")
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise PromptSetError(f"prompt set {directory}: {name} is empty")
        templates[name] = text
    return PromptSet(set_name or directory.name, templates)


def default_prompt_set() -> PromptSet:
    return load_prompt_set(DEFAULT_PROMPT_SETS / "default")


__all__ = ["DEFAULT_PROMPT_SETS", "PromptSet", "TEMPLATES", "default_prompt_set", "load_prompt_set"]
