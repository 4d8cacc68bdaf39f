"""The typer app: one command per module, and the one place a user error becomes a message and an exit code.

Exit codes: 0 success; 1 a violation, a failed budget or a bad record under ``--on-error fail``;
2 a usage error or missing input. Set ``PACKCLI_DEBUG=1`` to see tracebacks of user errors.
"""

from __future__ import annotations

import atexit
import gc
import os
from typing import NoReturn

import typer

from packcli.cli import console
from packcli.errors import PackcliError

app = typer.Typer(
    name="packcli", no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    help="Pack chat data into leak-free training buffers, and prove it.",
)


def fail(exc: PackcliError) -> NoReturn:
    """Print a user error on one line (and its hint on the next) and exit with its code."""
    if os.environ.get("PACKCLI_DEBUG"):
        raise exc
    console.err.print(f"[bold red]error:[/] {exc.message}", highlight=False, markup=True, soft_wrap=True)
    if exc.hint:
        console.err.print(f"  hint: {exc.hint}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _register() -> None:
    from packcli.cli import pack, show, stats, verify

    app.command()(pack.pack)
    app.command()(verify.verify)
    app.command()(stats.stats)
    app.command()(show.show)


_register()


def main() -> None:
    # The interpreter's last garbage collection at exit walks everything still alive (a loaded tokenizer,
    # numba's dispatchers). Frozen objects are skipped by it and freed by the OS instead; nothing is
    # lost, as every file packcli writes is closed before the command returns.
    atexit.register(gc.freeze)
    app()
