"""The packs as ``verify`` keeps them: each shard read once, checked, reduced, and let go.

Holding every shard's arrays made verify's memory grow with the artifact's tokens (12 bytes a packed
token). Instead integrity hands each shard as it reads it to the layout check and to `PackIndex.add`,
which keeps per pack segment (an example's cu_seqlens span) where it is, its supervised labels and
the digests of its tokens and labels (`packcli.contract.token_hash`), as columns (`SegmentColumns`),
and per shard its totals. The
bookkeeping check compares those with the seam table, reconstruction with fresh tokenizations, and
the few spans that must be read token by token (a difference to explain, a truncated prefix, the
render oracle) are read again from their shard (`PackIndex.tokens`). What that costs per example:
docs/benchmarks-pipeline.md (memory).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packcli.artifact.shards import FlatShard, load_flat, read_shard
from packcli.contract import IGNORE_INDEX
from packcli.job.scratch import IN_MEMORY, Appended, Scratch
from packcli.verify.layout import cu_problem


@dataclass(frozen=True, slots=True)
class Segment:
    """One example's (or chunk's) span in a pack: (shard, row, offset, length), its supervised labels and
    digests. One per packed example, so slots: no per-instance dict."""

    shard: str
    row: int
    offset: int
    length: int
    supervised: int
    ids_hash: str
    labels_hash: str

    @property
    def where(self) -> tuple[str, int, int, int]:
        return self.shard, self.row, self.offset, self.length


@dataclass(frozen=True)
class ShardTotals:
    rows: int
    tokens: int
    supervised: int


@dataclass(frozen=True)
class SegmentColumns:
    """Every indexed segment as columns, in the order the shards were read: its example id, shard (an index
    into `PackIndex.shards`), row, offset, length, supervised labels and the digests of its tokens and
    labels (the uint64 `packcli.contract.token_hash` spells); ``order`` sorts them by id (stably: an id's
    segments in read order), ``sorted_ids`` are the ids in that order."""

    example_id: np.ndarray
    shard: np.ndarray
    row: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    supervised: np.ndarray
    ids_hash: np.ndarray
    labels_hash: np.ndarray
    order: np.ndarray
    sorted_ids: np.ndarray

    def of(self, example_id: int) -> np.ndarray:
        """The indices of ``example_id``'s segments, in read order."""
        return self.order[np.searchsorted(self.sorted_ids, example_id, "left"):
                          np.searchsorted(self.sorted_ids, example_id, "right")]


FIELDS = ("example_id", "shard", "row", "offset", "length", "supervised", "ids_hash", "labels_hash")
DTYPES = (np.int64, np.int32, np.int32, np.int32, np.int32, np.int64, np.uint64, np.uint64)


