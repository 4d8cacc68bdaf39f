"""From the examples' fates to the packing plan: the pinned settings, the pack plan, the shards' layout.

Packing needs every length before it decides (global BFD), which the example index provides; what
becomes of over-long examples is decided before (`packcli.job.fates`: a split example becomes one row
per chunk, and each chunk is packed like any example). The plan is a
pure function of the lengths and the pinned settings (`packcli.artifact.manifest.PackSettings`, the
manifest's ``config``), and every step here takes plain arrays, so ``verify`` re-runs these same functions on
the lengths it reconstructs (`packcli.verify.replan`): same inputs and config give the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.artifact.manifest import PackSettings
from packcli.contract import IN_PACK_CODES, shard_name
from packcli.errors import BudgetError
from packcli.job.fates import Fates
from packcli.job.scratch import IN_MEMORY, Scratch, blocks
from packcli.job.units import ExampleIndex
from packcli.pack import PackPlan, check_budgets, pack_lengths


@dataclass(frozen=True)
class ShardTask:
    """Shard ``index``: its examples in packed order and how many of them make each pack (row)."""

    index: int
    path: str
    spill_offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    examples_per_pack: npt.NDArray[np.int64]
    example_ids: npt.NDArray[np.int64]
    masked: npt.NDArray[np.int64]  # labels masked at each example's start: its first, and a chunk's overlap

    @property
    def label(self) -> str:
        """How an error names the task."""
        return shard_name(self.index)


def plan_examples(fates: Fates, settings: PackSettings, scratch: Scratch = IN_MEMORY) -> PackPlan:
    """The pack plan of the packable examples under the pinned strategy (budgets not checked). The plan's
    per-example arrays, and the planner's own while it runs, are ``scratch``'s (`packcli.job.scratch`), their pages
    handed back whenever the planner starts a new array."""
    rows = packable_rows(fates, scratch)
    lengths = scratch.empty(len(rows), np.int64)
    np.take(fates.used_len, rows, out=lengths, mode="clip")  # rows are indices of used_len: "raise" would buffer
    del rows

    def allocate(n: int, dtype: npt.DTypeLike) -> np.ndarray:
        scratch.release()  # a new work array is a new step: the pages the steps before touched go back (file-backed)
        return scratch.empty(n, dtype)

    return pack_lengths(lengths, settings.capacity, strategy=settings.strategy, window=settings.window,
                        seed=settings.seed, shuffle=settings.shuffle, shuffle_packs=settings.shuffle_packs,
                        allocate=allocate)


def plan_packs(fates: Fates, settings: PackSettings, scratch: Scratch = IN_MEMORY) -> PackPlan:
    """`plan_examples`, or `BudgetError` if the plan misses a density or displacement budget (nothing
    is written then). The plan's per-example arrays are ``scratch``'s (`packcli.job.scratch`)."""
    plan = plan_examples(fates, settings, scratch)
    problems = check_budgets(plan, settings)
    if problems:
        raise BudgetError("budget not met, nothing written: " + "; ".join(problems),
                          "choose the strategy named above, or relax the budget")
    return plan


def plan_metrics(plan: PackPlan, fates: Fates, capacity: int) -> dict[str, int | float]:
    """The manifest's ``metrics``: the plan's (`PackMetrics`) and the supervised density at ``capacity``."""
    metrics = plan.metrics.to_dict()
    supervised = sum(int(fates.used_sup[rows][np.isin(fates.status[rows], IN_PACK_CODES)].sum())  # `Fates.packable`
                     for rows in blocks(len(fates.status)))
    metrics["supervised_density"] = supervised / (plan.num_packs * capacity) if plan.num_packs else 0.0
    return metrics


@dataclass(frozen=True)
class Placement:
    """Where each example lands: per example (input order) its shard index, row and token offset in
    the row (-1 where not packed); ``ordered`` holds the packable examples in packed order."""

    ordered: npt.NDArray[np.int64]
    shard: npt.NDArray[np.int32]
    row: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int32]
    num_shards: int


def packable_rows(fates: Fates, scratch: Scratch = IN_MEMORY) -> npt.NDArray[np.int64]:
    """`Fates.packable` as a ``scratch`` column, found a block at a time (no in-memory index of every example)."""
    def found(rows: slice) -> npt.NDArray[np.int64]:
        return np.flatnonzero(np.isin(fates.status[rows], IN_PACK_CODES)) + rows.start

    n = len(fates.status)
    out = scratch.empty(sum(len(found(rows)) for rows in blocks(n)), np.int64)
    at = 0
    for rows in blocks(n, scratch):
        part = found(rows)
        out[at:at + len(part)] = part
        at += len(part)
    return out


def place_examples(plan: PackPlan, fates: Fates, packs_per_shard: int, scratch: Scratch = IN_MEMORY) -> Placement:
    """Cut the plan into shards of ``packs_per_shard`` packs and say where each example lands (the columns
    are ``scratch``'s: `packcli.job.scratch`; worked out a block of packed positions at a time, so the in-memory
    work arrays are a block's, not the corpus's)."""
    n = len(fates.status)
    ordered = scratch.take(packable_rows(fates, scratch), plan.order)
    offsets = plan.pack_offsets
    shard_of, row_col, off_col = (scratch.full(n, -1, np.int32) for _ in range(3))
    before = 0  # tokens of the packed positions before the block
    pack_start = 0  # tokens before the first position of the pack the block starts in
    for block in blocks(len(ordered), scratch):
        rows = ordered[block]
        pack = np.searchsorted(offsets, np.arange(block.start, block.stop), side="right") - 1  # each position's
        lengths = fates.used_len[rows]
        at = np.cumsum(lengths) - lengths + before  # tokens before each position
        first = offsets[pack] - block.start  # each position's pack's first position, within the block (< 0: before it)
        starts = np.where(first >= 0, at[np.maximum(first, 0)], pack_start)
        shard_of[rows] = pack // packs_per_shard
        row_col[rows] = pack % packs_per_shard
        off_col[rows] = at - starts
        before, pack_start = int(at[-1] + lengths[-1]), int(starts[-1])
    return Placement(ordered, shard_of, row_col, off_col, -(-plan.num_packs // packs_per_shard))


@dataclass(frozen=True)
class ShardLayout:
    """The shard tasks and where each example lands; ``task_rows[k]`` are shard ``k``'s examples in
    packed order."""

    tasks: list[ShardTask]
    task_rows: list[npt.NDArray[np.int64]]
    placement: Placement


def lay_out_shards(plan: PackPlan, fates: Fates, index: ExampleIndex, masked: npt.NDArray[np.int64],
                   packs_per_shard: int, directory: str, scratch: Scratch = IN_MEMORY) -> ShardLayout:
    """One shard task per ``packs_per_shard`` packs of the plan (`place_examples`); ``masked``: per row,
    labels to mask at its start (`packcli.job.chunks.SplitRule.masks`). The tasks' arrays are views of
    columns in packed order (``scratch``'s): a task pickled for a worker carries its own slice alone."""
    placement = place_examples(plan, fates, packs_per_shard, scratch)
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    ordered = placement.ordered
    spill_offsets, lengths, ids, masks = (scratch.keep(np.asarray(column[ordered], np.int64)) for column in
                                          (index.spill_offset, fates.used_len, index.ids, masked))
    tasks, task_rows = [], []
    for k in range(placement.num_shards):
        p0, p1 = k * packs_per_shard, min((k + 1) * packs_per_shard, plan.num_packs)
        rows = slice(plan.pack_offsets[p0], plan.pack_offsets[p1])
        tasks.append(ShardTask(k, f"{directory}/{shard_name(k)}", spill_offsets[rows], lengths[rows],
                               ex_per_pack[p0:p1], ids[rows], masks[rows]))
        task_rows.append(ordered[rows])
    return ShardLayout(tasks, task_rows, placement)
