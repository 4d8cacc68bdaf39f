"""Spill files: each unit's token ids and labels on disk, and the reader that gathers examples from them.

The pack job never holds the corpus in memory: each unit appends its examples' ids and labels to
its own two files (int32, end to end in record order), and the shard writers read them back by
global token offset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt


def spill_paths(work_dir: Path, unit: str) -> tuple[Path, Path]:
    """The two spill files of the unit named ``unit`` (`packcli.job.units.UnitSpec.name`)."""
    return work_dir / f"{unit}.ids.bin", work_dir / f"{unit}.labels.bin"


@dataclass(frozen=True)
class SpillLayout:
    """Where the units' spill files are, and at which global token offset each unit starts.

    Picklable and small (two paths a unit), so a shard-writing task on another process or node can
    open its own `SpillReader` on the shared work directory.
    """

    paths: tuple[tuple[str, str], ...]
    starts: tuple[int, ...]  # one more than there are units: the last is the total

    @classmethod
    def of(cls, work_dir: Path, units: Sequence[str], tokens_per_unit: Sequence[int]) -> SpillLayout:
        """The layout of the units named ``units``, in order, holding ``tokens_per_unit`` tokens each."""
        starts = np.concatenate([[0], np.cumsum(np.asarray(tokens_per_unit, dtype=np.int64))])
        return cls(tuple((str(a), str(b)) for a, b in (spill_paths(work_dir, unit) for unit in units)),
                   tuple(int(x) for x in starts))


class SpillReader:
    """Reads examples' ids and labels from the units' spill files by global token offset.

    The offsets count tokens over the units in order (unit 0's tokens, then unit 1's, ...), which
    is how `packcli.job.units.ExampleIndex` numbers them; an example never spans two units. Reads go
    through ``pread`` into the caller's arrays, not through a memory map: a map's pages count in the
    process's RSS while mapped, and the write stage reads examples in shuffled order, so over a run
    a map touched the whole spill (8 bytes a token: 2.1 GiB at 200k conversations). Read this way the
    spill stays in the page cache, which the kernel reclaims and RSS does not count.
    """

    MAX_OPEN = 64  # units whose files stay open (two descriptors each); reads come in unit order
    GAP = 1 << 14  # tokens (64 KiB a file): examples closer than this in a spill are read in one go

    def __init__(self, layout: SpillLayout) -> None:
        self.starts = np.asarray(layout.starts, dtype=np.int64)
        self._paths = layout.paths
        self._open: dict[int, tuple[int, int]] = {}  # unit -> descriptors, least recently opened first

    def read(self, offset: int, length: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """One example's (or its first ``length`` tokens') ids and labels."""
        ids, labels = np.empty(length, np.int32), np.empty(length, np.int32)
        self._read_into(int(offset), ids, labels)
        return ids, labels

    def gather(self, offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
               ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The examples at ``offsets`` (``lengths`` tokens each) end to end, in the order given.

        Read in file order, so the reads walk each spill forward whatever order the packs want, and
        examples of one unit less than `GAP` tokens apart are read together, one ``pread`` a file:
        a shard holding a good share of the corpus (few shards) makes a few large reads instead of
        two system calls an example, and a shard holding a sliver of it (many shards) reads no more
        than its examples and the short gaps between them.
        """
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        ids, labels = np.empty(total, np.int32), np.empty(total, np.int32)
        order = np.argsort(offsets, kind="stable")
        at, n = offsets[order].astype(np.int64), lengths[order].astype(np.int64)
        reach = np.maximum.accumulate(at + n)  # the furthest token needed so far
        unit = np.searchsorted(self.starts, at, side="right") - 1
        new = np.ones(len(at), dtype=bool)
        new[1:] = (at[1:] > reach[:-1] + self.GAP) | (unit[1:] != unit[:-1])
        cuts = np.append(np.flatnonzero(new), len(at)).tolist()
        dest = (ends - lengths)[order].tolist()
        for a, b in zip(cuts[:-1], cuts[1:]):
            lo, hi = int(at[a]), int(reach[b - 1])
            run_ids, run_labels = np.empty(hi - lo, np.int32), np.empty(hi - lo, np.int32)
            self._read_into(lo, run_ids, run_labels)
            for start, size, to in zip((at[a:b] - lo).tolist(), n[a:b].tolist(), dest[a:b]):
                ids[to:to + size] = run_ids[start:start + size]
                labels[to:to + size] = run_labels[start:start + size]
        return ids, labels

    def _read_into(self, offset: int, ids: npt.NDArray[np.int32], labels: npt.NDArray[np.int32]) -> None:
        unit = int(np.searchsorted(self.starts, offset, side="right")) - 1
        at = 4 * (offset - int(self.starts[unit]))
        for fd, out in zip(self._descriptors(unit), (ids, labels)):
            view = memoryview(out).cast("B")
            done = 0
            while done < len(view):  # pread may return short reads
                got = os.preadv(fd, [view[done:]], at + done)
                if got == 0:
                    raise OSError(f"spill of unit {unit} ends early: expected {len(view)} bytes at {at}")
                done += got

    def _descriptors(self, unit: int) -> tuple[int, int]:
        fds = self._open.get(unit)
        if fds is None:
            if len(self._open) >= self.MAX_OPEN:
                for fd in self._open.pop(next(iter(self._open))):
                    os.close(fd)
            ids_fd = os.open(self._paths[unit][0], os.O_RDONLY)
            try:
                fds = self._open[unit] = (ids_fd, os.open(self._paths[unit][1], os.O_RDONLY))
            except BaseException:
                os.close(ids_fd)
                raise
        return fds

    def close(self) -> None:
        for pair in self._open.values():
            for fd in pair:
                os.close(fd)
        self._open = {}

    def __enter__(self) -> SpillReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
