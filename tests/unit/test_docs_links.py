"""The README stays a front door and the documentation's links lead somewhere.

Every relative link in README.md and docs/*.md names a file that exists (and, for a link into a
Markdown file with ``#anchor``, a heading of that file); the README is at most
:data:`README_MAX_LINES` lines and keeps the two quick-start commands CI relies on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300
QUICK_START = (
    "./scripts/main     # makes .venv, installs Mirror, runs the main job (mirror demo)",
    "./scripts/test     # makes .venv, installs Mirror with its test extras, runs the whole suite",
)

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_CODE = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """The targets of the Markdown links outside code blocks and code spans."""
    prose = _CODE.sub("", _FENCE.sub("", text))
    return _LINK.findall(prose)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file: lower case, punctuation dropped,
    spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _FENCE.sub("", text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(document: Path) -> None:
    broken = []
    for target in links(document.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (document.parent / path_part).resolve() if path_part else document
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_is_read_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_keeps_the_two_quick_start_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    for line in QUICK_START:
        assert line in readme, f"README.md lost its quick-start line {line!r}"


def test_the_readme_links_every_document_in_docs() -> None:
    linked = {target.partition("#")[0] for target in links((ROOT / "README.md").read_text())}
    missing = [path.name for path in DOCUMENTS[1:] if f"docs/{path.name}" not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_the_link_finder_sees_links_and_skips_code() -> None:
    text = "See [a](docs/a.md#x) and `[b](nowhere.md)`.\n```\n[c](nowhere.md)\n```\n"
    assert links(text) == ["docs/a.md#x"]
    assert anchors("# The `mirror` command\n## NATS cluster\n") == {"the-mirror-command", "nats-cluster"}
