"""``packcli show``: an example's tokens with the supervised ones highlighted, its pack's seams, its seam-table row."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.cli.options import INPUTS, OUTPUT, Json

SELECT = "Which example"
# Alternate two shades so token boundaries show; green where the token carries loss.
SHADES = {False: ("on grey23", "on grey35"), True: ("black on green3", "black on dark_sea_green2")}
CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
.text{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;line-height:1.7}
.t{border-right:1px solid #999}.u0{background:#eee}.u1{background:#ddd}.s0{background:#9be39b}.s1{background:#c8f2c8}
.nl{color:#999}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
tr.me{font-weight:bold;background:#ffffd0}"""


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
    from packcli.cli import console
    from packcli.cli.app import fail
    from packcli.errors import PackcliError
    from packcli.show import show_artifact

    try:
        shown = show_artifact(directory, example_id=example, source=source, pack=pack, tokenizer=tokenizer,
                              source_root=source_root)
    except PackcliError as exc:
        fail(exc)
    if html_out is not None:
        html_out.write_text(render_html(shown), encoding="utf-8")
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
    for example in shown.examples:
        row = example.row
        chunk = f"  {example.chunk_label}" if example.chunk_label else ""
        console.out.rule(f"example {row['example_id']}  {row['source']}:{row['line']}  {row['status']}{chunk}",
                         align="left")
        if example.tokens:
            text = Text()
            for k, token in enumerate(example.tokens):
                piece = token.text.replace("\n", "↵\n").replace("\t", "→") or "·"
                text.append(piece, style=SHADES[token.supervised][k % 2])
            console.out.print(text, soft_wrap=True)
            supervised = sum(t.supervised for t in example.tokens)
            console.out.print(f"{len(example.tokens):,} tokens, {supervised:,} supervised (green); a shade per token",
                              highlight=False)
        else:
            console.out.print(f"not in a pack ({row['status']}{': ' + row['reason'] if row['reason'] else ''})",
                              highlight=False, soft_wrap=True)
        table = Table(title="seam-table row", show_header=False, title_justify="left")
        for key, value in row.items():
            table.add_row(key, str(value))
        console.out.print(table)
    if shown.pack is not None:
        chosen = {e.row["example_id"] for e in shown.examples}
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


def render_html(shown) -> str:  # noqa: ANN001 - packcli.show.Shown
    """One page with no external resources: the tokens, the row, the pack's seams."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>packcli show {e(shown.directory)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>{e(shown.directory)}</h1><p>template {e(shown.template)}; loss {e(shown.loss_policy)}. "
             "Each token has its own shade; <span class='s0'>green</span> tokens carry loss.</p>"]
    for example in shown.examples:
        row = example.row
        chunk = f"; {e(example.chunk_label)}" if example.chunk_label else ""
        parts.append(f"<h2>example {row['example_id']} &mdash; {e(row['source'])}:{row['line']} "
                     f"({e(row['status'])}{chunk})</h2>")
        if not example.tokens:
            parts.append(f"<p>not in a pack: {e(row['reason'] or row['status'])}</p>")
        spans = []
        for k, token in enumerate(example.tokens):
            cls = ("s" if token.supervised else "u") + str(k % 2)
            piece = e(token.text).replace("\n", "<span class='nl'>↵</span>\n") or "·"
            spans.append(f"<span class='t {cls}' title='{token.id}'>{piece}</span>")
        parts.append(f"<div class='text'>{''.join(spans)}</div>")
        parts.append("<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in row.items())
                     + "</table>")
    if shown.pack is not None:
        chosen = {x.row["example_id"] for x in shown.examples}
        pack = shown.pack
        header = "".join(f"<th>{c}</th>" for c in ("offset", "length", "supervised", "example_id", "source:line"))
        parts.append(f"<h2>pack {pack.index} ({e(pack.shard)} row {pack.row}, {pack.num_tokens} tokens)</h2>"
                     f"<table><tr>{header}</tr>")
        for s in pack.seams:
            mark = " class='me'" if s["example_id"] in chosen else ""
            chunk = f" chunk {s['chunk']}" if s["chunk"] else ""
            parts.append(f"<tr{mark}><td>{s['offset']}</td><td>{s['length']}</td><td>{s['supervised']}</td>"
                         f"<td>{s['example_id']}</td><td>{e(s['source'])}:{s['line']}{chunk}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)
