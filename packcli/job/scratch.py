"""Per-example columns the driver holds for the whole plan-and-write stage, kept in files, not in anonymous memory.

``pack`` needs every example's facts at once (the global plan), so the driver holds a few dozen numbers an
example from the merge of the units' indexes to the last row of the seam table. As anonymous memory they
grow the driver's resident memory with the corpus (about 250 bytes an example: docs/benchmarks-pipeline.md,
memory). `Scratch` puts each such column in a file of its own under a folder packcli owns in the run's work
folder (`packcli.owned`), mapped shared: the kernel writes the pages back and can drop them whenever memory
is short, so they are page cache, not a memory wall. The arrays are plain numpy arrays over the mapping
(``np.frombuffer``), so every computation, and every byte of the artifact, is what it would be in memory.

A mapped page the driver has touched counts in its resident set (VmRSS, VmHWM) for as long as it stays mapped,
although it is page cache. `Scratch.release` hands every column's pages back (``madvise(MADV_DONTNEED)`` on a
shared file mapping: the data stays in the file and its page cache, and the next read maps it again), so the
driver calls it where a stage has finished with what it touched, and the resident set holds what one stage or
one row group is working on, not every column of the corpus.

Without a folder (``Scratch(None)``: ``verify``, tests) the columns are ordinary arrays.

Each mapped column holds a file descriptor while it lives (Python's mmap keeps a duplicate), so columns are
whole-run columns, a few dozen at most, never one per unit or shard (a shard task's arrays are views). What
arrives in parts in no set order (each unit's facts, as units finish) is appended to one file a column
(`Appended`) and read back part by part into a mapped column.
"""

from __future__ import annotations

import errno
import mmap
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt


