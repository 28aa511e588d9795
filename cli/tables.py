"""Tables that fit the terminal without cutting an id.

A Rich table squeezed into 80 columns wraps or truncates every column alike, and an id, a branch
name or a timestamp broken over two lines (or ending in "…") can no longer be copied. Here each
column says what it holds: an ``id`` is never wrapped (each line of a cell stays whole: a cell may
list several ids, one a line), ``text`` wraps at spaces but keeps :data:`READABLE_TEXT` columns,
a ``number`` is short. When the table's
narrowest rendering (ids whole, text at its longest word) does not fit, the columns least worth
their room are left out, one at a time, in their ``drop`` order, and a caption says which; when
even the essential ones do not fit, each row becomes a block of ``name: value`` lines instead.
Identifiers are at most 64 characters (``MAX_IDENTIFIER_LENGTH``), so a line of their own fits
an 80-column terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Field", "fitted"]

UNBOUNDED = 100_000
READABLE_TEXT = 24
"""The narrowest a text column gets (if it has that much to say): narrower, a statement is a tall thin strip."""


@dataclass(frozen=True)
class Field:
    header: str
    kind: Literal["id", "text", "number"] = "text"
    drop: int = 0
    """When the table does not fit, fields with a higher ``drop`` are left out first; 0: never."""


def fitted(console: Console, title: str, fields: Sequence[Field], rows: Sequence[Sequence[str]]) -> RenderableType:
    """``rows`` under ``fields``: a table as wide as ``console`` allows with every id whole, or blocks."""
    shown = list(range(len(fields)))
    while True:
        table = _table(title, [fields[index] for index in shown], [[row[index] for index in shown] for row in rows])
        left_out = [fields[index].header for index in range(len(fields)) if index not in shown]
        if left_out:
            table.caption = f"{', '.join(left_out)}: left out to fit {console.width} columns"
        if _narrowest(console, table) <= console.width:
            return table
        droppable = [index for index in shown if fields[index].drop]
        if not droppable:
            return _blocks(title, fields, rows)
        shown.remove(max(droppable, key=lambda index: fields[index].drop))


def _narrowest(console: Console, table: Table) -> int:
    """The table's narrowest rendering, measured without a limit (a measure within the console's width is
    clamped to it, and would say that any table fits)."""
    return Measurement.get(console, console.options.update(max_width=UNBOUNDED), table).minimum


def _table(title: str, fields: Sequence[Field], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    for position, field in enumerate(fields):
        longest = max((len(line) for row in rows for line in row[position].splitlines()), default=0)
        if field.kind == "id":  # whole: as wide as its longest line, header included
            table.add_column(field.header, no_wrap=True, min_width=max(longest, len(field.header)))
        elif field.kind == "number":  # the header may wrap ("events (all branches)"), a value never
            table.add_column(field.header, justify="right", min_width=longest)
        else:  # wraps, but keeps room to read (and its header's longest word whole)
            readable = max(min(longest, READABLE_TEXT), *(len(word) for word in field.header.split()))
            table.add_column(field.header, overflow="fold", min_width=readable)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # plain text: a statement's [brackets] are not markup
    return table


def _blocks(title: str, fields: Sequence[Field], rows: Sequence[Sequence[str]]) -> Group:
    """Each row as its first value on a line of its own, then ``name: value`` lines (ids stay words)."""
    lines: list[RenderableType] = [Text(title, style="italic")]
    for row in rows:
        lines.append(Text(row[0].replace("\n", ", "), style="bold"))
        lines.extend(Text.assemble((f"  {field.header}: ", "dim"), value.replace("\n", ", "))
                     for field, value in zip(fields[1:], row[1:], strict=True) if value)
    return Group(*lines)
