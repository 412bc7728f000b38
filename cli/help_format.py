"""Help pages a person reads at 100 columns: options in panels, two columns, text as written.

Typer's own layout gives every option five columns (long and short names, their negative
forms, the type with its range), and Rich's table shrinks the description column to the
width of the widest of them: about 25 characters for `submit`, whose help ran to 166 lines.
Here an option is one column (names, value and range on one line) and its description the
rest of the width; descriptions are printed as text, never as Rich markup, so
`[tool.speedwatch]` stays in the line, and single line breaks of a docstring are joined.
Panels come from each option's `rich_help_panel`, as in Typer.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand

OPTIONS_PANEL = "Options"
# The option column never takes more than this many characters; its lines wrap beyond.
NAME_COLUMN_MAX = 34
# Typer's type names (`<list[str]>`) as the value a user types.
_VALUE_NAMES = {"str": "TEXT", "list[str]": "TEXT", "int": "N", "int range": "N",
                "float": "NUMBER", "float range": "NUMBER", "path": "PATH", "bool": ""}


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs with single line breaks joined (only the part before a
    form feed, as click does for help)."""
    text = inspect.cleandoc(text).split("\f")[0]
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def _value(param: Any, ctx: Any) -> str:
    """What follows the option's name: its value and bounds (`N (x>=1)`), none for a flag."""
    if getattr(param, "is_flag", False):
        return ""
    shown = param.metavar
    if shown is None:
        raw = re.sub(r"^<(.*)>$", r"\1", str(param.display_type_rich(ctx) or ""))
        shown = _VALUE_NAMES.get(raw, raw.upper())
    bounds = param._get_number_range_help_str() if hasattr(
        param, "_get_number_range_help_str") else None
    value = shown + (f" ({bounds})" if bounds else "")
    if getattr(param, "multiple", False):
        value += " ..."
    return value


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _names(param: Any, ctx: Any) -> Text:
    if _is_argument(param):
        return Text(str(param.name).upper(), style="bold cyan")
    names = ", ".join(param.opts)
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    line = Text(names, style="bold cyan")
    value = _value(param, ctx)
    if value:
        line.append(" " + value, style="yellow")
    return line


def _description(param: Any) -> Text:
    text = Text(_paragraphs(getattr(param, "help", None) or ""))
    extras = []
    envvar = getattr(param, "envvar", None)
    if envvar:
        extras.append(f"env: {envvar if isinstance(envvar, str) else ', '.join(envvar)}")
    show_default = getattr(param, "show_default", None)
    default = param.default
    is_flag = getattr(param, "is_flag", False)
    if (show_default is not False and default not in (None, "", [], ())
            and not callable(default) and not (is_flag and default is False)):
        shown = default
        if is_flag and param.secondary_opts:
            shown = param.opts[0] if default else param.secondary_opts[0]
        extras.append(f"default: {shown}")
    if param.required:
        extras.append("required")
    if extras:
        text.append(("  " if text.plain else "") + "[" + "; ".join(extras) + "]", style="dim")
    return text


def print_help(command: Any, ctx: Any) -> None:
    console = Console(highlight=False, soft_wrap=False)
    console.print(Padding(Text(command.get_usage(ctx), style="bold"), (1, 1, 1, 1)))
    if command.help:
        console.print(Padding(Text(_paragraphs(command.help)), (0, 1, 1, 1)))
    panels: dict[str, list[Any]] = {}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        panel = getattr(param, "rich_help_panel", None) or (
            "Arguments" if _is_argument(param) else OPTIONS_PANEL)
        panels.setdefault(panel, []).append(param)
    # the unnamed panel (help and the command's own options) last, as a reference
    order = [p for p in panels if p != OPTIONS_PANEL] + (
        [OPTIONS_PANEL] if OPTIONS_PANEL in panels else [])
    for panel in order:
        table = Table(show_header=False, box=None, expand=True, padding=(0, 1), pad_edge=False)
        width = min(NAME_COLUMN_MAX,
                    max(len(_names(p, ctx).plain) for p in panels[panel]))
        table.add_column(no_wrap=False, min_width=width, max_width=width)
        table.add_column(ratio=1)
        for param in panels[panel]:
            table.add_row(_names(param, ctx), _description(param))
        console.print(Panel(table, title=panel, title_align="left", border_style="dim"))
    if command.epilog:
        console.print(Padding(Text(_paragraphs(command.epilog)), (1, 1, 0, 1)))


class Command(TyperCommand):
    """A Typer command whose --help is laid out by print_help."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        print_help(self, ctx)
