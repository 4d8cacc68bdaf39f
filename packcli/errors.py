"""User-facing errors.

A `PackcliError` is a problem with the user's input or configuration: the CLI prints its message and
hint on one or two lines and exits with its ``exit_code``. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import errno

# The machine said no while packcli wrote or read: not a bug, and not the user's option either.
SYSTEM_REFUSALS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EFBIG: "file too large for this filesystem or `ulimit -f`", errno.EROFS: "read-only filesystem",
                   errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}


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


class WorkerError(PackcliError):
    """A worker process died mid-task (killed, or out of memory); nothing was written."""

    exit_code = 1


class SystemRefusal(PackcliError):
    """The system refused to write (disk full, quota, file size limit, permission); nothing was published."""

    exit_code = 1


def refusal(exc: BaseException, where: str) -> SystemRefusal | None:
    """A `SystemRefusal` naming ``where`` for an OSError in `SYSTEM_REFUSALS`, else None (anything else is a bug)."""
    if not isinstance(exc, OSError) or exc.errno not in SYSTEM_REFUSALS:
        return None
    path = f" ({exc.filename})" if exc.filename else ""
    return SystemRefusal(f"{where}: {SYSTEM_REFUSALS[exc.errno]}{path}; nothing was written there",
                         "free space (or raise the limit) where it and its work folder live, and run again: "
                         "finished units are reused")


class ContractError(PackcliError):
    """An artifact whose contract version, manifest or pinned inputs cannot be trusted."""

    exit_code = 1
