"""At 80 columns, what `mirror` prints keeps every id, branch name, option and environment variable whole.

A name cut ("MIRROR_PASSIVATE_…") or broken over two lines cannot be copied. Each test renders at
80 columns, then looks for every such name, whole, on one line.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from rich.console import Console, RenderableType

from mirror.cli import memory
from mirror.cli.app import app
from mirror.cli.client_commands import status_table
from mirror.cli.tables import Field, fitted
from mirror.events.ids import MAX_IDENTIFIER_LENGTH
from tests.support.cli import run_main

WIDTH = 80
LONGEST_ID = "c" * (MAX_IDENTIFIER_LENGTH - len("-end")) + "-end"


def whole(name: str, text: str) -> bool:
    """``name`` on one line of ``text``, not as part of a longer name."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def rendered(renderable: RenderableType, width: int = WIDTH) -> str:
    console = Console(width=width, file=io.StringIO(), highlight=False)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]  # the StringIO above
    assert max(len(line) for line in text.splitlines()) <= width, text
    return text


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if not sub.hidden:
            yield from commands(sub, (*path, name))


ALL_COMMANDS = list(commands(typer.main.get_command(app)))


@pytest.mark.parametrize(("path", "command"), ALL_COMMANDS, ids=[" ".join(path) or "mirror" for path, _ in ALL_COMMANDS])
def test_help_at_80_columns_keeps_option_and_environment_variable_names_whole(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: tuple[str, ...], command: Any) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    ran = run_main(monkeypatch, capsys, *path, "--help")
    assert ran.code == 0, ran.err
    text = ran.out
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    assert re.search(r"\w…\s*│?\s*$", text, re.MULTILINE) is None, text  # a cell Rich cut short
    names: set[str] = set()
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        names.update(name for name in (*param.opts, *param.secondary_opts) if name.startswith("--"))
        if isinstance(param.envvar, str):
            names.add(param.envvar)
    missing = sorted(name for name in names if not whole(name, text))
    assert not missing, f"cut or wrapped in `mirror {' '.join(path)} --help`: {missing}\n{text}"


CONVERSATIONS = [
    {"id": "support-42", "events": 25, "last_seq": 12, "branches": ["main", "rc-3f9a2c1b0d4e"], "updated_at": time.time()},
    {"id": LONGEST_ID, "events": 123456, "last_seq": 100000,
     "branches": ["main", "an-experiment-with-a-rather-long-branch-name", "rc-0123456789ab"], "updated_at": time.time()},
]


@pytest.mark.parametrize("conversations", [CONVERSATIONS[:1], CONVERSATIONS], ids=["short ids", "a 64-character id"])
def test_status_at_80_columns_keeps_ids_and_branch_names_whole(conversations: list[dict[str, Any]]) -> None:
    text = rendered(status_table(Console(width=WIDTH), "default", conversations))
    for item in conversations:
        for name in (item["id"], *item["branches"]):
            assert whole(name, text), f"{name} cut or wrapped:\n{text}"
        assert re.search(rf"\b{item['events']}\b", text) and re.search(rf"\b{item['last_seq']}\b", text)
    assert "(all" in text and "branches)" in text and "(main)" in text  # which branches the counts are of


def test_status_is_a_table_when_it_fits_and_says_what_it_left_out() -> None:
    text = rendered(status_table(Console(width=WIDTH), "default", CONVERSATIONS[:1]))
    assert "┃ conversation" in text and "updated" in text and "left out" not in text
    narrow = rendered(status_table(Console(width=60), "default", CONVERSATIONS[:1]), width=60)
    assert "┃ conversation" in narrow and "updated: left out to fit 60 columns" in narrow


BELIEFS: list[dict[str, Any]] = [{"belief_id": f"b-{index:016x}", "kind": "preference", "memory_type": "operational", "about": "the user",
            "statement": "I have a severe peanut allergy. Even a trace of peanut can put me in hospital.",
            "confidence": 0.9, "strength": 0.987, "recall_count": 3, "embedding_dimensions": 384} for index in range(3)]
EDGES = [{"src": "peanut allergy", "relation": "causes", "dst": "a stay in hospital", "origin": "extracted",
          "confidence": 0.8, "contradicted_by": [["peanut allergy", "prevents", "a stay in hospital"]]}]
REVIEWS = [{"review_id": "rv-0123456789abcdef", "seq": 12, "belief_id": "b-0123456789abcdef",
            "statement": "I never eat peanuts.", "opposed_id": "b-fedcba9876543210",
            "opposed_statement": "I eat peanuts every day, usually in a satay sauce."}]
RECALLED = [{"belief_id": "b-0123456789abcdef", "kind": "preference", "statement": "I have a severe peanut allergy.",
             "bm25_rank": 1, "vector_rank": None, "fused": 0.0323, "strength": 0.99, "score": 0.0321}]


def test_memory_tables_at_80_columns_keep_ids_whole() -> None:
    console = Console(width=WIDTH)
    text = rendered(memory._beliefs_table(console, BELIEFS))
    assert all(whole(belief["belief_id"], text) for belief in BELIEFS), text
    assert "statement" in text and "left out to fit 80 columns" in text  # the figures a reader can spare
    text = rendered(memory._reviews_table(console, REVIEWS))
    for name in ("rv-0123456789abcdef", "b-0123456789abcdef", "b-fedcba9876543210"):
        assert whole(name, text), f"{name}:\n{text}"
    text = rendered(memory._recall_table(console, RECALLED))
    assert whole("b-0123456789abcdef", text) and "0.0321" in text
    text = rendered(memory._edges_table(console, EDGES))
    assert whole("causes", text) and "contradicted by" in text


def test_a_table_too_wide_for_any_column_set_becomes_blocks_of_lines() -> None:
    fields = (Field("first", "id"), Field("second", "id"), Field("note", drop=1))
    rows = [["a" * 40, "b" * 40, "some words"]]
    text = rendered(fitted(Console(width=WIDTH), "wide", fields, rows))
    assert "a" * 40 + "\n" in text and "  second: " + "b" * 40 in text and "  note: some words" in text
