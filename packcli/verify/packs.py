"""The packs as ``verify`` keeps them: each shard read once, checked, reduced, and let go.

Holding every shard's arrays made verify's memory grow with the artifact's tokens (12 bytes a packed
token). Instead integrity hands each shard as it reads it to the layout check and to `PackIndex.add`,
which keeps per pack segment (an example's cu_seqlens span) where it is, its supervised labels and
the digests of its tokens and labels (`packcli.contract.token_hash`), and per shard its totals. The
bookkeeping check compares those with the seam table, reconstruction with fresh tokenizations, and
the few spans that must be read token by token (a difference to explain, a truncated prefix, the
render oracle) are read again from their shard (`PackIndex.tokens`). What that costs per example:
docs/benchmarks-pipeline.md (memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packcli.artifact.shards import FlatShard, load_flat, read_shard
from packcli.contract import IGNORE_INDEX, token_hash
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


@dataclass
class PackIndex:
    """Every readable shard's segments by example id, and its totals; built by `add`, one shard at a time.

    ``segments`` holds an id's first segment, ``more`` the rest: the other chunks of a split example
    (docs/contract.md), or a copy a forger added (the bookkeeping check finds it unclaimed). Most ids
    have one segment, so the common case costs one dict entry.
    """

    directory: Path
    segments: dict[int, Segment] = field(default_factory=dict)
    more: dict[int, list[Segment]] = field(default_factory=dict)
    totals: dict[str, ShardTotals] = field(default_factory=dict)
    _cached: FlatShard | None = field(default=None, repr=False)

    def add(self, shard: FlatShard) -> None:
        """Index one shard's segments: those of every row whose cu_seqlens tile it (pack_layout reports the
        others, which then have no segment: global names their examples as in no pack)."""
        supervised = np.concatenate([[0], np.cumsum(shard.labels != IGNORE_INDEX)])
        self.totals[shard.name] = ShardTotals(shard.rows, len(shard.ids), int(supervised[-1]))
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
                segment = Segment(shard.name, r, cu[k], cu[k + 1] - cu[k], counts[k], token_hash(shard.ids[a:b]),
                                  token_hash(shard.labels[a:b]))
                if eid in self.segments:
                    self.more.setdefault(eid, []).append(segment)
                else:
                    self.segments[eid] = segment

    def segments_of(self, example_id: int) -> list[Segment]:
        """Every segment holding ``example_id``, in the order the shards were read."""
        first = self.segments.get(example_id)
        return [] if first is None else [first, *self.more.get(example_id, ())]

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
