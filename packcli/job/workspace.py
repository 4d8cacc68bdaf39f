"""What a ``pack`` run keeps beside ``--out``, and how the finished artifact gets there atomically.

    parent/
      OUT/                          the artifact: appears whole, by one rename, or not at all
      .packcli-lock-OUT             held (flock) for the whole run; reads "packcli pack lock" and the pid
      .packcli-work-OUT/            unit spills and sidecars: kept after a failure, so a re-run resumes
        .packcli-owner              the marker that makes the folder packcli's (`packcli.owned`)
        tmp-XXXXXXXX/               the artifact being written (marked until it is complete), and the
                                    driver's per-example columns (`packcli.job.scratch`)
        old-XXXXXXXX/               with --force, the previous OUT while the new one moves in

What a run may replace or remove (`out_problems`, checked before any work and again under the lock):
``--out`` when it is an empty folder, or with ``--force`` a packcli artifact (`packcli.artifact.listing`);
never a file, a link, a folder holding anything else or any input, the current directory or one
above it, home or ``/``. Beside it, only a work folder that carries packcli's marker (an empty one
is adopted) and a lock file that reads as a packcli lock; inside the work folder, ``tmp-``/``old-``
folders only while marked or artifacts. A name alone never makes a path packcli's.

One run per ``--out`` at a time: the lock is exclusive and not waited for, so a second run fails at
once, before it touches anything. Holding it, a run checks ``--out`` again (a run that finished in
the meantime may have filled it) and owns the work folder, so what a dead run left there (its
``tmp-*``, ``old-*``) is cleared; units are kept, to resume. A dead run's ``old-*`` with no ``--out``
(killed between the two renames of ``--force``) is put back first. The lock is released by the
kernel when its holder dies (``kill -9`` included), and the lock file is removed by its holder while
still locked, so no two runs can ever hold locks on different files. The file appears with its text
in it (written aside, then hard-linked into place), so a lock file is never seen empty.

On the way out after a failure or an interrupt, what this run made and a re-run cannot use goes: its
temporary artifact, the work folder when no unit finished, the folders it made for ``--out``. The
swap of ``--force`` runs with SIGINT and SIGTERM held (`packcli.interrupts.signals_held`), so an
interrupt leaves the previous artifact or the new one at ``--out``, never neither.

Permissions: the temporary folder is made private by ``mkdtemp`` (0700) and opened up to what the
umask allows before it becomes ``--out``, as ``mkdir`` would have made it: a training job under
another user on a shared filesystem must be able to read the artifact.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from packcli.artifact.listing import not_an_artifact
from packcli.checks import name_max, output_dir_problems, raise_all
from packcli.errors import InputError, PackcliError, PathError, unusable_path
from packcli.interrupts import signals_held
from packcli.job.pause import pause_at
from packcli.job.units import count_finished_units
from packcli.owned import MARKER_NAME, current_umask, is_marked, make_folder, mark, remove_folder

LOCK_PREFIX, WORK_PREFIX = ".packcli-lock-", ".packcli-work-"
LOCK_MAGIC = b"packcli pack lock"
NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK)


class OutputBusyError(PackcliError):
    """Another run is writing the same ``--out``; nothing was touched."""


def side_paths(out: Path) -> tuple[Path, Path]:
    """The lock file and the work folder a run into ``out`` keeps beside it."""
    out = Path(out)
    # Absolute: spills and shards are named to workers, and a Ray worker runs in its own node's
    # directory, not this one (the artifact and messages keep ``out`` as given).
    parent = Path(os.path.abspath(out.parent))
    return out.parent / f"{LOCK_PREFIX}{out.name}", parent / f"{WORK_PREFIX}{out.name}"


def out_problems(out: Path, *, force: bool, inputs: Sequence[str | Path] = ()) -> list[str]:
    """Everything that keeps a run from writing ``out`` (see the module docstring): one line each."""
    problems = output_dir_problems("`out`", out, force=force, inputs=inputs)
    lock, work = side_paths(out)
    limit = name_max(Path(out).parent)
    if len(f"{WORK_PREFIX}{Path(out).name}".encode()) > limit:
        problems.append(f"`out` {out}: the name is too long: packcli keeps {WORK_PREFIX}NAME beside it, which must "
                        f"fit in {limit} bytes; choose a shorter name")
        return problems
    if work.is_symlink() or (work.exists() and not work.is_dir()):
        problems.append(f"`out` {out}: {work} is in the way (not a work folder packcli made); move it away")
    elif work.is_dir() and not is_marked(work) and any(work.iterdir()):
        problems.append(f"`out` {out}: {work} holds {sorted(os.listdir(work))[0]}, and packcli did not make it "
                        "(no marker); move it away")
    if (lock.is_symlink() or lock.exists()) and not _is_lock_file(lock):
        problems.append(f"`out` {out}: {lock} exists and is not a packcli lock file; move it away")
    return problems


class Workspace:
    """The lock, the work folder and the temporary artifact of one run into ``out`` (a context manager)."""

    def __init__(self, out: Path, *, force: bool = False, inputs: Sequence[str | Path] = ()) -> None:
        self.out = Path(out)
        self.force = force
        self.inputs = tuple(inputs)
        self.lock_path, self.work = side_paths(self.out)
        self.units_key: str | None = None  # the run's resume key, once known: which finished units a re-run reuses
        self.published = False
        self._fd: int | None = None
        self._made: list[Path] = []  # folders this run created, in order: removed (if empty) after a failure

    def __enter__(self) -> Workspace:
        try:
            self._make_parents()
            self._lock()
            # Again, now that no other run can: one that finished since the caller's check may have filled it.
            self._restore_swapped_out()
            raise_all(out_problems(self.out, force=self.force, inputs=self.inputs), error=InputError)
            self._open_work()
        except BaseException as exc:
            self._leave(failed=True)
            if isinstance(exc, OSError):
                raise unusable_path(exc, f"`out` {self.out}") from exc
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._leave(failed=exc is not None)

    def new_artifact_dir(self) -> Path:
        """A fresh temporary folder for the artifact, with the permissions the umask gives a new folder."""
        tmp = make_folder(self.work, "tmp-", f"the artifact being written for --out {os.path.abspath(self.out)}")
        tmp.chmod(0o777 & ~current_umask())
        return tmp

    def new_scratch_dir(self) -> Path:
        """A fresh folder for the driver's per-example columns (`packcli.job.scratch`): a ``tmp-`` folder, so
        the next run clears it if this one dies before `discard_scratch_dir`."""
        return make_folder(self.work, "tmp-", f"per-example columns of the run writing {os.path.abspath(self.out)}")

    def discard_scratch_dir(self, folder: Path | None) -> None:
        """Remove the columns' folder (best effort: what stays is marked, and the next run or `discard_work`
        clears it). Arrays still mapped keep their pages until they go; the files are gone from the disk."""
        if folder is not None:
            try:
                remove_folder(folder)
            except OSError:
                pass

    def discard_artifact_dir(self, tmp: Path) -> None:
        """Remove an unfinished temporary artifact (after a failure or an interrupt)."""
        remove_folder(tmp)

    def publish(self, tmp: Path) -> None:
        """Move the finished artifact to ``out``; a previous ``out`` is removed only after the new one is in place.

        Raises:
            InputError: ``out`` changed during the run into something packcli may not replace.
        """
        pause_at("rename")
        raise_all(out_problems(self.out, force=self.force, inputs=self.inputs), "nothing was replaced; move it "
                  "away and run again: finished units are reused", error=InputError)
        (tmp / MARKER_NAME).unlink()  # an artifact holds what its manifest lists, and nothing else
        with signals_held():
            if self.out.exists():
                old = self.work / f"old-{tmp.name.removeprefix('tmp-')}"
                self.out.rename(old)
                pause_at("swap")
                tmp.rename(self.out)
                self.published = True
                remove_folder(old)
            else:
                tmp.rename(self.out)
                self.published = True

    def discard_work(self) -> None:
        """Remove the work folder after success (nothing left to resume): its files, and each folder in it
        only if packcli's (a ``tmp-``/``old-`` marked, or an artifact); anything else keeps the folder,
        marked. Best effort, as in `_leave`: the artifact is in place whatever happens here."""
        if not is_marked(self.work):
            return
        try:
            with os.scandir(self.work) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        remove_folder(Path(entry.path))
                    elif entry.name != MARKER_NAME:
                        os.unlink(entry.path)
            if os.listdir(self.work) == [MARKER_NAME]:
                remove_folder(self.work)
        except OSError:
            pass

    def kept(self) -> str:
        """What an interrupted run leaves, in words: the artifact at ``out``, and what a re-run resumes from.
        Read from the disk: until the (signal-proof) swap, ``out`` is whatever was there before the run."""
        if self.published:
            return f"the new artifact at {self.out} is complete"
        if self.out.is_dir() and not self.out.is_symlink() and not_an_artifact(self.out) is None:
            state = f"the previous artifact at {self.out} is unchanged"
        elif self.out.is_dir() and not self.out.is_symlink() and not any(self.out.iterdir()):
            state = f"no artifact written ({self.out} is still empty)"
        else:
            state = "no artifact written"
        units = count_finished_units(self.work, self.units_key) if is_marked(self.work) else 0
        return f"{state}; a rerun resumes from {units} finished unit{'s' * (units != 1)}" if units else state

    def _make_parents(self) -> None:
        missing = []
        parent = Path(os.path.abspath(self.out.parent))
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            folder.mkdir()
            self._made.append(folder)

    def _open_work(self) -> None:
        if not self.work.exists():
            self.work.mkdir()
            self._made.append(self.work)
        if not is_marked(self.work):  # new, or empty (a run killed between mkdir and marker): checked above
            mark(self.work, f"pack work folder for --out {os.path.abspath(self.out)}")
        for entry in sorted(self.work.iterdir()):  # a dead run's: we hold the lock
            if entry.name.startswith(("tmp-", "old-")):
                remove_folder(entry)  # only if packcli's: marked, or an artifact, or empty

    def _restore_swapped_out(self) -> None:
        """A run killed between moving the old ``out`` aside and moving the new one in left ``out``
        missing and the old artifact in ``old-*``: put it back, so it is what this run replaces or keeps."""
        if self.out.exists() or self.out.is_symlink() or not is_marked(self.work):
            return
        old = [p for p in self.work.glob("old-*") if not p.is_symlink() and p.is_dir() and not_an_artifact(p) is None]
        if len(old) == 1:
            old[0].rename(self.out)

    def _leave(self, *, failed: bool) -> None:
        """Release the lock; after a failure, remove what this run made that a re-run cannot use (all of
        the work folder once the new artifact is in place). Best effort: a Ray task cancelled a moment
        ago may still be writing there, and what stays is marked, for the next run to clear."""
        try:
            if failed and self.published:  # interrupted after the swap: the new artifact is whole, nothing to resume
                self.discard_work()
            elif failed and self.work in self._made and not count_finished_units(self.work, None):
                self.discard_work()
            if failed:
                for folder in reversed(self._made):
                    if folder != self.work and folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
        except OSError:
            pass
        finally:
            self._unlock()

    def _lock(self) -> None:
        while True:
            self._create_lock_file()
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_NOFOLLOW)
            except FileNotFoundError:  # its holder removed it between our creating and opening it
                continue
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                raise PathError(f"`out` {self.out}: {self.lock_path} is a symbolic link, not a packcli lock file",
                                "move it away, or choose another `out`") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").rsplit("pid", 1)[-1].strip() or "?"
                os.close(fd)
                raise OutputBusyError(f"{self.out}: another packcli pack (pid {holder}) is writing it",
                                      "wait for that run to finish, or choose another `out`") from None
            try:  # the file we locked may have been removed by the run that held it: then lock the new one
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            if not os.pread(fd, len(LOCK_MAGIC), 0) == LOCK_MAGIC:
                os.close(fd)
                raise PathError(f"`out` {self.out}: {self.lock_path} exists and is not a packcli lock file",
                                "move it away, or choose another `out`")
            os.pwrite(fd, _lock_text(), 0)
            self._fd = fd
            return

    def _create_lock_file(self) -> None:
        """Create the lock file with its text already in it, unless it exists."""
        if os.path.lexists(self.lock_path):
            return
        fd, name = tempfile.mkstemp(prefix=".packcli-new-lock-", dir=self.lock_path.parent)
        try:
            os.write(fd, _lock_text())
            os.fchmod(fd, 0o666 & ~current_umask())
            os.close(fd)
            try:
                os.link(name, self.lock_path)
            except FileExistsError:
                pass  # another run's, or a dead run's: locked (or refused) like any other
            except OSError as exc:
                if exc.errno not in NO_HARD_LINKS:
                    raise
                self._create_lock_file_without_links()
        finally:
            os.unlink(name)

    def _create_lock_file_without_links(self) -> None:
        """Where hard links are not supported: created empty, and written at once."""
        try:
            fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return
        try:
            os.write(fd, _lock_text())
        finally:
            os.close(fd)

    def _unlock(self) -> None:
        if self._fd is not None:
            self.lock_path.unlink(missing_ok=True)  # while still locked: a waiter re-checks the inode
            os.close(self._fd)
            self._fd = None


def _lock_text() -> bytes:
    """The lock file's text: always the same length, so rewriting the pid never shows a shorter file."""
    return LOCK_MAGIC + f", pid {os.getpid():>10}\n".encode()


def _is_lock_file(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return not path.is_symlink() and handle.read(len(LOCK_MAGIC)) == LOCK_MAGIC
    except OSError:
        return False

