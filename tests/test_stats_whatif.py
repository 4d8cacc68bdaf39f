"""`packcli.stats.whatif`: what-if numbers against independent numpy computations, and the recommended capacity."""

from __future__ import annotations

import numpy as np

from packcli.stats import recommend, sweep, what_if


def test_what_if_against_independent_numbers():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 3000, 2000)
    sup = lengths // 2
    cap = 2048
    fits = lengths <= cap
    pad = what_if(lengths, sup, cap, "padding")
    assert pad.packs == fits.sum()
    assert np.isclose(pad.density, lengths[fits].sum() / (fits.sum() * cap))
    assert pad.dropped_examples == (~fits).sum() and pad.dropped_supervised == sup[~fits].sum()
    bfd = what_if(lengths, sup, cap, "bfd")
    assert bfd.packs >= int(np.ceil(lengths[fits].sum() / cap))
    assert np.isclose(bfd.density, lengths[fits].sum() / (bfd.packs * cap))
    seq = what_if(lengths, sup, cap, "sequential")
    assert seq.density <= bfd.density


def test_recommendation_picks_smallest_safe_capacity():
    lengths = np.array([100] * 990 + [3000] * 10)
    cells = sweep(lengths, lengths, capacities=(1024, 4096), strategies=("bfd", "sequential", "padding"))
    rec = recommend(cells, min_density=0.5, max_displacement=1e9)
    assert rec.capacity == 4096 and rec.strategy == "bfd"
