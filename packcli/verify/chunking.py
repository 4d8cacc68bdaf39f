"""The plan check's half for split examples: the seam table's chunk rows against the chunks the re-derived
cut gives, one for one.

`packcli.verify.replan` cuts every reconstructed over-long example again (`packcli.job.chunks`) and
expands it into its expected rows (`packcli.job.fates.split_rows`). Here each example's rows are matched
to those by chunk index: a chunk the cut has and the table lacks lost its tokens; a chunk the table has
and the cut does not, or a chunk named twice, duplicated them. Matched rows are then compared column by
column (status, length, supervised counts, ``chunk_start``) and placed by the plan check, and their
tokens and labels by reconstruction, so together every chunk, the chunk count, and the tiling of the
example (no token lost, none repeated beyond the pinned overlap) are proved.
"""

from __future__ import annotations

import numpy as np

from packcli.artifact.manifest import PackSettings
from packcli.contract import IN_PACKS
from packcli.job.chunks import Cut, SplitRule
from packcli.job.fates import Chunked
from packcli.job.scratch import IN_MEMORY, Scratch, blocks
from packcli.verify.columns import SeamColumns
from packcli.verify.report import CheckResult, Violation


def match_chunks(rows: SeamColumns, starts: np.ndarray, expected: Chunked, length: np.ndarray,
                 settings: PackSettings, result: CheckResult, scratch: Scratch = IN_MEMORY) -> np.ndarray:
    """Per seam-table row, the expected row (index into ``expected``) it is, or -1 (a ``scratch`` column); every
    row without its expected chunk and every expected chunk without its row reported.

    Args:
        starts: where each example's rows start (`packcli.verify.replan.example_starts`), and the end.
        expected: the rows the re-derived fates give, one per example or per chunk of a split example.
        length: per example, its (reconstructed) length, for the messages.
    """
    n = len(rows["chunk"])
    if _in_step(rows, starts, expected, scratch):  # the common case: every example has its rows, in order
        return scratch.arange(n)
    match = scratch.full(n, -1, np.int64)
    # A table whose rows are not the expected ones: matched example by example, in memory (a damaged table costs
    # more than a sound one).
    chunks = np.asarray(rows["chunk"], np.int64)
    count = len(starts) - 1
    per_example = np.bincount(expected.example, minlength=count)
    first = np.concatenate([[0], np.cumsum(per_example)]).astype(np.int64)
    for j in range(count):
        mine = range(int(starts[j]), int(starts[j + 1]))
        want = {int(expected.chunk[m]): m for m in range(int(first[j]), int(first[j + 1]))}
        named = [int(chunks[i]) for i in mine]
        if sorted(named) == sorted(want):  # each expected chunk once, whatever the order of the rows
            match[list(mine)] = [want[k] for k in named]
            continue
        _match_example(rows, mine, want, expected, int(length[j]), settings, match, result)
    return match


def _in_step(rows: SeamColumns, starts: np.ndarray, expected: Chunked, scratch: Scratch) -> bool:
    """Whether row ``i`` of the table is expected row ``i``: as many rows as expected, each of the example and
    chunk its expected row is (both are grouped by example in order, so this is every example holding as many
    rows as it expects, its chunks in order). Compared a block of rows at a time."""
    chunks = np.asarray(rows["chunk"])
    if len(chunks) != len(expected.example):
        return False
    for block in blocks(len(chunks), scratch):
        example = np.searchsorted(starts, np.arange(block.start, block.stop), side="right") - 1  # each row's
        if not (np.array_equal(example, expected.example[block]) and np.array_equal(chunks[block],
                                                                                   expected.chunk[block])):
            return False
    return True


def _match_example(rows: SeamColumns, mine: range, want: dict[int, int], expected: Chunked, length: int,
                   settings: PackSettings, match: np.ndarray, result: CheckResult) -> None:
    """Match one example's rows to its expected chunks, reporting what does not pair up."""
    i0 = mine.start
    loc = dict(example_id=rows["example_id"][i0], source=rows["source"][i0], line=rows["line"][i0])
    cut = (f"cutting its {length} tokens under config.overlong {settings.overlong!r}, config.capacity "
           f"{settings.capacity}" + (f", config.split_overlap {settings.split_overlap}"
                                     if settings.overlong == "split" else "") + f" gives {len(want)} "
           + ("chunks" if len(want) > 1 else "row (no chunks)"))
    taken: set[int] = set()
    for i in mine:
        k = int(rows["chunk"][i])
        if k in want and k not in taken:
            match[i] = want[k]
            taken.add(k)
        elif k in taken:
            result.fail(Violation(f"chunk {k} has a second row: its tokens would be trained on twice ({cut})",
                                  field="chunk", **loc))
        else:
            result.fail(Violation(f"chunk {k} is not a chunk of the example: {cut}", field="chunk", **loc))
    for k, m in sorted(want.items()):
        if k not in taken:
            a, n = int(expected.chunk_start[m]), int(expected.span[m])
            result.fail(Violation(f"chunk {k} (tokens {a}..{a + n} of the example) has no row: its tokens are lost "
                                  f"({cut})", field="chunk", **loc))


def claimed_cut(rows: SeamColumns, group: range, length: int, rule: SplitRule) -> Cut:
    """The cut an over-long example's rows claim, for when reconstruction did not run: chunk starts and
    lengths from ``rule`` (the arithmetic needs no tokens), and per chunk what its row says it keeps, its
    supervised counts and why it was dropped; a chunk with no row keeps nothing. Under ``truncate`` only
    chunk 0 is read (what the truncated row holds, nothing for a dropped one)."""
    start = rule.starts(length)
    end = np.minimum(start + rule.capacity, length)
    supervised, owned = np.zeros(len(start), np.int64), np.zeros(len(start), np.int64)
    kept = np.zeros(len(start), dtype=bool)
    reasons = ["holds no supervised token"] * len(start)
    for i in group:
        k = rows["chunk"][i]
        if not 0 <= k < len(start):
            continue  # match_chunks reports it
        kept[k] = rows["status"][i] in IN_PACKS
        supervised[k] = rows["supervised"][i]
        owned[k] = rows["supervised"][i] + rows["supervised_lost"][i]
        reasons[k] = "" if kept[k] else rows["reason"][i].partition(f"chunk {k} dropped: ")[2]
    return Cut(start, end - start, supervised, owned, kept, tuple(reasons))
