"""From the tokenized examples to the packing plan: over-long examples, the pack plan, the shards' layout.

Packing needs every length before it decides (global BFD), which the example index provides; only
over-long examples are read back from the spills (to count what truncation keeps). The plan is a
pure function of the lengths and the pinned configuration, so ``verify`` can re-derive it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.config import Overlong, PackConfig
from packcli.contract import DROPPED, IGNORE_INDEX, PACKED, REJECTED, TRUNCATED, shard_name
from packcli.errors import BudgetError
from packcli.ingest import InputFile
from packcli.job.spill import SpillReader
from packcli.job.units import ExampleIndex
from packcli.job.write import ShardTask
from packcli.pack import PackPlan, check_budgets, pack_lengths


@dataclass
class Fates:
    """Per example, in input order, after the over-long policy: its status code, the tokens and
    supervised tokens that go into a pack, and the reason it is not packed whole."""

    status: npt.NDArray[np.int8]
    used_len: npt.NDArray[np.int64]
    used_sup: npt.NDArray[np.int64]
    reasons: list[str]

    @property
    def packable(self) -> npt.NDArray[np.int64]:
        """Indices of the examples that go into packs (packed whole or truncated)."""
        return np.flatnonzero((self.status == PACKED) | (self.status == TRUNCATED))


def apply_overlong(index: ExampleIndex, spill: SpillReader, capacity: int, overlong: Overlong) -> Fates:
    """Drop or truncate examples longer than ``capacity``; a truncation that would keep no supervised
    token drops the example instead (training on it would teach nothing)."""
    status = np.asarray(index.status, dtype=np.int8)
    full_len = np.asarray(index.length, dtype=np.int64)
    packed = status == PACKED  # a rejected or duplicate record puts nothing into a pack
    fates = Fates(status, np.where(packed, full_len, 0), np.where(packed, np.asarray(index.supervised, np.int64), 0),
                  list(index.reason))
    for i in np.flatnonzero((status == PACKED) & (full_len > capacity)):
        reason = f"{full_len[i]} tokens > capacity {capacity}"
        if overlong is Overlong.truncate:
            kept = int(np.count_nonzero(spill.read(index.spill_offset[i], capacity)[1] != IGNORE_INDEX))
            if kept:
                status[i], fates.used_len[i], fates.used_sup[i] = TRUNCATED, capacity, kept
                fates.reasons[i] = reason + f"; truncated to {capacity}"
                continue
            reason += "; truncation would keep no supervised tokens"
        status[i], fates.used_len[i], fates.used_sup[i] = DROPPED, 0, 0
        fates.reasons[i] = reason
    return fates


def check_losses(index: ExampleIndex, fates: Fates, files: Sequence[InputFile], max_fraction: float) -> None:
    """Fail (before anything is written) when no example is packed, or when the records rejected or
    dropped as over-long exceed ``max_fraction`` of all records; the message gives the most common
    reasons with their counts and one place each occurs.

    Raises:
        BudgetError: the run would train on nothing, or on what is left of a wrong template, format or capacity.
    """
    records = len(fates.status)
    lost = np.flatnonzero((fates.status == REJECTED) | (fates.status == DROPPED))
    packed = int(np.count_nonzero((fates.status == PACKED) | (fates.status == TRUNCATED)))  # not duplicates
    if packed and len(lost) <= max_fraction * records:
        return
    reasons: Counter[str] = Counter()
    first: dict[str, str] = {}
    for i in lost.tolist():
        # over-long drops differ only in their length: one reason for all of them
        reason = "longer than --capacity" if fates.status[i] == DROPPED else fates.reasons[i]
        reasons[reason] += 1
        first.setdefault(reason, f"{files[index.file_index[i]].name}:{index.line[i]}")
    top = "; ".join(f"{count} x {reason} (e.g. {first[reason]})" for reason, count in reasons.most_common(3))
    more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    what = ("no example was packed" if not packed else
            f"{len(lost):,} of {records:,} records ({len(lost) / records:.1%}) were rejected or dropped, more "
            f"than --max-reject-fraction {max_fraction:g}")
    raise BudgetError(f"{what}, nothing written: {top}{more}",
                      "fix the records, the --template/--format or the --capacity; or raise --max-reject-fraction")


def plan_packs(fates: Fates, config: PackConfig) -> PackPlan:
    """The pack plan of the packable examples under the pinned strategy, or `BudgetError` if it
    misses a density or displacement budget (nothing is written then)."""
    plan = pack_lengths(fates.used_len[fates.packable], config.capacity, strategy=config.strategy,
                        window=config.window, seed=config.seed, shuffle=config.shuffle,
                        shuffle_packs=config.shuffle_packs)
    problems = check_budgets(plan, min_density=config.min_density, max_displacement=config.max_displacement)
    if problems:
        raise BudgetError("budget not met, nothing written: " + "; ".join(problems),
                          "choose the strategy named above, or relax the budget")
    return plan


@dataclass(frozen=True)
class ShardLayout:
    """The shard tasks, and per example (input order) where it lands: shard index, row, token offset
    (-1 where not packed); ``task_rows[k]`` are shard ``k``'s examples in packed order."""

    tasks: list[ShardTask]
    task_rows: list[npt.NDArray[np.int64]]
    shard: npt.NDArray[np.int32]
    row: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int32]


def lay_out_shards(plan: PackPlan, fates: Fates, index: ExampleIndex, packs_per_shard: int, directory: str
                   ) -> ShardLayout:
    """Cut the plan into shards of ``packs_per_shard`` packs and say where each example lands."""
    n = len(index.ids)
    ordered = fates.packable[plan.order]  # example rows in packed order
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    ids = np.asarray(index.ids, dtype=np.int64)
    shard_of, row_col, off_col = (np.full(n, -1, dtype=np.int32) for _ in range(3))
    tasks, task_rows = [], []
    for k in range(-(-plan.num_packs // packs_per_shard)):
        p0, p1 = k * packs_per_shard, min((k + 1) * packs_per_shard, plan.num_packs)
        rows = ordered[plan.pack_offsets[p0]:plan.pack_offsets[p1]]
        lens = fates.used_len[rows]
        tasks.append(ShardTask(k, f"{directory}/{shard_name(k)}", index.spill_offset[rows], lens,
                               ex_per_pack[p0:p1], ids[rows]))
        task_rows.append(rows)
        local = np.concatenate([[0], np.cumsum(lens)])
        pack_rows = np.repeat(np.arange(p1 - p0, dtype=np.int32), ex_per_pack[p0:p1])
        shard_of[rows] = k
        row_col[rows] = pack_rows
        off_col[rows] = local[:-1] - local[plan.pack_offsets[p0:p1] - plan.pack_offsets[p0]][pack_rows]
    return ShardLayout(tasks, task_rows, shard_of, row_col, off_col)
