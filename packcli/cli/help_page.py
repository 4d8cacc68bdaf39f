"""``--help`` pages that keep every cell whole at any width, drawn from what the options declare.

typer's rich help gives each option six fixed columns (long and short names, negative forms, a type,
the help) and cuts what does not fit with an ellipsis: at 80 columns option names, choices and the
template's help lost their ends. Here an option is two cells. Its names and value (``--capacity, -c
<int>``; a flag has no value, and its ``--no-`` form goes on a second line when the pair is long) never
wrap, and the column is as wide as the widest of them; the help wraps at words in the rest, and a
choice's values are listed there (``One of: ...``), so each stays whole. Panels, their order and every
text are the ones the options declare (``rich_help_panel``), as typer groups them.

Only public attributes of typer's parameters are read (``opts``, ``secondary_opts``, ``is_flag``,
``get_help_record``, ``rich_help_panel``), never typer's private modules.
"""

from __future__ import annotations

import inspect
import io
import re
import shutil
import sys
from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

ARGUMENTS, OPTIONS, COMMANDS = "Arguments", "Options", "Commands"
PAIR_ON_ONE_LINE = 24  # a flag and its --no- form longer than this go on two lines
_CHOICES = re.compile(r"^<([^<>]*\|[^<>]*)>$")


def help_width() -> int:
    """The terminal's width (``COLUMNS`` first, as rich and click read it; 80 when unknown)."""
    return shutil.get_terminal_size((80, 24)).columns


def option_cells(param: Any, ctx: Any) -> tuple[Text, Text] | None:
    """(names and value, help) of one parameter, or None for a hidden one."""
    record = param.get_help_record(ctx)
    if record is None or getattr(param, "hidden", False):
        return None
    first, help_text = record
    if param.param_type_name == "argument":
        names = first.split(" ", 1)[0].upper()
        value = ""
    else:
        names = ", ".join(param.opts)
        value = "" if getattr(param, "is_flag", False) else first.rsplit(" ", 1)[-1]
        if param.secondary_opts:
            no = ", ".join(param.secondary_opts)
            names = f"{names} / {no}" if len(names) + len(no) + 3 <= PAIR_ON_ONE_LINE else f"{names} /\n{no}"
    # click appends "  [default: 4096]", "  [required]" to the help: plain text, not rich markup
    text, sep, extras = help_text.partition("  [")
    described = Text.from_markup(text)
    choices = _CHOICES.match(value)
    if choices:
        value = "<choice>"
        described.rstrip()
        described.append(("" if described.plain.endswith(".") or not described.plain else ".")
                         + f" One of: {', '.join(choices.group(1).split('|'))}.")
    if sep:
        described.append(" [" + extras, style="dim")
    cell = Text(names, style="bold cyan")
    if value:
        cell.append(" " + value, style="yellow")
    return cell, described


def _panel(title: str, rows: list[tuple[Text, Text]]) -> Panel:
    table = Table.grid(padding=(0, 2), expand=True)
    table.add_column(no_wrap=True, min_width=max(len(line) for cell, _ in rows for line in cell.plain.split("\n")))
    table.add_column(ratio=1, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return Panel(table, title=title, title_align="left", border_style="dim")


def _text_part(text: str) -> list[Any]:
    """A docstring: paragraphs wrapped at words; after ``Examples:``, each line as written (indented)."""
    out: list[Any] = []
    body, _, examples = inspect.cleandoc(text or "").partition("Examples:")
    for paragraph in body.strip().split("\n\n"):
        if paragraph.strip():
            out.append(Padding(Text.from_markup(" ".join(paragraph.split())), (0, 0, 1, 1)))
    lines = [line.strip() for line in examples.strip().splitlines() if line.strip()]
    if lines:
        out.append(Padding(Text("Examples:", style="bold"), (0, 0, 0, 1)))
        out.append(Padding(Text("\n".join(lines)), (0, 0, 1, 3)))
    return out


def render_help(command: Any, ctx: Any, width: int | None = None) -> str:
    """The help page of a command or the group, as text (with colours where stdout is a terminal)."""
    parts: list[Any] = [Padding(Text(f"Usage: {ctx.command_path} {' '.join(command.collect_usage_pieces(ctx))}",
                                     style="bold"), (1, 0, 1, 1))]
    parts += _text_part(command.help or "")
    panels: dict[str, list[tuple[Text, Text]]] = {ARGUMENTS: [], OPTIONS: []}
    for param in command.get_params(ctx):
        cells = option_cells(param, ctx)
        if cells is not None:
            default = ARGUMENTS if param.param_type_name == "argument" else OPTIONS
            panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(cells)
    if isinstance(command, TyperGroup):
        panels[COMMANDS] = [(Text(name, style="bold cyan"), Text(sub.get_short_help_str(limit=10_000)))
                            for name in command.list_commands(ctx)
                            if (sub := command.get_command(ctx, name)) is not None and not sub.hidden]
    parts += [_panel(title, rows) for title, rows in panels.items() if rows]
    if command.epilog:
        parts.append(Padding(Text(" ".join(command.epilog.split())), (1, 0, 0, 1)))
    buffer = io.StringIO()
    Console(file=buffer, width=width or help_width(), force_terminal=sys.stdout.isatty(),
            highlight=False).print(Group(*parts))
    return buffer.getvalue()


class HelpCommand(TyperCommand):
    """A typer command whose ``--help`` is `render_help`'s."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(self, ctx))


class HelpGroup(TyperGroup):
    """A typer group whose ``--help`` is `render_help`'s."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(self, ctx))
