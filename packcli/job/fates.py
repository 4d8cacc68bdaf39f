"""What becomes of each example before packing: packed whole, truncated, split into chunks, dropped as
over-long, rejected or a duplicate (`Fates`), one row per chunk of a split example (`split_rows`), and
whether the run lost too much to go on (`check_losses`).

Only over-long examples are read back from the spills, to cut them (what truncation keeps, which
chunks a split keeps: `packcli.job.chunks`). Every step takes plain arrays, so ``verify`` re-runs
them on what it reconstructs. No packing kernel is imported here: ``verify``'s bookkeeping reads fates
without numba's start-up (`packcli.job.select`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from packcli.choices import Overlong
from packcli.contract import DROPPED, IN_PACK_CODES, PACKED, REJECTED, SPLIT, TRUNCATED
from packcli.errors import BudgetError
from packcli.ingest import InputFile
from packcli.job.chunks import Cut, SplitRule, cut_example
from packcli.job.scratch import IN_MEMORY, Scratch, TextColumn, blocks, copy_texts, take_texts
from packcli.job.spill import SpillReader
from packcli.job.units import ExampleIndex


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
    reasons: list[str] | TextColumn  # a column of codes in pack's driver, a list in verify
    cuts: dict[int, Cut] = field(default_factory=dict)

    @property
    def packable(self) -> npt.NDArray[np.int64]:
        """Indices of the examples that go into packs (packed whole, truncated, or chunks of a split one)."""
        return np.flatnonzero(np.isin(self.status, IN_PACK_CODES))

    def take(self, rows: npt.NDArray[np.int64], scratch: Scratch = IN_MEMORY) -> Fates:
        """These fates at ``rows`` (copies of the per-row arrays, ``scratch``'s; ``cuts`` stay keyed by the original
        indices)."""
        return Fates(*(scratch.take(column, rows) for column in (self.status, self.used_len, self.used_sup, self.lost)),
                     take_texts(self.reasons, rows, scratch), self.cuts)


def decide_fates(status: npt.ArrayLike, length: npt.ArrayLike, supervised: npt.ArrayLike,
                 reasons: list[str] | TextColumn,
                 rule: SplitRule, overlong: Overlong, cut: Callable[[int], Cut], scratch: Scratch = IN_MEMORY) -> Fates:
    """Drop, truncate or split examples longer than ``rule.capacity``. A truncation that would keep no
    supervised token drops the example instead (training on it would teach nothing), and so does a split
    whose every chunk is dropped (`packcli.job.chunks.cut_example`).

    Args:
        status: per example, `PACKED` (accepted), `REJECTED` or `DUPLICATE`; length, supervised: its full token
            and supervised counts; reasons: the rejection reasons ("" for accepted examples).
        rule: the capacity, and under ``split`` how chunks are cut (`packcli.job.chunks.pinned_rule`).
        cut: example ``i`` cut under ``rule`` (asked only of over-long examples under ``truncate`` or
            ``split``; truncation keeps its first chunk).
        scratch: where the fates' columns live (`packcli.job.scratch`).
    """
    capacity = rule.capacity
    status = scratch.put(status, np.int8)  # a copy: the caller's array stays as it was
    full_len = np.asarray(length, dtype=np.int64)
    full_sup = np.asarray(supervised, np.int64)
    used_len, used_sup = scratch.zeros(len(status), np.int64), scratch.zeros(len(status), np.int64)
    longer = [np.zeros(0, np.int64)]  # the packed examples over the capacity, a block at a time
    for rows in blocks(len(status), scratch):  # a block's masks, not the corpus's
        packed = status[rows] == PACKED  # a rejected or duplicate record puts nothing into a pack
        np.copyto(used_len[rows], full_len[rows], where=packed)
        np.copyto(used_sup[rows], full_sup[rows], where=packed)
        longer.append(np.flatnonzero(packed & (full_len[rows] > capacity)) + rows.start)
    fates = Fates(status, used_len, used_sup, scratch.zeros(len(status), np.int64), copy_texts(reasons, scratch))
    for i in np.concatenate(longer).tolist():
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


def apply_overlong(index: ExampleIndex, spill: SpillReader, rule: SplitRule, overlong: Overlong,
                   scratch: Scratch = IN_MEMORY) -> Fates:
    """`decide_fates` for the pack job: what truncation and splitting keep is read back from the spills
    (truncation keeps the first chunk: only its ``capacity`` labels are read)."""
    def cut(i: int) -> Cut:
        tokens = rule.capacity if overlong is Overlong.truncate else index.length[i]
        return cut_example(spill.read(index.spill_offset[i], tokens)[1], rule)

    return decide_fates(index.status, index.length, index.supervised, index.reason, rule, overlong, cut, scratch)


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


def split_rows(fates: Fates, length: npt.NDArray[np.int64], key: npt.NDArray[np.int64] | None = None,
               scratch: Scratch = IN_MEMORY) -> Chunked:
    """One row per chunk of every split example (status ``split``, or ``dropped`` with the chunk's reason),
    every other example one row as it is.

    Args:
        fates: per example, with ``cuts`` for the split ones.
        length: per example, its full length.
        key: per example, its key in ``fates.cuts`` (a mixture's copies of a record share their record's
            cut); None: the example's own index.
        scratch: where the new per-row columns live (`packcli.job.scratch`).

    With no split example every row is its example: the result's fates are ``fates`` itself (its arrays,
    not a copy of them: a second copy of every example's fates was ``verify``'s plan-check peak).
    """
    n = len(fates.status)
    split = fates.status == SPLIT
    if not split.any():
        example = scratch.empty(n, np.int64)
        for rows in blocks(n, scratch):  # not an in-memory arange of every row
            example[rows] = np.arange(rows.start, rows.stop, dtype=np.int64)
        return Chunked(Fates(fates.status, fates.used_len, fates.used_sup, fates.lost, fates.reasons),
                       example, scratch.zeros(n, np.int32), scratch.zeros(n, np.int64), scratch.put(length, np.int64))
    key = np.arange(n, dtype=np.int64) if key is None else np.asarray(key, np.int64)
    counts = np.ones(n, np.int64)
    counts[split] = [fates.cuts[k].count for k in key[split].tolist()]
    example = scratch.keep(np.repeat(np.arange(n, dtype=np.int64), counts))
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    chunk = scratch.keep((np.arange(len(example)) - np.repeat(first, counts)).astype(np.int32))
    rows = fates.take(example, scratch)
    chunk_start = scratch.zeros(len(example), np.int64)
    span = scratch.take(np.asarray(length, np.int64), example)
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
    lost_count = packed = 0  # counted a block at a time: the records' indices only when there is a problem to name
    for rows in blocks(records):
        status = fates.status[rows]
        lost_count += int(np.count_nonzero((status == REJECTED) | (status == DROPPED)))
        packed += int(np.count_nonzero(np.isin(status, IN_PACK_CODES)))  # `Fates.packable`: not duplicates
    if packed and lost_count <= max_fraction * records:
        return None
    lost = np.flatnonzero((fates.status == REJECTED) | (fates.status == DROPPED))
    reasons: Counter[str] = Counter()
    first: dict[str, str] = {}
    for i in lost.tolist():
        # over-long drops differ only in their length: one reason for all of them
        reason = "longer than `capacity`" if fates.status[i] == DROPPED else fates.reasons[i]
        reasons[reason] += 1
        first.setdefault(reason, where(i))
    top = "; ".join(f"{count} x {reason} (e.g. {first[reason]})" for reason, count in reasons.most_common(3))
    more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    what = ("no example was packed" if not packed else
            f"{len(lost):,} of {records:,} records ({len(lost) / records:.1%}) were rejected or dropped, more "
            f"than `max_reject_fraction` {max_fraction:g}")
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
        steps.append("fix the rejected records, or the `template`, `input_format` or field mapping that rejects them")
    if np.any(dropped):
        longest = int(np.asarray(length, np.int64)[dropped].max())
        steps.append(f"raise `capacity` (the longest dropped example has {longest:,} tokens) or use "
                     "`overlong='truncate'`")
    if not steps:
        steps.append("check the inputs: no record made an example")
    if len(fates.packable):
        steps.append("or raise `max_reject_fraction` to train on what is left")
    return "; ".join(steps)
