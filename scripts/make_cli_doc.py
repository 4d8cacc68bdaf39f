"""Write docs/cli.md from the CLI itself: every command, its examples and every option, by help panel.

The page is generated, never edited: tests/test_cli_doc.py regenerates it and fails when the
committed page differs, so the reference cannot drift from `--help`.

Usage:
    python scripts/make_cli_doc.py              # rewrite docs/cli.md
    python scripts/make_cli_doc.py --check      # exit 1 if docs/cli.md is stale
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import typer.main

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "cli.md"
HEADER = """# Command reference

Generated from the CLI by `python scripts/make_cli_doc.py`; do not edit by hand
(tests/test_cli_doc.py fails when this page and `packcli COMMAND --help` disagree).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    """The whole page as Markdown."""
    from packcli.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("packcli", [], resilient_parsing=True)
    out = [HEADER, inspect.cleandoc(group.help or ""), ""]
    codes = getattr(sys.modules["packcli.cli.app"], "EXIT_CODES", "")  # the text every command's --help ends with
    if codes:
        out += [codes, ""]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        text = inspect.cleandoc(command.help or "")
        summary, _, examples = text.partition("Examples:")
        out += [f"## `packcli {name}`", "", summary.strip(), "", "```console",
                f"$ {' '.join(command.collect_usage_pieces(sub)).join(['packcli ' + name + ' ', ''])}", "```", ""]
        if examples.strip():
            out += ["Examples:", "", "```bash", *[line.strip() for line in examples.strip().splitlines() if line.strip()],
                    "```", ""]
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in command.get_params(sub):
            record = param.get_help_record(sub)
            if record is None:
                continue
            panel = getattr(param, "rich_help_panel", None) or (
                "Arguments" if param.param_type_name == "argument" else "Options")
            panels.setdefault(panel, []).append(record)
        for panel, rows in panels.items():
            out += [f"**{panel}**", "", "| option | meaning |", "|---|---|"]
            out += [f"| `{_cell(opts)}` | {_cell(help_text)} |" for opts, help_text in rows]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale; write nothing")
    parser.add_argument("--out", type=Path, default=DOC)
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        stale = not args.out.is_file() or args.out.read_text(encoding="utf-8") != page
        print(f"{args.out}: {'stale: run python scripts/make_cli_doc.py' if stale else 'up to date'}")
        return 1 if stale else 0
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
