"""Shard writing as independent tasks: one shard's examples, read from the spills, into one file.

Once the packing plan is fixed, every shard is a pure function of its task (which examples, in which
order, cut into which packs) and the spills, so shards can be written in any order by any worker
and the bytes are the same: the local engine writes them one after another, the Ray engine as
tasks on the cluster, and `packcli.pipeline` puts the results back in shard order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from packcli.shards import ShardInfo, build_table, write_shard
from packcli.tokenization import token_hash
from packcli.units import SpillLayout, SpillReader


@dataclass(frozen=True)
class ShardTask:
    """Shard ``index``: its examples in packed order and how many of them make each pack (row)."""

    index: int
    path: str
    spill_offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    examples_per_pack: npt.NDArray[np.int64]
    example_ids: npt.NDArray[np.int64]


@dataclass(frozen=True)
class ShardResult:
    """The written shard, and the token hash of each of its examples (task order) for the seam table."""

    index: int
    info: ShardInfo
    token_hashes: list[str]


def write_shard_task(layout: SpillLayout, task: ShardTask) -> ShardResult:
    """Gather the task's examples from the spills, build the shard's table and write it to ``task.path``."""
    with SpillReader(layout) as reader:
        ids, labels = reader.gather(task.spill_offsets, task.lengths)
    table = build_table(ids, labels, task.lengths, task.examples_per_pack, task.example_ids)
    info = write_shard(table, Path(task.path))
    bounds = np.concatenate([[0], np.cumsum(task.lengths)]).tolist()
    hashes = [token_hash(ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    del table
    # Arrow's allocator keeps freed buffers for reuse; over many shards that grew the write stage's
    # RSS with the shard count (+210 MiB from 20k to 200k conversations). Hand them back each shard.
    pa.default_memory_pool().release_unused()
    return ShardResult(task.index, info, hashes)
