"""The per-pack layout: what a trainer reads from one row is leak-free by construction.

cu_seqlens well-formed; seq_lengths (what TRL reads) naming the same seams; no pack above the
capacity; positions reset at every seam; the first label of every example ignored; every supervised
label equal to its token; the stored counts right.

A row states its seams twice, in ``cu_seqlens`` and in where ``position_ids`` restart at 0. When
they disagree the report says which one is wrong where it can: positions that count up by one and
restart at more places than cu_seqlens has boundaries mean cu_seqlens merged two examples; fewer
restarts mean positions were not reset; otherwise both are named (global then says which matches the
seam table).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from packcli.artifact.shards import FlatShard
from packcli.contract import IGNORE_INDEX
from packcli.verify.report import CheckResult, Violation


def check_packs(shards: Iterable[FlatShard], capacity: int, result: CheckResult) -> None:
    """Per pack: cu_seqlens well-formed; seq_lengths == diff(cu_seqlens); at most ``capacity`` tokens;
    seams where positions restart; first labels ignored; every supervised label equals its token;
    stored counts match."""
    for shard in shards:
        for r in range(shard.rows):
            result.checked += 1
            a, b = shard.row_offsets[r], shard.row_offsets[r + 1]
            ids, labels, pos, cu = shard.ids[a:b], shard.labels[a:b], shard.positions[a:b], shard.cu[r]
            n = b - a
            at = dict(shard=shard.name, row=r)
            bad = cu_problem(cu, n, len(shard.example_ids[r]))
            if bad:
                result.fail(Violation(f"cu_seqlens {bad}", field="cu_seqlens", **at))
                continue
            lengths = np.diff(cu)
            if not np.array_equal(shard.seq_lengths[r], lengths):
                # TRL builds positions and varlen boundaries from seq_lengths alone: a disagreement is a leak there
                result.fail(Violation(f"seq_lengths {shard.seq_lengths[r].tolist()[:12]} disagree with cu_seqlens "
                                      f"(lengths {lengths.tolist()[:12]}): TRL would cut examples at other seams",
                                      field="seq_lengths", **at))
            if n > capacity:
                result.fail(Violation(f"pack has {n} tokens > config.capacity {capacity}", field="config.capacity",
                                      **at))
            seam = _seam_problem(pos, cu)
            if seam:
                k, message, field = seam
                result.fail(Violation(message, example_id=int(shard.example_ids[r][k]), field=field, **at))
            leaking = np.flatnonzero(labels[cu[:-1]] != IGNORE_INDEX)
            if len(leaking):
                k = int(leaking[0])
                result.fail(Violation(f"seam label supervised: the first label of example {k} of the pack is "
                                      f"{labels[cu[k]]}, not {IGNORE_INDEX} (the previous example would predict it)",
                                      example_id=int(shard.example_ids[r][k]), field="labels", **at))
            sup = labels != IGNORE_INDEX
            mismatch = np.flatnonzero(sup & (labels != ids))
            if len(mismatch):
                t = int(mismatch[0])
                result.fail(Violation(f"label {labels[t]} at token {t} differs from its token {ids[t]}",
                                      field="labels", **at))
            if shard.num_tokens[r] != n or shard.num_supervised[r] != int(sup.sum()):
                result.fail(Violation(f"counts: num_tokens {shard.num_tokens[r]} / num_supervised "
                                      f"{shard.num_supervised[r]}, actual {n} / {int(sup.sum())}",
                                      field="num_tokens" if shard.num_tokens[r] != n else "num_supervised", **at))


def cu_problem(cu: np.ndarray, n: int, num_examples: int) -> str | None:
    """What is wrong with a row's cu_seqlens (None: they tile its ``n`` tokens into ``num_examples`` segments)."""
    if len(cu) < 2 or cu[0] != 0:
        return f"must start at 0 and name at least one example, got {cu[:4].tolist()}"
    if np.any(np.diff(cu) <= 0):
        return f"must strictly increase, got {cu.tolist()[:12]}"
    if cu[-1] != n:
        return f"ends at {cu[-1]}, but the pack has {n} tokens"
    if len(cu) - 1 != num_examples:
        return f"names {len(cu) - 1} examples but example_ids has {num_examples}"
    return None


def _seam_problem(pos: np.ndarray, cu: np.ndarray) -> tuple[int, str, str] | None:
    """(example of the pack, message, column) when positions and cu_seqlens disagree on a seam."""
    lengths = np.diff(cu)
    expected = np.arange(len(pos)) - np.repeat(cu[:-1].astype(np.int64), lengths)
    wrong = np.flatnonzero(pos != expected)
    if not len(wrong):
        return None
    t = int(wrong[0])
    k = int(np.searchsorted(cu, t, side="right") - 1)  # the cu_seqlens segment of token t
    counting = len(pos) and pos[0] == 0 and np.all((pos[1:] == 0) | (pos[1:] == pos[:-1] + 1))
    if counting:  # the positions are example-local runs: their restarts are seams in their own right
        restarts = np.flatnonzero(pos == 0)
        bounds = cu[:-1]
        if np.isin(bounds, restarts).all():
            return k, (f"cu_seqlens merge examples across a seam: position_ids restart at token {t}, inside "
                       f"cu_seqlens segment {k} ({int(cu[k])}..{int(cu[k + 1])})"), "cu_seqlens"
        if np.isin(restarts, bounds).all():
            return k, (f"position_ids not reset: token {t} (example {k} of the pack) has position {pos[t]}, "
                       f"expected {expected[t]}"), "position_ids"
        return k, (f"cu_seqlens and position_ids disagree on a seam: cu_seqlens bounds {bounds.tolist()[:8]}, "
                   f"position_ids restart at {restarts.tolist()[:8]}"), "cu_seqlens"
    return k, (f"position_ids are not example-local: token {t} (example {k} of the pack) has position {pos[t]}, "
               f"expected {expected[t]}"), "position_ids"
