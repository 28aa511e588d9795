"""``--help`` that fits an 80-column terminal: option and environment-variable names stay whole.

Typer lays an options panel out as six columns (required mark, long and short names, negative
names, type, help); on 80 columns the type column takes ~20 and leaves the help ~18, so
``[env var: MIRROR_PASSIVATE_AFTER_S]`` ends as ``MIRROR_PASSIVATE_…`` and cannot be copied.
Typer has no setting for it, so :func:`install` replaces the one function that draws those
panels (``typer.rich_utils._print_options_panel``, same signature) with :func:`options_panel`:
two columns, the names (never wrapped) and everything else — the type and range on the first
line, then Typer's own help text, environment variable and default, which now have the width
they need. Everything else of Typer's help (usage, text, commands) is unchanged.

``mirror``'s entry point installs it when help is asked for (``--help``, or no arguments): Typer's
rich help module costs ~0.1 s to import, which the other commands need not pay. Typer's
internals are used by name; with a Typer that lacks them :func:`install` leaves Typer's panels
alone, and tests/unit/test_cli_width.py, which renders every command's help at 80 columns
through that entry point, says so.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

__all__ = ["install", "options_panel"]


def install() -> bool:
    """Draw Typer's options panels with :func:`options_panel`; False when this Typer cannot."""
    from typer import core, rich_utils

    needed = (hasattr(rich_utils, "_print_options_panel") and hasattr(rich_utils, "_get_parameter_help")
              and hasattr(core.TyperOption, "display_type_rich") and hasattr(core.TyperOption, "_get_number_range_help_str"))
    if needed:
        rich_utils._print_options_panel = options_panel
    return needed


def options_panel(*, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Console) -> None:
    """One panel of options or arguments: names | type, help, env var, default."""
    from typer import rich_utils
    from typer.core import TyperArgument

    if not params:
        return
    table = Table(show_header=False, box=None, padding=(0, 1), pad_edge=False, expand=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for param in params:
        is_argument = isinstance(param, TyperArgument)
        names = Text("* " if param.required else "  ", style=rich_utils.STYLE_REQUIRED_SHORT)
        if is_argument:
            names.append(param.display_name_raw + ("..." if param.metavar is None and param.nargs != 1 else ""),
                         style=rich_utils.STYLE_OPTION)
        else:
            names.append(", ".join(param.opts), style=rich_utils.STYLE_OPTION)
            if param.secondary_opts:
                names.append(" / ")
                names.append(", ".join(param.secondary_opts), style=rich_utils.STYLE_NEGATIVE_OPTION)
        kind = Text(param.display_type_rich(ctx=ctx) or "", style=rich_utils.STYLE_TYPES)
        if (ranged := param._get_number_range_help_str()) is not None:
            kind.append(f" {ranged}", style=rich_utils.STYLE_TYPES_SEPARATOR)
        help_lines: list[RenderableType] = [kind] if kind.plain else []
        help_lines.append(rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode))
        table.add_row(names, Group(*help_lines))
    console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL))
