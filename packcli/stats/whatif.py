"""What-if packing: what a capacity and strategy would give, before packing.

Pure functions over length arrays: the same numba kernels ``pack`` uses answer "what would this
capacity and strategy give?" in milliseconds per cell, so a whole sweep over 1M lengths is seconds.
The control row ``padding`` is one example per row padded to the capacity. `recommend` reads the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packcli.choices import Strategy
from packcli.contract import IGNORE_INDEX

DEFAULT_CAPACITIES = (1024, 2048, 4096, 8192, 16384, 32768)
WHAT_IF_STRATEGIES = (*(s.value for s in Strategy), "padding")  # padding: one example a row, the control
MAX_SUPERVISED_LOSS = 0.001  # the recommendation's "loses < 0.1% of supervised tokens"


@dataclass(frozen=True)
class WhatIf:
    """One (capacity, strategy) cell of the sweep."""

    capacity: int
    strategy: str
    packs: int
    density: float
    supervised_density: float
    dropped_examples: int
    dropped_tokens: int
    dropped_supervised: int
    dropped_supervised_fraction: float
    displacement_mean: float
    displacement_max: float
    seconds: float


@dataclass(frozen=True)
class PolicyWhatIf:
    """What one over-long policy (``drop``, ``truncate``, ``split``) keeps at one capacity, packed with the
    default strategy: examples with tokens in packs, segments (examples, or chunks under ``split``), tokens
    and supervised tokens in packs, the share of all supervised tokens that is, packs and density."""

    capacity: int
    policy: str
    examples: int
    segments: int
    tokens: int
    supervised: int
    supervised_fraction: float
    packs: int
    density: float


@dataclass(frozen=True)
class Recommendation:
    capacity: int | None
    strategy: str | None
    reason: str


def what_if(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64], capacity: int, strategy: str, *,
            seed: int = 0, window: int | None = None) -> WhatIf:
    """Pack the examples that fit ``capacity`` (over-long ones are dropped) and measure the result."""
    import time

    from packcli.pack import pack_lengths

    fits = lengths <= capacity
    kept, kept_sup = lengths[fits], supervised[fits]
    t0 = time.perf_counter()
    if strategy == "padding":
        packs, disp_mean, disp_max = len(kept), 0.0, 0.0
    else:
        plan = pack_lengths(kept, capacity, strategy=strategy, window=window, seed=seed)
        packs, disp_mean, disp_max = plan.num_packs, plan.metrics.displacement_mean, plan.metrics.displacement_max
    seconds = time.perf_counter() - t0
    slots = packs * capacity
    total_sup = int(supervised.sum())
    dropped_sup = int(supervised[~fits].sum())
    return WhatIf(
        capacity=capacity, strategy=strategy, packs=packs,
        density=float(kept.sum() / slots) if slots else 0.0,
        supervised_density=float(kept_sup.sum() / slots) if slots else 0.0,
        dropped_examples=int((~fits).sum()), dropped_tokens=int(lengths[~fits].sum()),
        dropped_supervised=dropped_sup, dropped_supervised_fraction=dropped_sup / total_sup if total_sup else 0.0,
        displacement_mean=float(disp_mean), displacement_max=float(disp_max), seconds=seconds,
    )


def sweep(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64], capacities=DEFAULT_CAPACITIES,
          strategies=WHAT_IF_STRATEGIES, *, seed: int = 0) -> list[WhatIf]:
    return [what_if(lengths, supervised, c, s, seed=seed) for c in capacities for s in strategies]


def overlong_sweep(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64],
                   masks: dict[int, npt.NDArray[np.bool_]], capacities=DEFAULT_CAPACITIES, *, overlap: int = 0,
                   min_last: int = 1, seed: int = 0) -> list[PolicyWhatIf]:
    """Per capacity, what ``--overlong drop``, ``truncate`` and ``split`` (with ``overlap`` and ``min_last``)
    keep, each packed as ``pack`` packs it (the default strategy and ``seed``).

    Args:
        masks: which tokens carry loss, for every example longer than the smallest capacity (by its
            index): truncation and splitting are decided on them exactly as ``pack`` decides
            (`packcli.job.chunks.cut_example`).
    """
    from packcli.job.chunks import SplitRule, cut_example

    total_sup = int(supervised.sum())
    cells = []
    for capacity in capacities:
        over = np.flatnonzero(lengths > capacity).tolist()
        fits = lengths <= capacity
        cells.append(_policy_cell(capacity, "drop", lengths[fits], int(supervised[fits].sum()), int(fits.sum()),
                                  total_sup, seed))
        for policy, rule in (("truncate", SplitRule(capacity)), ("split", SplitRule(capacity, overlap, min_last))):
            counts = fits.astype(np.int64)  # segments per example, in input order as pack lays them out
            chunks, sup = {}, int(supervised[fits].sum())
            for i in over:
                cut = cut_example(np.where(masks[i], 0, IGNORE_INDEX), rule)
                keep = cut.kept if policy == "split" else (np.arange(cut.count) == 0) & (cut.supervised > 0)
                chunks[i], counts[i] = cut.length[keep], int(keep.sum())
                sup += int(cut.supervised[keep].sum())
            segments = np.repeat(lengths, counts)
            starts = np.cumsum(counts) - counts
            for i, pieces in chunks.items():
                segments[starts[i]:starts[i] + len(pieces)] = pieces
            cells.append(_policy_cell(capacity, policy, segments, sup, int(np.count_nonzero(counts)), total_sup, seed))
    return cells


def _policy_cell(capacity: int, policy: str, segments: npt.NDArray[np.int64], supervised: int, examples: int,
                 total_supervised: int, seed: int) -> PolicyWhatIf:
    from packcli.pack import pack_lengths

    packs = pack_lengths(segments, capacity, seed=seed).num_packs if len(segments) else 0
    tokens = int(segments.sum())
    return PolicyWhatIf(capacity, policy, examples, len(segments), tokens, supervised,
                        supervised / total_supervised if total_supervised else 0.0, packs,
                        tokens / (packs * capacity) if packs else 0.0)


def recommend(cells: list[WhatIf], *, min_density: float, max_displacement: float) -> Recommendation:
    """The smallest capacity that loses < 0.1% of supervised tokens, and at it the densest strategy
    whose mean displacement stays within budget (``max_displacement`` examples)."""
    caps = sorted({c.capacity for c in cells})
    ok_caps = [c for c in caps if all(w.dropped_supervised_fraction < MAX_SUPERVISED_LOSS for w in cells if w.capacity == c)]
    if not ok_caps:
        return Recommendation(None, None, f"every capacity tried loses >= {MAX_SUPERVISED_LOSS:.1%} of supervised "
                                          f"tokens when over-long examples are dropped; try larger capacities, or "
                                          f"`overlong='split'` (the over-long table: what each policy keeps)")
    cap = ok_caps[0]
    fitting = [w for w in cells if w.capacity == cap and w.strategy != "padding"
               and w.density >= min_density and w.displacement_mean <= max_displacement]
    if not fitting:
        return Recommendation(cap, None, f"at capacity {cap} no strategy reaches density {min_density} with mean "
                                         f"displacement <= {max_displacement:g}; relax a budget")
    best = max(fitting, key=lambda w: (w.density, -w.displacement_mean))
    return Recommendation(cap, best.strategy, f"capacity {cap} loses {best.dropped_supervised_fraction:.4%} of "
                                              f"supervised tokens; {best.strategy} gives density {best.density:.4f} "
                                              f"with mean displacement {best.displacement_mean:.1f} examples")
