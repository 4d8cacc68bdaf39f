"""What packcli may remove or replace: the mark it leaves in everything it creates, and the checks that read it.

packcli deletes or replaces a path only when it can show it wrote it, never because of its name:

- a folder it makes (the work folder beside ``--out``, a temporary artifact, a scratch folder) holds
  a marker file, `MARKER_NAME`, whose text names packcli and what the folder is for; everything
  in such a folder is packcli's;
- an artifact is recognised by its manifest (`packcli.artifact.listing.not_an_artifact`);
- a file a command writes for the user names packcli inside itself: ``show --html`` a generator
  meta tag, ``stats --plot`` a PNG text chunk or a PDF/SVG creator, ``verify --seam-out`` Parquet
  metadata, or in CSV the seam table's own header (its first column and the ``verify`` column).

A user's folder named ``.packcli-work-out``, or their ``report.html``, stays theirs: packcli refuses
(a usage error, before any work) instead of touching it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER_NAME = ".packcli-owner"
MARKER_PREFIX = "packcli: "
HTML_GENERATOR = "<meta name='generator' content='packcli show'>"
PLOT_CREATOR = "packcli stats"
SEAM_OUT_KEY = b"packcli"  # Parquet key-value metadata of `verify --seam-out`
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


def mark(folder: Path, purpose: str) -> None:
    """Write the marker that makes ``folder`` packcli's (``purpose``: what it is for, for a curious user)."""
    (Path(folder) / MARKER_NAME).write_text(f"{MARKER_PREFIX}{purpose}\n", encoding="utf-8")


def is_marked(folder: Path) -> bool:
    """Does ``folder`` (a real folder, not a link to one) hold packcli's marker?"""
    marker = Path(folder) / MARKER_NAME
    if Path(folder).is_symlink() or marker.is_symlink() or not marker.is_file():
        return False
    try:
        with open(marker, encoding="utf-8") as handle:
            return handle.read(len(MARKER_PREFIX)) == MARKER_PREFIX
    except (OSError, UnicodeDecodeError):
        return False


def make_folder(parent: Path, prefix: str, purpose: str) -> Path:
    """A new, private folder under ``parent`` with packcli's marker in it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    mark(folder, purpose)
    return folder


def owned_folder(path: Path) -> bool:
    """May packcli remove this folder: marked, an artifact, or empty (and a real folder, not a link)?"""
    from packcli.artifact.listing import not_an_artifact

    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    return is_marked(path) or not_an_artifact(path) in (None, "is empty")


def remove_folder(path: Path) -> bool:
    """Remove ``path`` if packcli may (`owned_folder`); return whether it did. Anything else stays.

    The marker goes last, so a removal cut short (an interrupt, a file that appears meanwhile) leaves
    a folder still marked as packcli's, which the next run can clear.
    """
    if not owned_folder(path):
        return False
    path = Path(path)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name == MARKER_NAME:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    (path / MARKER_NAME).unlink(missing_ok=True)
    path.rmdir()
    return True


@contextmanager
def scratch_folder(prefix: str, purpose: str, parent: Path | None = None) -> Iterator[Path]:
    """A marked temporary folder for the duration of the block (under ``parent``; None: the system's temporary
    folder, ``$TMPDIR``), removed after if it still carries the marker."""
    folder = make_folder(Path(tempfile.gettempdir()) if parent is None else Path(parent), prefix, purpose)
    try:
        yield folder
    finally:
        remove_folder(folder)


def is_own_output(path: Path) -> bool:
    """Does the file at ``path`` carry the mark packcli puts in the pages, plots and tables it writes?
    Read from the content (the first 16 KiB, a PDF's last 64 KiB, a Parquet footer), never the name."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(1 << 14)
            if head.startswith(b"PAR1"):
                import pyarrow.parquet as pq

                return SEAM_OUT_KEY in (pq.read_metadata(path).metadata or {})
            if head.startswith(b"%PDF"):
                handle.seek(max(0, path.stat().st_size - (1 << 16)))
                return f"/Creator ({PLOT_CREATOR})".encode() in head + handle.read()
    except Exception:  # noqa: BLE001 - an unreadable or malformed file is simply not one packcli wrote
        return False
    if head.startswith(PNG_SIGNATURE):
        return _png_text(head).get("Software") == PLOT_CREATOR
    first = head.split(b"\n", 1)[0]
    return (HTML_GENERATOR.encode() in head or f"<dc:title>{PLOT_CREATOR}</dc:title>".encode() in head
            or (first.startswith(b'"example_id",') and first.endswith(b',"verify"')))


def replace_problems(flag: str, path: str | Path) -> list[str]:
    """An existing file at ``path`` that packcli would replace but did not write (or a link): a usage error."""
    reason = _not_replaceable(Path(path))
    return [f"{flag} {path}: {reason}"] if reason else []


def write_replacing(path: Path, write: Callable[[Path], None]) -> Path:
    """Have ``write`` fill a new temporary file beside ``path``, then rename it over ``path``: the file
    appears whole or not at all, and replaces only a file packcli wrote (checked again just before).

    Raises:
        PathError: a file that is not packcli's appeared at ``path`` while the command ran.
    """
    from packcli.errors import PathError

    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=".packcli-", suffix=".partial", dir=path.parent)
    os.close(fd)
    partial = Path(name)  # this call made it (O_EXCL), so this call may remove it
    try:
        write(partial)
        partial.chmod(0o666 & ~current_umask())  # what a plain open() would have given the file
        reason = _not_replaceable(path)
        if reason:
            raise PathError(f"{path}: {reason}")
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def _not_replaceable(path: Path) -> str | None:
    if path.is_symlink():
        return "is a symbolic link; packcli replaces only a file it wrote: choose another name"
    if path.is_dir():
        return "is a directory"
    if path.exists() and not is_own_output(path):
        return "exists and packcli did not write it; choose another name, or move it away"
    return None


def _png_text(data: bytes) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG's first bytes (they come before the image data)."""
    if not data.startswith(PNG_SIGNATURE):
        return {}
    texts, at = {}, len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        length, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        if kind == b"tEXt":
            key, _, value = data[at + 8:at + 8 + length].partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return texts
