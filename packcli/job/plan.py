"""From the tokenized examples to the packing plan: over-long examples, the pack plan, the shards' layout.

Packing needs every length before it decides (global BFD), which the example index provides; only
over-long examples are read back from the spills (to cut them: what truncation keeps, which chunks a
split keeps, `packcli.job.chunks`). A split example becomes one row per chunk (`split_rows`) before
it is planned, and each chunk is packed like any example. The plan is a
pure function of the lengths and the pinned configuration (`PlanSettings`, the manifest's
``config``), and every step here takes plain arrays, so ``verify`` re-runs these same functions on
the lengths it reconstructs (`packcli.verify.plan`): same inputs and config give the same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from packcli.choices import Overlong
from packcli.contract import DROPPED, IN_PACK_CODES, PACKED, REJECTED, SPLIT, TRUNCATED, shard_name
from packcli.errors import BudgetError
from packcli.ingest import InputFile
from packcli.job.chunks import Cut, SplitRule, cut_example
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
    split_overlap: int
    split_min_last: int
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

    @property
    def rule(self) -> SplitRule:
        """How an over-long example is cut: into chunks under ``split``; under ``truncate`` its first chunk
        (the first ``capacity`` tokens) is what it keeps."""
        if self.overlong is Overlong.split:
            return SplitRule(self.capacity, self.split_overlap, self.split_min_last)
        return SplitRule(self.capacity)


@dataclass
class Fates:
    """Per example (or, after `split_rows`, per seam-table row), in input order, after the over-long
    policy: its status code, the tokens and supervised tokens that go into a pack, the supervised tokens
    the policy cost it, and the reason it is not packed whole. ``cuts`` holds each split example's
    chunks, by its index."""

    status: npt.NDArray[np.int8]
    used_len: npt.NDArray[np.int64]
    used_sup: npt.NDArray[np.int64]
    lost: npt.NDArray[np.int64]
    reasons: list[str]
    cuts: dict[int, Cut] = field(default_factory=dict)

    @property
    def packable(self) -> npt.NDArray[np.int64]:
        """Indices of the examples that go into packs (packed whole, truncated, or chunks of a split one)."""
        return np.flatnonzero(np.isin(self.status, IN_PACK_CODES))

    def take(self, rows: npt.NDArray[np.int64]) -> Fates:
        """These fates at ``rows`` (copies of the per-row arrays; ``cuts`` stay keyed by the original indices)."""
        reasons = self.reasons
        picked = [reasons[i] for start in range(0, len(rows), 1 << 16)  # not a list of every row's index
                  for i in rows[start:start + (1 << 16)].tolist()]
        return Fates(self.status[rows], self.used_len[rows], self.used_sup[rows], self.lost[rows], picked, self.cuts)


def decide_fates(status: npt.ArrayLike, length: npt.ArrayLike, supervised: npt.ArrayLike, reasons: list[str],
                 rule: SplitRule, overlong: Overlong, cut: Callable[[int], Cut]) -> Fates:
    """Drop, truncate or split examples longer than ``rule.capacity``. A truncation that would keep no
    supervised token drops the example instead (training on it would teach nothing), and so does a split
    whose every chunk is dropped (`packcli.job.chunks.cut_example`).

    Args:
        status: per example, `PACKED` (accepted), `REJECTED` or `DUPLICATE`; length, supervised: its full token
            and supervised counts; reasons: the rejection reasons ("" for accepted examples).
        rule: the capacity, and under ``split`` how chunks are cut (`PlanSettings.rule`).
        cut: example ``i`` cut under ``rule`` (asked only of over-long examples under ``truncate`` or
            ``split``; truncation keeps its first chunk).
    """
    capacity = rule.capacity
    status = np.array(status, dtype=np.int8)  # a copy: the caller's array stays as it was
    full_len = np.asarray(length, dtype=np.int64)
    full_sup = np.asarray(supervised, np.int64)
    packed = status == PACKED  # a rejected or duplicate record puts nothing into a pack
    fates = Fates(status, np.where(packed, full_len, 0), np.where(packed, full_sup, 0), np.zeros(len(status), np.int64),
                  list(reasons))
    for i in np.flatnonzero(packed & (full_len > capacity)).tolist():
        reason = f"{full_len[i]} tokens > capacity {capacity}"
        if overlong is Overlong.truncate:
            kept = int(cut(i).supervised[0])
            if kept:
                status[i], fates.used_len[i], fates.used_sup[i] = TRUNCATED, capacity, kept
                fates.reasons[i] = reason + f"; truncated to {capacity}"
                fates.lost[i] = full_sup[i] - kept
                continue
            reason += "; truncation would keep no supervised tokens"
        elif overlong is Overlong.split:
            chunks = cut(i)
            if chunks.kept.any():
                status[i], fates.used_len[i], fates.used_sup[i] = SPLIT, chunks.kept_tokens, chunks.kept_supervised
                fates.reasons[i] = reason + f"; split into {chunks.count} chunks"
                fates.lost[i], fates.cuts[i] = full_sup[i] - chunks.kept_supervised, chunks
                continue
            reason += "; no chunk holds a supervised token"
        status[i], fates.used_len[i], fates.used_sup[i], fates.lost[i] = DROPPED, 0, 0, full_sup[i]
        fates.reasons[i] = reason
    return fates


def apply_overlong(index: ExampleIndex, spill: SpillReader, rule: SplitRule, overlong: Overlong) -> Fates:
    """`decide_fates` for the pack job: what truncation and splitting keep is read back from the spills
    (truncation keeps the first chunk: only its ``capacity`` labels are read)."""
    def cut(i: int) -> Cut:
        tokens = rule.capacity if overlong is Overlong.truncate else index.length[i]
        return cut_example(spill.read(index.spill_offset[i], tokens)[1], rule)

    return decide_fates(index.status, index.length, index.supervised, index.reason, rule, overlong, cut)


@dataclass(frozen=True)
class Chunked:
    """`split_rows`' result: one row per chunk of a split example and one per any other example, in input
    order, chunks in order. ``example``: the row's example (index into the fates it was made from);
    ``chunk``, ``chunk_start``: which chunk and where it starts in the example (0, 0 for a whole one);
    ``span``: the tokens the row stands for (its chunk, or the whole example)."""

    fates: Fates
    example: npt.NDArray[np.int64]
    chunk: npt.NDArray[np.int32]
    chunk_start: npt.NDArray[np.int64]
    span: npt.NDArray[np.int64]


def split_rows(fates: Fates, length: npt.NDArray[np.int64], key: npt.NDArray[np.int64] | None = None) -> Chunked:
    """One row per chunk of every split example (status ``split``, or ``dropped`` with the chunk's reason),
    every other example one row as it is.

    Args:
        fates: per example, with ``cuts`` for the split ones.
        length: per example, its full length.
        key: per example, its key in ``fates.cuts`` (a mixture's copies of a record share their record's
            cut); None: the example's own index.
    """
    n = len(fates.status)
    key = np.arange(n, dtype=np.int64) if key is None else np.asarray(key, np.int64)
    split = fates.status == SPLIT
    counts = np.ones(n, np.int64)
    counts[split] = [fates.cuts[k].count for k in key[split].tolist()]
    example = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    chunk = (np.arange(len(example)) - np.repeat(first, counts)).astype(np.int32)
    rows = fates.take(example)
    chunk_start = np.zeros(len(example), np.int64)
    span = np.asarray(length, np.int64)[example].copy()
    for i in np.flatnonzero(split).tolist():
        c = fates.cuts[int(key[i])]
        at = slice(first[i], first[i] + c.count)
        chunk_start[at], span[at] = c.start, c.length
        rows.status[at] = np.where(c.kept, SPLIT, DROPPED)
        rows.used_len[at] = np.where(c.kept, c.length, 0)
        rows.used_sup[at] = np.where(c.kept, c.supervised, 0)
        rows.lost[at] = c.owned - rows.used_sup[at]
        for k, why in enumerate(c.reasons):
            if why:
                rows.reasons[first[i] + k] = f"{fates.reasons[i]}; chunk {k} dropped: {why}"
    return Chunked(Fates(rows.status, rows.used_len, rows.used_sup, rows.lost, rows.reasons), example, chunk,
                   chunk_start, span)


def loss_problem(fates: Fates, where: Callable[[int], str], max_fraction: float) -> tuple[str, str] | None:
    """What is wrong when no example is packed, or when the records rejected or dropped as over-long
    exceed ``max_fraction`` of all records: (what, the most common reasons with their counts and
    ``where`` one of each occurs); None when the run may go on."""
    records = len(fates.status)
    lost = np.flatnonzero((fates.status == REJECTED) | (fates.status == DROPPED))
    packed = len(fates.packable)  # not duplicates
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


def lay_out_shards(plan: PackPlan, fates: Fates, index: ExampleIndex, masked: npt.NDArray[np.int64],
                   packs_per_shard: int, directory: str) -> ShardLayout:
    """One shard task per ``packs_per_shard`` packs of the plan (`place_examples`); ``masked``: per row,
    labels to mask at its start (`packcli.job.chunks.SplitRule.masks`)."""
    placement = place_examples(plan, fates, packs_per_shard)
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    ids = np.asarray(index.ids, dtype=np.int64)
    tasks, task_rows = [], []
    for k in range(placement.num_shards):
        p0, p1 = k * packs_per_shard, min((k + 1) * packs_per_shard, plan.num_packs)
        rows = placement.ordered[plan.pack_offsets[p0]:plan.pack_offsets[p1]]
        tasks.append(ShardTask(k, f"{directory}/{shard_name(k)}", index.spill_offset[rows], fates.used_len[rows],
                               ex_per_pack[p0:p1], ids[rows], masked[rows]))
        task_rows.append(rows)
    return ShardLayout(tasks, task_rows, placement)

