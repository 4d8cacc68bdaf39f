"""What a ``pack`` run keeps beside ``--out``, and how the finished artifact gets there atomically.

    parent/
      OUT/                          the artifact: appears whole, by one rename, or not at all
      .packcli-lock-OUT             held (flock) for the whole run; holds the run's pid
      .packcli-work-OUT/            unit spills and sidecars: kept after a failure, so a re-run resumes
        tmp-XXXXXXXX/               the artifact being written (no manifest until it is complete)
        old-XXXXXXXX/               with --force, the previous OUT while the new one moves in

One run per ``--out`` at a time: the lock is exclusive and not waited for, so a second run fails at
once, before it touches anything. Holding it, a run checks ``--out`` again (a run that finished in
the meantime may have filled it) and owns everything under the work folder, so whatever a dead run
left there (its ``tmp-*``, ``old-*``) is cleared; units are kept, to resume. The
lock is released by the kernel when its holder dies (``kill -9`` included), and the lock file is
removed by its holder while still locked, so no two runs can ever hold locks on different files.

Permissions: the temporary folder is made private by ``mkdtemp`` (0700) and opened up to what the
umask allows before it becomes ``--out``, as ``mkdir`` would have made it: a training job under
another user on a shared filesystem must be able to read the artifact.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from packcli.checks import output_dir_problems, raise_all
from packcli.errors import InputError, PackcliError
from packcli.job.pause import pause_at


class OutputBusyError(PackcliError):
    """Another run is writing the same ``--out``; nothing was touched."""


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (/proc), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Workspace:
    """The lock, the work folder and the temporary artifact of one run into ``out`` (a context manager)."""

    def __init__(self, out: Path, *, force: bool = False) -> None:
        self.out = Path(out)
        self.force = force
        self.lock_path = self.out.parent / f".packcli-lock-{self.out.name}"
        # Absolute: spills and shards are named to workers, and a Ray worker runs in its own node's
        # directory, not this one (the artifact and messages keep ``out`` as given).
        self.work = Path(os.path.abspath(self.out.parent)) / f".packcli-work-{self.out.name}"
        self._fd: int | None = None

    def __enter__(self) -> Workspace:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            # Again, now that no other run can: one that finished since the caller's check may have filled it.
            raise_all(output_dir_problems("--out", self.out, force=self.force), error=InputError)
            self.work.mkdir(exist_ok=True)
            for stale in [*self.work.glob("tmp-*"), *self.work.glob("old-*")]:  # a dead run's: we hold the lock
                shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink()
        except BaseException:
            self._unlock()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._unlock()

    def new_artifact_dir(self) -> Path:
        """A fresh temporary folder for the artifact, with the permissions the umask gives a new folder."""
        tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=self.work))
        tmp.chmod(0o777 & ~current_umask())
        return tmp

    def publish(self, tmp: Path) -> None:
        """Move the finished artifact to ``out``; a previous ``out`` is removed only after the new one is in place."""
        pause_at("rename")
        if self.out.exists() or self.out.is_symlink():
            old = self.work / f"old-{tmp.name.removeprefix('tmp-')}"
            self.out.rename(old)
            pause_at("swap")
            tmp.rename(self.out)
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        else:
            tmp.rename(self.out)

    def discard_work(self) -> None:
        """Remove the work folder (after success: nothing left to resume)."""
        shutil.rmtree(self.work, ignore_errors=True)

    def _lock(self) -> None:
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise OutputBusyError(f"{self.out}: another packcli pack (pid {holder}) is writing it",
                                      "wait for that run to finish, or choose another --out") from None
            try:  # the file we locked may have been removed by the run that held it: then lock the new one
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                self._fd = fd
                return
            os.close(fd)

    def _unlock(self) -> None:
        if self._fd is not None:
            self.lock_path.unlink(missing_ok=True)  # while still locked: a waiter re-checks the inode
            os.close(self._fd)
            self._fd = None
