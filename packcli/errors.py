"""User-facing errors.

A `PackcliError` is a problem with the user's input or configuration: the CLI prints its message and
hint on one or two lines and exits with its ``exit_code``. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations


class PackcliError(Exception):
    """A user error: what happened (with the value), and what to do about it."""

    exit_code: int = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)  # args rebuild the error when it crosses a process (Ray)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InputError(PackcliError):
    """A missing, unreadable or malformed input file, tokenizer or template."""


class RecordError(PackcliError):
    """One bad input record; under ``--on-error fail`` it stops the run."""

    exit_code = 1

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}", "fix the record, or use --on-error skip to reject it and go on")
        self.args = (source, line, reason)
        self.source = source
        self.line = line
        self.reason = reason


class BudgetError(PackcliError):
    """A density or displacement budget was not met; nothing was written."""

    exit_code = 1


class ContractError(PackcliError):
    """An artifact whose contract version, manifest or pinned inputs cannot be trusted."""

    exit_code = 1
