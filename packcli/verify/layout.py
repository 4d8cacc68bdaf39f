"""The per-pack layout: what a trainer reads from one row is leak-free by construction.

cu_seqlens well-formed; seq_lengths (what TRL reads) naming the same seams; positions reset at every
seam; the first label of every example ignored; every supervised label equal to its token; the stored
counts right.
"""

from __future__ import annotations

import numpy as np

from packcli.artifact.shards import FlatShard
from packcli.contract import IGNORE_INDEX
from packcli.verify.report import CheckResult, Violation


def check_packs(shards: dict[str, FlatShard], capacity: int, result: CheckResult) -> None:
    """Per pack: cu_seqlens well-formed; seq_lengths == diff(cu_seqlens); positions reset at every
    seam; first labels ignored; every supervised label equals its token; stored counts match."""
    for shard in shards.values():
        for r in range(shard.rows):
            result.checked += 1
            a, b = shard.row_offsets[r], shard.row_offsets[r + 1]
            ids, labels, pos, cu = shard.ids[a:b], shard.labels[a:b], shard.positions[a:b], shard.cu[r]
            n = b - a
            bad = _check_cu(cu, n, capacity, len(shard.example_ids[r]))
            if bad:
                result.fail(Violation(f"cu_seqlens {bad}", shard=shard.name, row=r))
                continue
            lengths = np.diff(cu)
            if not np.array_equal(shard.seq_lengths[r], lengths):
                # TRL builds positions and varlen boundaries from seq_lengths alone: a disagreement is a leak there
                result.fail(Violation(f"seq_lengths {shard.seq_lengths[r].tolist()[:12]} disagree with cu_seqlens "
                                      f"(lengths {lengths.tolist()[:12]}): TRL would cut examples at other seams",
                                      shard=shard.name, row=r))
            expected = np.arange(n) - np.repeat(cu[:-1].astype(np.int64), lengths)
            wrong = np.flatnonzero(pos != expected)
            if len(wrong):
                t = int(wrong[0])
                k = int(np.searchsorted(cu, t, side="right") - 1)
                result.fail(Violation(f"position_ids not reset: token {t} (example {k} of the pack) has position "
                                      f"{pos[t]}, expected {expected[t]}", shard=shard.name, row=r,
                                      example_id=int(shard.example_ids[r][k])))
            leaking = np.flatnonzero(labels[cu[:-1]] != IGNORE_INDEX)
            if len(leaking):
                k = int(leaking[0])
                result.fail(Violation(f"seam label supervised: the first label of example {k} of the pack is "
                                      f"{labels[cu[k]]}, not {IGNORE_INDEX} (the previous example would predict it)",
                                      shard=shard.name, row=r, example_id=int(shard.example_ids[r][k])))
            sup = labels != IGNORE_INDEX
            mismatch = np.flatnonzero(sup & (labels != ids))
            if len(mismatch):
                t = int(mismatch[0])
                result.fail(Violation(f"label {labels[t]} at token {t} differs from its token {ids[t]}",
                                      shard=shard.name, row=r))
            if shard.num_tokens[r] != n or shard.num_supervised[r] != int(sup.sum()):
                result.fail(Violation(f"counts: num_tokens {shard.num_tokens[r]} / num_supervised "
                                      f"{shard.num_supervised[r]}, actual {n} / {int(sup.sum())}",
                                      shard=shard.name, row=r))


def _check_cu(cu: np.ndarray, n: int, capacity: int, num_examples: int) -> str | None:
    if len(cu) < 2 or cu[0] != 0:
        return f"must start at 0 and name at least one example, got {cu[:4].tolist()}"
    if np.any(np.diff(cu) <= 0):
        return f"must strictly increase, got {cu.tolist()[:12]}"
    if cu[-1] != n:
        return f"ends at {cu[-1]}, but the pack has {n} tokens"
    if n > capacity:
        return f"pack has {n} tokens > capacity {capacity}"
    if len(cu) - 1 != num_examples:
        return f"names {len(cu) - 1} examples but example_ids has {num_examples}"
    return None
