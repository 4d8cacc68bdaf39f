"""``packcli show``: an example's tokens with the supervised ones highlighted, its pack's seams, its seam-table row."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from packcli.cli.options import OUTPUT, ArtifactDir, Json, ShowSourceRoot, ShowTokenizer
from packcli.view_page import render_html

SELECT = "Which example"


def show(
    directory: ArtifactDir,
    example: Annotated[Optional[int], typer.Option("--example", help="An example ID (examples.parquet).",
                                                   show_default=False, rich_help_panel=SELECT)] = None,
    source: Annotated[Optional[str], typer.Option(
        "--source", help="A record by FILE:LINE (FILE may be the end of its path).", show_default=False,
        rich_help_panel=SELECT)] = None,
    pack: Annotated[Optional[int], typer.Option("--pack", help="Every example of pack N (0-based, in shard order).",
                                                show_default=False, rich_help_panel=SELECT)] = None,
    tokenizer: ShowTokenizer = None,
    source_root: ShowSourceRoot = None,
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
    from packcli.cli.output import render_shown
    from packcli.owned import write_replacing
    from packcli.view import show_artifact

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
        render_shown(shown)