@dataclass
class PackIndex:
    """Every readable shard's segments (`SegmentColumns`: about 60 bytes a segment, not a Python object
    each) and its totals; built by `add`, one shard at a time.

    The segments are ``scratch``'s columns (`packcli.job.scratch`): with a folder, each shard's are appended
    to files as the shard is read and the columns are mapped from them, so the driver's resident memory does
    not grow with the artifact's examples.

    An id usually has one segment; a split example's chunks have one each, and a copy a forger added is
    another (the bookkeeping check finds it unclaimed).
    """

    directory: Path
    scratch: Scratch = IN_MEMORY
    totals: dict[str, ShardTotals] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)
    _appended: list[Appended] = field(default_factory=list, repr=False)  # a column a field, as shards come
    _parts: list[tuple[int, int]] = field(default_factory=list, repr=False)  # each shard's (first segment, count)
    _columns: SegmentColumns | None = field(default=None, repr=False)
    _cached: FlatShard | None = field(default=None, repr=False)

    def add(self, shard: FlatShard) -> None:
        """Index one shard's segments (`index_shard`)."""
        self.add_indexed(shard.name, *index_shard(shard))

    def add_indexed(self, name: str, totals: ShardTotals, segments: tuple[np.ndarray, ...]) -> None:
        """Keep one shard's totals and segments as `index_shard` gave them (here, or on a worker)."""
        if self._columns is not None:
            raise RuntimeError("PackIndex: a shard added after the columns were built")
        self.totals[name] = totals
        shard = np.full(len(segments[0]), len(self.shards), DTYPES[1])
        self.shards.append(name)
        if not self._appended:
            self._appended = [self.scratch.appended(dtype) for dtype in DTYPES]
        starts = {column.append(values) for column, values in zip(self._appended, (segments[0], shard, *segments[1:]))}
        self._parts.append((starts.pop(), len(shard)))

    @property
    def columns(self) -> SegmentColumns:
        """Every segment, as columns (built once the shards are read, a field at a time from its appended parts)."""
        if self._columns is None:
            joined = []
            total = sum(count for _, count in self._parts)
            for k, dtype in enumerate(DTYPES):
                out = self.scratch.empty(total, dtype)
                for start, count in self._parts:
                    if self._appended:
                        self._appended[k].read_into(start, out[start:start + count])
                joined.append(out)
            for column in self._appended:
                column.close()
            self._appended = []
            order = self.scratch.keep(np.argsort(joined[0], kind="stable"))
            self._columns = SegmentColumns(*joined, order=order, sorted_ids=self.scratch.keep(joined[0][order]))
            self.scratch.release()
        return self._columns

    def forget_segments(self) -> None:
        """Let the segments go (the totals stay): for the checks after the last that compares them."""
        for column in self._appended:
            column.close()
        self._appended, self._parts, self._columns = [], [], None

    def segment(self, k: int) -> Segment:
        """Segment ``k`` (an index into `columns`) as a `Segment`."""
        c = self.columns
        return Segment(self.shards[int(c.shard[k])], int(c.row[k]), int(c.offset[k]), int(c.length[k]),
                       int(c.supervised[k]), f"{int(c.ids_hash[k]):016x}", f"{int(c.labels_hash[k]):016x}")

    def segments_of(self, example_id: int) -> list[Segment]:
        """Every segment holding ``example_id``, in the order the shards were read."""
        return [self.segment(k) for k in self.columns.of(example_id).tolist()]

    def digests_at(self, example_id: int, where: tuple[str, int, int, int]) -> tuple[str, str] | None:
        """The kept digests of the tokens and labels at ``where`` (shard, row, offset, length), when that
        is one of ``example_id``'s segments; None otherwise (the span must be read again to know)."""
        segment = next((s for s in self.segments_of(example_id) if s.where == where), None)
        return None if segment is None else (segment.ids_hash, segment.labels_hash)

    def tokens(self, shard: str, row: int, offset: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The ids and labels at ``offset`` of a pack, read again from its shard; None if the shard was not
        readable or the row holds no such span."""
        if shard not in self.totals or not 0 <= row < self.totals[shard].rows or offset < 0 or length < 1:
            return None
        if self._cached is None or self._cached.name != shard:  # callers ask shard by shard: keep the last one
            self._cached = load_flat(read_shard(self.directory / shard), shard)
        flat = self._cached
        a, end = flat.row_offsets[row] + offset, flat.row_offsets[row + 1]
        if a + length > end:
            return None
        return flat.ids[a:a + length], flat.labels[a:a + length]


def index_shard(shard: FlatShard) -> tuple[ShardTotals, tuple[np.ndarray, ...]]:
    """One shard's totals and its segments as columns (every `FIELDS` but ``shard``, which `PackIndex` numbers):
    those of every row whose cu_seqlens tile it (pack_layout reports the others, which then have no segment:
    global names their examples as in no pack)."""
    supervised = np.concatenate([[0], np.cumsum(shard.labels != IGNORE_INDEX)])
    totals = ShardTotals(shard.rows, len(shard.ids), int(supervised[-1]))
    found: list[tuple] = []
    for r in range(shard.rows):
        cu, base = shard.cu[r], int(shard.row_offsets[r])
        if cu_problem(cu, int(shard.row_offsets[r + 1]) - base, len(shard.example_ids[r])):
            continue
        counts = (supervised[base + cu[1:]] - supervised[base + cu[:-1]]).tolist()
        cu = cu.tolist()
        for k, eid in enumerate(shard.example_ids[r].tolist()):
            if k + 1 >= len(cu):
                continue  # pack_layout reports ids without a cu_seqlens span
            a, b = base + cu[k], base + cu[k + 1]
            found.append((eid, r, cu[k], cu[k + 1] - cu[k], counts[k], digest(shard.ids[a:b]),
                          digest(shard.labels[a:b])))
    columns = list(zip(*found)) if found else [()] * (len(FIELDS) - 1)
    return totals, tuple(np.array(c, dtype=t) for c, t in zip(columns, DTYPES[:1] + DTYPES[2:]))


def digest(ids: np.ndarray) -> int:
    """`packcli.contract.token_hash` of ``ids`` as the uint64 its 16 hex digits spell."""
    return int.from_bytes(hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int32).tobytes(), digest_size=8).digest(),
                          "big")
