"""User-facing errors.

A `PackcliError` is a problem with the user's input or configuration: the CLI prints its message and
hint on one or two lines and exits with its ``exit_code``. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import errno
import signal

# The machine said no while packcli wrote or read, once the run had started: not a bug, and not the
# user's option either (the same errors on a path met before any work are `PathError`s, exit 2).
SYSTEM_REFUSALS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EFBIG: "file too large for this filesystem or `ulimit -f`", errno.EROFS: "read-only filesystem",
                   errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}
# What to do when a path the user gave cannot be used, by what the system said about it.
PATH_HINTS = {errno.ENOENT: "a folder on the way does not exist and cannot be made there (a virtual filesystem such "
                            "as /proc?); choose a path on a real, writable filesystem",
              errno.EACCES: "no permission there; choose a place you can write to",
              errno.EPERM: "not permitted there; choose a place you can write to",
              errno.EROFS: "that filesystem is read-only; choose a place you can write to",
              errno.ENAMETOOLONG: "a name on that path is too long for the filesystem; choose a shorter one",
              errno.ENOTDIR: "a part of that path is a file, not a folder",
              errno.EISDIR: "that is a folder; name a file"}
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


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
        super().__init__(f"{source}:{line}: {reason}",
                         "fix the record, or use `on_error='skip'` to reject it and go on")
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


class PathError(PackcliError):
    """A path the user gave cannot be used (no such folder, no permission, a read-only or virtual
    filesystem, a name too long, a file where a folder must be): found before any work, nothing left."""


def unusable_path(exc: OSError, what: str) -> PackcliError:
    """The error for ``exc``, met on a path the user gave (``what``: the option and its value) before any
    work started: a `PathError` naming the path, or, for a full disk, the `SystemRefusal` it always is."""
    if exc.errno in DISK_FULL:
        return refusal(exc, what)
    path = f" ({exc.filename})" if exc.filename and str(exc.filename) not in what else ""
    reason = (exc.strerror or type(exc).__name__).lower()
    return PathError(f"{what}: {reason}{path}", PATH_HINTS.get(exc.errno, "choose another path"))


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a command. ``kept`` says what is on disk now (the previous artifact,
    finished units to resume from); the CLI prints it on one line and exits 128 + the signal number."""

    def __init__(self, signum: int = signal.SIGINT, kept: str | None = None) -> None:
        super().__init__(signum, kept)
        self.signum = signum
        self.kept = kept


class ContractError(PackcliError):
    """An artifact whose contract version, manifest or pinned inputs cannot be trusted."""

    exit_code = 1