class Scratch:
    """Allocates columns of a run: file-backed under ``folder``, or in memory when ``folder`` is None.

    The folder is the caller's (made with `packcli.owned.make_folder`, removed with the run's work folder);
    a file stays mapped while any array over it lives, and removing the folder under a live mapping is safe
    on POSIX (the pages go when the last array does).
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._made = 0
        self._mappings: list[weakref.ref[mmap.mmap]] = []  # the live ones: what `release` hands back

    def empty(self, n: int, dtype: npt.DTypeLike) -> np.ndarray:
        """An uninitialised column of ``n`` values."""
        mapped = self._mapped(n, np.dtype(dtype))
        return np.empty(n, dtype) if mapped is None else mapped

    def zeros(self, n: int, dtype: npt.DTypeLike) -> np.ndarray:
        mapped = self._mapped(n, np.dtype(dtype))  # a new file reads as zeros
        return np.zeros(n, dtype) if mapped is None else mapped

    def full(self, n: int, value: int, dtype: npt.DTypeLike) -> np.ndarray:
        out = self.empty(n, dtype)
        out[...] = value
        return out

    def arange(self, n: int) -> np.ndarray:
        """``0, 1, ..., n - 1`` (int64), written a block at a time: no n-long temporary, a block's pages resident."""
        out = self.empty(n, np.int64)
        for block in blocks(n, self):
            out[block] = np.arange(block.start, block.stop, dtype=np.int64)
        return out

    def _mapped(self, n: int, kind: np.dtype) -> np.ndarray | None:
        size = n * kind.itemsize
        if self.folder is None or size < mmap.PAGESIZE:  # a page or less: not worth a file
            return None
        path = self.folder / f"column-{self._made:04d}"
        self._made += 1
        with open(path, "xb+") as handle:
            allocate(handle.fileno(), size, path)
            mapping = mmap.mmap(handle.fileno(), size)
        self._mappings = [ref for ref in self._mappings if ref() is not None]
        self._mappings.append(weakref.ref(mapping))
        return np.frombuffer(mapping, kind, n)

    def release(self) -> None:
        """Hand the pages of every live column back to the kernel: the columns read as before (a shared file
        mapping's pages come back from the file), and the process's resident set no longer counts them until
        they are read again. Nothing to do in memory."""
        for ref in self._mappings:
            mapping = ref()
            if mapping is not None and not mapping.closed and hasattr(mmap, "MADV_DONTNEED"):  # not on Windows
                mapping.madvise(mmap.MADV_DONTNEED)

    def put(self, values: npt.ArrayLike, dtype: npt.DTypeLike | None = None) -> np.ndarray:
        """A new column holding a copy of ``values`` (cast to ``dtype``); ``values`` stays as it is."""
        values = np.asarray(values)
        mapped = self._mapped(len(values), np.dtype(values.dtype if dtype is None else dtype))
        if mapped is None:
            return np.array(values, dtype=dtype)
        mapped[...] = values
        return mapped

    def take(self, values: np.ndarray, rows: npt.NDArray[np.int64]) -> np.ndarray:
        """A new column holding ``values[rows]`` (``rows`` valid indices of ``values``, a row may repeat), gathered
        straight into it (no in-memory copy of the whole)."""
        out = self.empty(len(rows), values.dtype)
        for block in blocks(len(rows), self):  # numpy copies read-only indices (a plan's order) before it gathers: a block's
            np.take(values, rows[block], out=out[block], mode="clip")  # valid indices: "raise" would buffer a copy
        return out

    def keep(self, values: np.ndarray) -> np.ndarray:
        """A column holding ``values``, an array the caller hands over (a fresh result no one else holds):
        itself in memory, a file-backed copy otherwise (``values`` is then let go by the caller)."""
        return values if self.folder is None else self.put(values)

    def appended(self, dtype: npt.DTypeLike) -> Appended:
        """A column written a part at a time, in the order the parts come (`Appended`)."""
        path = None
        if self.folder is not None:
            path = self.folder / f"column-{self._made:04d}"
            self._made += 1
        return Appended(path, dtype)

    def concatenate(self, parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
        """``np.concatenate(parts)`` written straight into a column (no in-memory copy of the whole)."""
        out = self.empty(sum(len(p) for p in parts), dtype)
        if len(out):
            np.concatenate(parts, out=out, dtype=None, casting="same_kind")
        return out


IN_MEMORY = Scratch(None)


def allocate(fd: int, size: int, path: Path) -> None:
    """Give the file ``size`` bytes of disk now. A sparse file (``truncate``) would be mapped as well, but a page
    written into it when the disk is full kills the process (SIGBUS), with no message and its folder left
    behind; allocated first, a full disk is an ``OSError`` here (ENOSPC, naming ``path``), which the command
    reports. Where the filesystem cannot allocate ahead (no ``posix_fallocate``, or it refuses), the file is
    made sparse, as before."""
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.ftruncate(fd, size)

BLOCK = 1 << 16
"""Rows a per-example count or sum works on at a time (`blocks`): integer sums, so the blocks change no result,
and its masks and gathers are a block's, not the corpus's."""


def blocks(n: int, scratch: Scratch | None = None) -> Iterator[slice]:
    """Consecutive row ranges of `BLOCK` rows (the last shorter) covering ``n`` rows. With ``scratch``, its pages
    are handed back (`Scratch.release`) after each block: a pass over whole file-backed columns keeps a block's
    pages resident, not every page it has read or written."""
    for start in range(0, n, BLOCK):
        yield slice(start, min(start + BLOCK, n))
        if scratch is not None:
            scratch.release()


class Appended:
    """A column that arrives in parts in no set order (units finish in any order), kept until every part is there:
    appended to a file (one file, one descriptor, for all the parts: a mapping or file a part would run out of
    descriptors) or, without a file, held as the parts themselves. `read_into` copies a part back where it
    belongs, a part at a time, so the whole column is never in anonymous memory."""

    def __init__(self, path: Path | None, dtype: npt.DTypeLike) -> None:
        self.dtype, self.rows = np.dtype(dtype), 0
        self._handle = None if path is None else open(path, "xb+")  # noqa: SIM115 - closed by `close`
        self._parts: dict[int, np.ndarray] = {}

    def append(self, values: npt.ArrayLike) -> int:
        """Add a part; returns the row it starts at (what `read_into` takes)."""
        values = np.ascontiguousarray(values, self.dtype)
        start = self.rows
        if self._handle is None:
            if len(values):  # an empty part starts where the next one does: it must not take that one's place
                self._parts[start] = values
        else:
            self._handle.seek(0, 2)  # `read_into` may have moved it
            self._handle.write(values.view(np.uint8).data)
        self.rows += len(values)
        return start

    def read_into(self, start: int, out: np.ndarray) -> None:
        """The part that starts at row ``start``, ``len(out)`` values, copied into ``out`` (contiguous)."""
        if not len(out):
            return
        if self._handle is None:
            out[...] = self._parts[start]
            return
        target = out.view(np.uint8)
        self._handle.seek(start * self.dtype.itemsize)
        got = self._handle.readinto(target.data)
        if got != target.nbytes:
            raise OSError(f"{self._handle.name}: read {got} of {target.nbytes} bytes at row {start}")

    def close(self) -> None:
        """Let the parts go: the file (and its descriptor, and its disk space), or the parts held."""
        if self._handle is not None:
            self._handle.close()
            Path(self._handle.name).unlink(missing_ok=True)
        self._parts.clear()


class TextColumn:
    """Per-example strings, most of them alike (an accepted record's reason is "", its format one of a few):
    a code a row (int32, a `Scratch` column) into the distinct strings, 4 bytes a row where a list holds an
    8-byte pointer. Reads and writes like the list it replaces (``column[i]``, ``column[a:b]`` a list), so
    every message and the seam table are the same."""

    def __init__(self, codes: npt.NDArray[np.int32], names: list[str], index: dict[str, int]) -> None:
        self.codes, self.names, self._index = codes, names, index  # names and index may be shared (appended only)

    @classmethod
    def of(cls, parts: list[list[str]], scratch: Scratch = IN_MEMORY) -> TextColumn:
        """The column of ``parts`` end to end (e.g. each unit's list)."""
        index: dict[str, int] = {}
        codes = scratch.concatenate([np.fromiter((index.setdefault(text, len(index)) for text in part), np.int32,
                                                 len(part)) for part in parts], np.int32) if parts else \
            np.zeros(0, np.int32)
        return cls(codes, list(index), index)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, at: int | slice) -> str | list[str]:
        if isinstance(at, slice):
            names = self.names
            return [names[c] for c in self.codes[at].tolist()]
        return self.names[self.codes[at]]

    def __setitem__(self, at: int, text: str) -> None:
        self.codes[at] = code_of(text, self.names, self._index)

    def fill(self, rows: npt.NDArray[np.int64], text: str) -> None:
        """``text`` at every one of ``rows``."""
        self.codes[rows] = code_of(text, self.names, self._index)

    def take(self, rows: npt.NDArray[np.int64], scratch: Scratch = IN_MEMORY) -> TextColumn:
        """The strings at ``rows`` (a row may repeat), a column of their own (``scratch``'s)."""
        return TextColumn(scratch.take(self.codes, rows), self.names, self._index)

    def copy(self, scratch: Scratch = IN_MEMORY) -> TextColumn:
        return TextColumn(scratch.put(self.codes), self.names, self._index)


def code_of(text: str, names: list[str], index: dict[str, int]) -> int:
    """``text``'s code among ``names`` (``index``: name -> code), appended to both if it is new."""
    code = index.get(text)
    if code is None:
        code = index[text] = len(names)
        names.append(text)
    return code


def take_texts(texts: list[str] | TextColumn, rows: npt.NDArray[np.int64],
               scratch: Scratch = IN_MEMORY) -> list[str] | TextColumn:
    """``texts`` at ``rows``: a `TextColumn` stays one (its codes ``scratch``'s), a list stays a list."""
    if isinstance(texts, TextColumn):
        return texts.take(rows, scratch)
    return [texts[i] for start in range(0, len(rows), 1 << 16)  # not a list of every row's index
            for i in rows[start:start + (1 << 16)].tolist()]


def copy_texts(texts: list[str] | TextColumn, scratch: Scratch = IN_MEMORY) -> list[str] | TextColumn:
    """A copy of ``texts``: a `TextColumn`'s codes ``scratch``'s, a list a list."""
    return texts.copy(scratch) if isinstance(texts, TextColumn) else list(texts)
