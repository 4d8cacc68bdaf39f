"""Cutting an over-long example into chunks (``--overlong split``): one place for where chunks start,
which labels a chunk masks, and which chunks are kept. ``pack`` cuts the spilled examples with it,
``verify`` cuts every reconstructed example again, and ``stats`` counts what it would keep.

A chunk is a segment of its own, packed like any example: positions restart at 0, attention stays
inside it, and its first label is -100 like the first label of every segment (nothing before it in
the pack may predict it). With an overlap ``o``, chunk ``k > 0`` repeats the last ``o`` tokens of
chunk ``k - 1`` as context, and those tokens carry no loss there: each supervised token of the
example is supervised in at most one chunk, the one where it first appears (docs/contract.md).

    example of L = 10 tokens, capacity C = 4, overlap o = 1 (step C - o = 3)
    tokens    t0 t1 t2 t3 t4 t5 t6 t7 t8 t9
    chunk 0   t0 t1 t2 t3                     chunk_start 0   labels  -  t1 t2 t3
    chunk 1            t3 t4 t5 t6            chunk_start 3   labels  -  t4 t5 t6   t3: context only
    chunk 2                     t6 t7 t8 t9   chunk_start 6   labels  -  t7 t8 t9

Without overlap (the default) every token is in exactly one chunk, and the first token of each chunk
after the first loses its label: predicting it would need context the chunk cannot see. An overlap
of 1 or more keeps every label at the cost of ``o`` repeated tokens a chunk.

A chunk is dropped (its tokens counted as lost) when it supervises nothing (training on it teaches
nothing) or when it is the last and adds fewer than ``min_last`` tokens of its own (a short tail).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.artifact.fieldspec import setting_bounds
from packcli.artifact.manifest import PackSettings
from packcli.contract import IGNORE_INDEX


@dataclass(frozen=True)
class SplitRule:
    """How over-long examples are cut: chunks of at most ``capacity`` tokens, each after the first
    starting ``overlap`` tokens before the previous one ends; a last chunk with fewer than
    ``min_last`` tokens of its own is dropped. `problems` says which values are allowed."""

    capacity: int
    overlap: int = 0
    min_last: int = 1

    @property
    def step(self) -> int:
        """Tokens between consecutive chunk starts."""
        return self.capacity - self.overlap

    def problems(self) -> list[str]:
        """What is wrong with the values, naming the parameters (empty when they can cut)."""
        problems = []
        if not 0 <= self.overlap <= self.capacity // 2:
            problems.append(f"`split_overlap` must be from 0 to half the capacity ({self.capacity // 2:,}), so "
                            f"that no token sits in more than two chunks; got {self.overlap!r}")
        elif not 1 <= self.min_last <= self.step:
            problems.append(f"`split_min_last` must be from 1 to the capacity minus the overlap ({self.step:,}), "
                            f"got {self.min_last!r}")
        return problems

    def starts(self, length: int) -> npt.NDArray[np.int64]:
        """Where each chunk of an example of ``length`` tokens starts (one chunk when it fits)."""
        if length <= self.capacity:
            return np.zeros(1, np.int64)
        count = 1 + -(-(length - self.capacity) // self.step)
        return np.arange(count, dtype=np.int64) * self.step

    def masked(self, chunk: int) -> int:
        """Labels masked at the start of chunk ``chunk``: its first (a seam), and after the first chunk the
        overlap (supervised in the chunk before)."""
        return 1 if chunk == 0 else max(1, self.overlap)

    def masks(self, chunks: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
        """`masked` of every chunk index in ``chunks``."""
        return np.where(np.asarray(chunks) > 0, max(1, self.overlap), 1).astype(np.int64)


def pinned_rule(settings: PackSettings) -> SplitRule:
    """How an over-long example is cut under the pinned settings: into chunks under ``overlong split``, else
    chunks of the capacity (truncation keeps chunk 0, its first ``capacity`` tokens). Settings that cannot
    cut (a forged manifest's) fall back to the latter, for readers that must go on (the plan check names them)."""
    least = int(setting_bounds("capacity")[0])
    capacity = settings.capacity if isinstance(settings.capacity, int) and settings.capacity >= least else least
    rule = SplitRule(capacity, settings.split_overlap, settings.split_min_last)
    return rule if settings.overlong == "split" and not rule.problems() else SplitRule(capacity)


@dataclass(frozen=True)
class Cut:
    """An example cut into chunks, per chunk: where it starts and how long it is; ``supervised``, the labels
    it keeps (after `SplitRule.masked`); ``owned``, the example's supervised labels in the part of it no
    earlier chunk holds (so ``owned - supervised`` is what the cut cost, and ``owned`` sums to the
    example's supervised count); ``kept``, whether it goes into a pack."""

    start: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    owned: npt.NDArray[np.int64]
    kept: npt.NDArray[np.bool_]
    reasons: tuple[str, ...]  # why each chunk is dropped ("" for a kept one)

    @property
    def count(self) -> int:
        return len(self.start)

    @property
    def kept_supervised(self) -> int:
        return int(self.supervised[self.kept].sum())

    @property
    def kept_tokens(self) -> int:
        """Tokens of the example in at least one kept chunk."""
        return covered_tokens(self.start[self.kept], self.length[self.kept])


def cut_example(labels: npt.NDArray[np.int32], rule: SplitRule) -> Cut:
    """Cut an example (its labels: which tokens carry loss) into chunks under ``rule``."""
    length = len(labels)
    start = rule.starts(length)
    end = np.minimum(start + rule.capacity, length)
    sums = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX, dtype=np.int64)])
    masked = np.array([rule.masked(k) for k in range(len(start))], np.int64)
    supervised = sums[end] - sums[np.minimum(start + masked, end)]
    own_from = start + np.where(np.arange(len(start)) > 0, rule.overlap, 0)
    owned = sums[end] - sums[own_from]
    kept = supervised > 0
    reasons = ["" if k else "holds no supervised token" for k in kept.tolist()]
    last = len(start) - 1
    if last and end[last] - own_from[last] < rule.min_last:
        kept[last] = False
        reasons[last] = f"last chunk adds {int(end[last] - own_from[last])} tokens < --split-min-last {rule.min_last}"
    return Cut(start, end - start, supervised, owned, kept, tuple(reasons))


def chunk_labels(labels: npt.NDArray[np.int32], chunk: int, start: int, length: int,
                 rule: SplitRule) -> npt.NDArray[np.int32]:
    """The labels chunk ``chunk`` (``length`` tokens from ``start``) carries in its pack: the example's,
    with the first `SplitRule.masked` of them -100."""
    out = np.array(labels[start:start + length], dtype=np.int32)
    out[:rule.masked(chunk)] = IGNORE_INDEX
    return out


def covered_tokens(starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64],
                   groups: npt.NDArray[np.int64] | None = None) -> int:
    """Tokens covered by the spans ``[start, start + length)``, each counted once, summed over groups (the
    spans of one example, sorted by start within their group; one group when ``groups`` is None).

    Spans of different groups never count as overlapping: each group is shifted past the previous one's
    reach before a running maximum of the ends finds what each span adds.
    """
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    if not len(starts):
        return 0
    if groups is not None:
        shift = np.asarray(groups, np.int64) * (int((starts + lengths).max()) + 1)
        starts = starts + shift
    ends = starts + lengths
    reach = np.concatenate([[starts[0]], np.maximum.accumulate(ends)[:-1]])
    return int(np.maximum(0, ends - np.maximum(starts, reach)).sum())
