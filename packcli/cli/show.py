"""``packcli show``: an example's tokens with the supervised ones highlighted, its pack's seams, its seam-table row."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.cli.options import INPUTS, OUTPUT, Json
from packcli.show_page import render_html

SELECT = "Which example"
# Two shades per kind, alternating token by token so boundaries show; green where the token carries loss.
# Greys that differ on a 256-colour terminal are one colour on an 8/16-colour one, so there the
# alternation is underlined / not underlined instead.
SHADES = {
    "256": {False: ("on grey23", "on grey35"), True: ("black on green3", "black on dark_sea_green2")},
    "standard": {False: ("default", "underline"), True: ("black on green", "black on green underline")},
}


def show(
    directory: Annotated[Path, typer.Argument(help="The artifact directory (pack's --out).")],
    example: Annotated[Optional[int], typer.Option("--example", help="An example ID (examples.parquet).",
                                                   show_default=False, rich_help_panel=SELECT)] = None,
    source: Annotated[Optional[str], typer.Option(
        "--source", help="A record by FILE:LINE (FILE may be the end of its path).", show_default=False,
        rich_help_panel=SELECT)] = None,
    pack: Annotated[Optional[int], typer.Option("--pack", help="Every example of pack N (0-based, in shard order).",
                                                show_default=False, rich_help_panel=SELECT)] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", "-t", help="Tokenizer (default: as pinned).",
                                                     show_default=False, rich_help_panel=INPUTS)] = None,
    source_root: Annotated[Optional[Path], typer.Option(help="Resolve the pinned tokenizer's path from here.",
                                                        show_default=False, rich_help_panel=INPUTS)] = None,
    html_out: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write one self-contained HTML page (to share in a review).", show_default=False,
        rich_help_panel=OUTPUT)] = None,
    json_out: Json = False,
) -> None:
    """Show what is trained on: token boundaries, supervised tokens (green), the pack's seams, the seam-table row.

    Examples:

      packcli show packed/ --source chat.jsonl:42

      packcli show packed/ --pack 0 --html pack0.html

      packcli show packed/ --example 4249980222054810990 --json
    """
    from packcli.checks import output_file_problems, raise_all
    from packcli.cli import console
    from packcli.owned import write_replacing
    from packcli.show import show_artifact

    raise_all(output_file_problems("--html", html_out))
    shown = show_artifact(directory, example_id=example, source=source, pack=pack, tokenizer=tokenizer,
                          source_root=source_root)  # a PackcliError is the command's one line (`cli.app.guarded`)
    if html_out is not None:
        page = render_html(shown)
        write_replacing(html_out, lambda partial: partial.write_text(page, encoding="utf-8"))
        console.err.print(f"wrote {html_out}", highlight=False)
    if json_out:
        console.print_json(shown.to_dict())
    else:
        render_terminal(shown)


def render_terminal(shown) -> None:  # noqa: ANN001 - packcli.show.Shown
    from rich.table import Table
    from rich.text import Text

    from packcli.cli import console

    console.out.print(f"[bold]{shown.directory}[/]  template {shown.template}  loss {shown.loss_policy}",
                      highlight=False, soft_wrap=True)
    shades = token_shades(console.out.color_system)
    for example in shown.examples:
        row = example.row
        chunk = f"  {example.chunk_label}" if example.chunk_label else ""
        console.out.rule(f"example {row['example_id']}  {row['source']}:{row['line']}  {row['status']}{chunk}",
                         align="left")
        if example.tokens:
            text = Text()
            for k, token in enumerate(example.tokens):
                piece = token.text.replace("\n", "↵\n").replace("\t", "→") or "·"
                text.append(piece, style=shades[token.supervised][k % 2])
            console.out.print(text, soft_wrap=True)
            supervised = sum(t.supervised for t in example.tokens)
            console.out.print(f"{len(example.tokens):,} tokens, {supervised:,} supervised (green); a shade per token",
                              highlight=False)
        else:
            console.out.print(f"not in a pack ({row['status']}{': ' + row['reason'] if row['reason'] else ''})",
                              highlight=False, soft_wrap=True)
        if not shown.whole_pack:  # one example: its whole row; a pack's rows are its seam table, below
            table = Table(title="seam-table row", show_header=False, title_justify="left")
            for key, value in row.items():
                table.add_row(key, str(value))
            console.out.print(table)
    if shown.pack is not None:
        chosen = set() if shown.whole_pack else {e.row["example_id"] for e in shown.examples}
        table = Table(title=f"pack {shown.pack.index} ({shown.pack.shard} row {shown.pack.row}, "
                            f"{shown.pack.num_tokens:,} tokens)", title_justify="left")
        for col in ("offset", "length", "supervised", "example_id", "source:line"):
            table.add_column(col, justify="right" if col in ("offset", "length", "supervised") else "left",
                             overflow="fold")
        for seam in shown.pack.seams:
            where = f"{seam['source']}:{seam['line']}" + (f" chunk {seam['chunk']}" if seam["chunk"] else "")
            table.add_row(str(seam["offset"]), str(seam["length"]), str(seam["supervised"]), str(seam["example_id"]),
                          where, style="bold" if seam["example_id"] in chosen else None)
        console.out.print(table)


def token_shades(color_system: str | None) -> dict[bool, tuple[str, str]]:
    """The alternating styles for this terminal: greys where it has 256 colours or more, underlining
    where it has 8 or 16 (its greys would be one colour)."""
    return SHADES["256" if color_system in ("256", "truecolor") else "standard"]
