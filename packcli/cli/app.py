"""The typer app: one command per module, and the one place an error becomes a message and an exit code.

Exit codes (`EXIT_CODES`, also at the end of every command's ``--help``):

    0    success
    1    the run failed on the data or the machine: a verify violation, an unmet budget, a bad record
         under ``--on-error fail``, a worker that died, a disk that filled up or refused a write mid-run
    2    a usage error: a bad option value, a missing input, a path that cannot be used (no such folder,
         no permission, read-only, a name too long, a file where a folder must be), an --out packcli may
         not replace, an --out another run is writing; found before any work, nothing written
    3    an internal error: a bug in packcli (``PACKCLI_DEBUG=1`` shows the traceback)
    130  interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: one line says what was kept

Messages are printed with rich markup off, so ``pip install 'packcli[torch]'`` keeps its brackets.
"""

from __future__ import annotations

import atexit
import errno
import functools
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import typer
from rich.text import Text

from packcli.cli import console
from packcli.cli.help_page import HelpCommand, HelpGroup
from packcli.cli.options import as_flags
from packcli.errors import PackcliError, refusal, unusable_path
from packcli.interrupts import raise_on_signals

EXIT_CODES = ("Exit codes: 0 success; 1 a violation, an unmet budget, a bad record under --on-error fail, a "
              "dead worker, or a disk that filled up or refused a write mid-run; 2 a usage error, such as a path "
              "that cannot be used or an --out packcli did not write (nothing ran, nothing written); 3 an internal "
              "error (a bug: PACKCLI_DEBUG=1 shows the traceback); 130 interrupted by Ctrl-C (SIGINT), 143 by "
              "SIGTERM (one line says what was kept).")
# What an interrupted command leaves, when the library has not said more (`Interrupted.kept`).
NOTHING_KEPT = {"pack": "no artifact written", "verify": "the artifact is unchanged; nothing was written",
                "stats": "nothing was written", "show": "nothing was written"}
INTERNAL_ERROR = 3


class _OneLineErrors(HelpGroup):
    """typer's group, with click's usage errors ("'abc' is not a valid integer", "No such option")
    printed like every other error: one line and a hint, exit 2, instead of a multi-line panel."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:  # click's ClickException, as typer ships it
            ctx = getattr(exc, "ctx", None)
            if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:  # bare `packcli`: the help
                typer.echo(ctx.get_help())
            else:
                _print_error(exc.format_message(), f"see `{ctx.command_path if ctx else 'packcli'} --help`")
            sys.exit(getattr(exc, "exit_code", 2))
        except typer.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C before or after a command ran
                _print_interrupt(signal.SIGINT, "nothing was written")
                sys.exit(128 + signal.SIGINT)
            _print_error("aborted")
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


app = typer.Typer(
    name="packcli", no_args_is_help=True, add_completion=False, rich_markup_mode="rich", cls=_OneLineErrors,
    help="Pack chat data into leak-free training buffers, and prove it.", epilog=EXIT_CODES,
)


def _print_error(message: str, hint: str | None = None) -> None:
    """``error: message`` and ``  hint: hint`` on stderr; the texts are never read as rich markup."""
    console.err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    if hint:
        console.err.print(Text(f"  hint: {hint}"), highlight=False, soft_wrap=True)


def _print_interrupt(signum: int, kept: str) -> None:
    console.err.print(Text(f"interrupted by {signal.Signals(signum).name}: {kept}"), highlight=False, soft_wrap=True)


def fail(exc: PackcliError) -> NoReturn:
    """Print a user error on one line (and its hint on the next) and exit with its code; the parameters
    the library's message names are printed as the flags that set them (`packcli.cli.options.as_flags`)."""
    if os.environ.get("PACKCLI_DEBUG"):
        raise exc
    _print_error(as_flags(exc.message), as_flags(exc.hint))
    raise typer.Exit(exc.exit_code)


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command so that nothing escapes as a traceback: a `PackcliError` is its one-line message
    and exit code; an OSError the system raised mid-run (disk full, no permission) is exit 1 with the
    path; SIGINT and SIGTERM are one line saying what was kept, exit 130 and 143 (`packcli.interrupts`);
    anything else is a bug: one line that says so, exit 3. ``PACKCLI_DEBUG=1`` re-raises."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            with raise_on_signals():
                return command(*args, **kwargs)
        except KeyboardInterrupt as exc:  # `Interrupted`, or Python's own for SIGINT outside our handler
            signum = getattr(exc, "signum", signal.SIGINT)
            _print_interrupt(signum, getattr(exc, "kept", None) or NOTHING_KEPT.get(command.__name__, "stopped"))
            raise typer.Exit(128 + signum) from None
        except PackcliError as exc:
            fail(exc)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # typer's own exits and usage errors (exit 2) already carry their code
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # only a path the user gave can have a name that long
                fail(unusable_path(exc, "packcli " + command.__name__))
            known = refusal(exc, "packcli " + command.__name__)
            if known is None or os.environ.get("PACKCLI_DEBUG"):
                _internal_error(exc)
            fail(known)
        except Exception as exc:  # noqa: BLE001 - a bug: reported on one line, with the way to see more
            _internal_error(exc)

    return run


def _internal_error(exc: BaseException) -> NoReturn:
    if os.environ.get("PACKCLI_DEBUG"):
        raise exc
    _print_error(f"internal error: {type(exc).__name__}: {exc}",
                 "this is a bug in packcli, please report it; PACKCLI_DEBUG=1 shows the traceback")
    raise typer.Exit(INTERNAL_ERROR) from None


def _register() -> None:
    from packcli.cli import pack, show, stats, verify

    for command in (pack.pack, verify.verify, stats.stats, show.show):
        app.command(epilog=EXIT_CODES, cls=HelpCommand)(guarded(command))


_register()


def main() -> None:
    # The interpreter's last garbage collection at exit walks everything still alive (a loaded tokenizer,
    # numba's dispatchers). Frozen objects are skipped by it and freed by the OS instead; nothing is
    # lost, as every file packcli writes is closed before the command returns.
    atexit.register(gc.freeze)
    app()
