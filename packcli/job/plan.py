"""From the tokenized examples to the packing plan: over-long examples, the pack plan, the shards' layout.

Packing needs every length before it decides (global BFD), which the example index provides; only
over-long examples are read back from the spills (to count what truncation keeps). The plan is a
pure function of the lengths and the pinned configuration (`PlanSettings`, the manifest's
``config``), and every step here takes plain arrays, so ``verify`` re-runs these same functions on
the lengths it reconstructs (`packcli.verify.plan`): same inputs and config give the same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from packcli.choices import Overlong
from packcli.contract import DROPPED, IGNORE_INDEX, PACKED, REJECTED, TRUNCATED, shard_name
from packcli.errors import BudgetError
from packcli.ingest import InputFile
from packcli.job.spill import SpillReader
from packcli.job.units import ExampleIndex
from packcli.job.write import ShardTask
from packcli.pack import PackPlan, check_budgets, pack_lengths


@dataclass(frozen=True)
class PlanSettings:
    """The pinned settings that decide fates, packs and shards (a subset of the manifest's ``config``)."""

    capacity: int
    strategy: str
    window: int | None
    seed: int
    shuffle: bool
    shuffle_packs: bool
    overlong: Overlong
    min_density: float | None
    max_displacement: float | None
    max_reject_fraction: float
    packs_per_shard: int

    @classmethod
    def of(cls, settings: Mapping[str, object]) -> PlanSettings:
        """From `PackConfig.seam_settings` or a manifest's ``config`` (same keys).

        Raises:
            KeyError: a setting is missing. ValueError: ``overlong`` is not a policy.
        """
        values = {f.name: settings[f.name] for f in fields(cls)}
        return cls(**dict(values, overlong=Overlong(values["overlong"])))


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


def decide_fates(status: npt.ArrayLike, length: npt.ArrayLike, supervised: npt.ArrayLike, reasons: list[str],
                 capacity: int, overlong: Overlong, kept_supervised: Callable[[int], int]) -> Fates:
    """Drop or truncate examples longer than ``capacity``; a truncation that would keep no supervised
    token drops the example instead (training on it would teach nothing).

    Args:
        status: per example, `PACKED` (accepted), `REJECTED` or `DUPLICATE`; length, supervised: its full token
            and supervised counts; reasons: the rejection reasons ("" for accepted examples).
        kept_supervised: supervised tokens among example ``i``'s first ``capacity`` (asked only of
            over-long examples under ``truncate``).
    """
    status = np.array(status, dtype=np.int8)  # a copy: the caller's array stays as it was
    full_len = np.asarray(length, dtype=np.int64)
    packed = status == PACKED  # a rejected or duplicate record puts nothing into a pack
    fates = Fates(status, np.where(packed, full_len, 0), np.where(packed, np.asarray(supervised, np.int64), 0),
                  list(reasons))
    for i in np.flatnonzero((status == PACKED) & (full_len > capacity)):
        reason = f"{full_len[i]} tokens > capacity {capacity}"
        if overlong is Overlong.truncate:
            kept = kept_supervised(int(i))
            if kept:
                status[i], fates.used_len[i], fates.used_sup[i] = TRUNCATED, capacity, kept
                fates.reasons[i] = reason + f"; truncated to {capacity}"
                continue
            reason += "; truncation would keep no supervised tokens"
        status[i], fates.used_len[i], fates.used_sup[i] = DROPPED, 0, 0
        fates.reasons[i] = reason
    return fates


def apply_overlong(index: ExampleIndex, spill: SpillReader, capacity: int, overlong: Overlong) -> Fates:
    """`decide_fates` for the pack job: what truncation keeps is read back from the spills."""
    def kept(i: int) -> int:
        return int(np.count_nonzero(spill.read(index.spill_offset[i], capacity)[1] != IGNORE_INDEX))

    return decide_fates(index.status, index.length, index.supervised, index.reason, capacity, overlong, kept)


def loss_problem(fates: Fates, where: Callable[[int], str], max_fraction: float) -> tuple[str, str] | None:
    """What is wrong when no example is packed, or when the records rejected or dropped as over-long
    exceed ``max_fraction`` of all records: (what, the most common reasons with their counts and
    ``where`` one of each occurs); None when the run may go on."""
    records = len(fates.status)
    lost = np.flatnonzero((fates.status == REJECTED) | (fates.status == DROPPED))
    packed = int(np.count_nonzero((fates.status == PACKED) | (fates.status == TRUNCATED)))  # not duplicates
    if packed and len(lost) <= max_fraction * records:
        return None
    reasons: Counter[str] = Counter()
    first: dict[str, str] = {}
    for i in lost.tolist():
        # over-long drops differ only in their length: one reason for all of them
        reason = "longer than --capacity" if fates.status[i] == DROPPED else fates.reasons[i]
        reasons[reason] += 1
        first.setdefault(reason, where(i))
    top = "; ".join(f"{count} x {reason} (e.g. {first[reason]})" for reason, count in reasons.most_common(3))
    more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    what = ("no example was packed" if not packed else
            f"{len(lost):,} of {records:,} records ({len(lost) / records:.1%}) were rejected or dropped, more "
            f"than --max-reject-fraction {max_fraction:g}")
    return what, top + more


def check_losses(index: ExampleIndex, fates: Fates, files: Sequence[InputFile], max_fraction: float) -> None:
    """Fail (before anything is written) on a `loss_problem`.

    Raises:
        BudgetError: the run would train on nothing, or on what is left of a wrong template, format or capacity.
    """
    problem = loss_problem(fates, lambda i: f"{files[index.file_index[i]].name}:{index.line[i]}", max_fraction)
    if problem:
        raise BudgetError(f"{problem[0]}, nothing written: {problem[1]}", loss_hint(fates, index.length))


def loss_hint(fates: Fates, length: npt.ArrayLike) -> str:
    """What to do about a `loss_problem`, for the losses there are: rejects (their reasons are in the
    message), over-long drops (the capacity they need), and the budget only when something was packed."""
    dropped = fates.status == DROPPED
    steps = []
    if np.any(fates.status == REJECTED):
        steps.append("fix the rejected records, or the --template, --format or field mapping that rejects them")
    if np.any(dropped):
        longest = int(np.asarray(length, np.int64)[dropped].max())
        steps.append(f"raise --capacity (the longest dropped example has {longest:,} tokens) or use --overlong truncate")
    if not steps:
        steps.append("check the inputs: no record made an example")
    if len(fates.packable):
        steps.append("or raise --max-reject-fraction to train on what is left")
    return "; ".join(steps)


def plan_examples(fates: Fates, settings: PlanSettings) -> PackPlan:
    """The pack plan of the packable examples under the pinned strategy (budgets not checked)."""
    return pack_lengths(fates.used_len[fates.packable], settings.capacity, strategy=settings.strategy,
                        window=settings.window, seed=settings.seed, shuffle=settings.shuffle,
                        shuffle_packs=settings.shuffle_packs)


def plan_packs(fates: Fates, settings: PlanSettings) -> PackPlan:
    """`plan_examples`, or `BudgetError` if the plan misses a density or displacement budget (nothing
    is written then)."""
    plan = plan_examples(fates, settings)
    problems = check_budgets(plan, min_density=settings.min_density, max_displacement=settings.max_displacement)
    if problems:
        raise BudgetError("budget not met, nothing written: " + "; ".join(problems),
                          "choose the strategy named above, or relax the budget")
    return plan


def plan_metrics(plan: PackPlan, fates: Fates) -> dict[str, int | float]:
    """The manifest's ``metrics``: the plan's (`PackMetrics`) and the supervised density."""
    metrics = plan.metrics.to_dict()
    supervised = int(fates.used_sup[fates.packable].sum())
    metrics["supervised_density"] = supervised / (plan.num_packs * plan.capacity) if plan.num_packs else 0.0
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


def place_examples(plan: PackPlan, fates: Fates, packs_per_shard: int) -> Placement:
    """Cut the plan into shards of ``packs_per_shard`` packs and say where each example lands."""
    n = len(fates.status)
    ordered = fates.packable[plan.order]
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    pack = np.repeat(np.arange(plan.num_packs, dtype=np.int64), ex_per_pack)
    starts = np.concatenate([[0], np.cumsum(fates.used_len[ordered])]).astype(np.int64)
    shard_of, row_col, off_col = (np.full(n, -1, dtype=np.int32) for _ in range(3))
    shard_of[ordered] = pack // packs_per_shard
    row_col[ordered] = pack % packs_per_shard
    off_col[ordered] = starts[:-1] - np.repeat(starts[plan.pack_offsets[:-1]], ex_per_pack)
    return Placement(ordered, shard_of, row_col, off_col, -(-plan.num_packs // packs_per_shard))


@dataclass(frozen=True)
class ShardLayout:
    """The shard tasks and where each example lands; ``task_rows[k]`` are shard ``k``'s examples in
    packed order."""

    tasks: list[ShardTask]
    task_rows: list[npt.NDArray[np.int64]]
    placement: Placement


def lay_out_shards(plan: PackPlan, fates: Fates, index: ExampleIndex, packs_per_shard: int, directory: str
                   ) -> ShardLayout:
    """One shard task per ``packs_per_shard`` packs of the plan (`place_examples`)."""
    placement = place_examples(plan, fates, packs_per_shard)
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    ids = np.asarray(index.ids, dtype=np.int64)
    tasks, task_rows = [], []
    for k in range(placement.num_shards):
        p0, p1 = k * packs_per_shard, min((k + 1) * packs_per_shard, plan.num_packs)
        rows = placement.ordered[plan.pack_offsets[p0]:plan.pack_offsets[p1]]
        tasks.append(ShardTask(k, f"{directory}/{shard_name(k)}", index.spill_offset[rows], fates.used_len[rows],
                               ex_per_pack[p0:p1], ids[rows]))
        task_rows.append(rows)
    return ShardLayout(tasks, task_rows, placement)

