"""packcli.data.order: every pack exactly once per epoch across ranks x workers x batches."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.data.order import epoch_order, rank_batches, rank_packs, worker_batches

groups = st.lists(st.integers(0, 9), min_size=0, max_size=8)


@settings(max_examples=200, deadline=None)
@given(groups, st.integers(0, 2**31), st.integers(0, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4),
       st.booleans())
def test_every_pack_once_across_ranks_and_workers(rows, seed, epoch, world, workers, batch, shuffle):
    n = sum(rows)
    order = epoch_order(rows, seed=seed, epoch=epoch, shuffle=shuffle)
    assert sorted(order.tolist()) == list(range(n))
    seen = []
    for rank in range(world):
        batches = rank_batches(rank_packs(order, rank=rank, world_size=world, drop_last=False), batch)
        for w in range(workers):
            for b in worker_batches(len(batches), start=0, worker=w, num_workers=workers):
                seen += batches[b].tolist()
    assert sorted(seen) == list(range(n))  # none twice, none skipped


@settings(max_examples=100, deadline=None)
@given(groups, st.integers(1, 5))
def test_drop_last_gives_equal_counts_and_drops_only_the_remainder(rows, world):
    order = epoch_order(rows, seed=3, epoch=1, shuffle=True)
    per_rank = [rank_packs(order, rank=r, world_size=world, drop_last=True) for r in range(world)]
    assert len({len(p) for p in per_rank}) <= 1
    kept = np.concatenate(per_rank) if per_rank else np.zeros(0)
    assert len(kept) == len(order) - len(order) % world and len(set(kept.tolist())) == len(kept)


def test_order_is_a_function_of_seed_and_epoch():
    rows = [7, 5, 9, 3]
    a = epoch_order(rows, seed=11, epoch=0, shuffle=True)
    assert np.array_equal(a, epoch_order(rows, seed=11, epoch=0, shuffle=True))
    assert not np.array_equal(a, epoch_order(rows, seed=11, epoch=1, shuffle=True))
    assert not np.array_equal(a, epoch_order(rows, seed=12, epoch=0, shuffle=True))
    assert np.array_equal(epoch_order(rows, seed=11, epoch=4, shuffle=False), np.arange(24))


def test_row_groups_stay_contiguous():
    """The two-level shuffle keeps each row group's packs together: one decoded group at a time."""
    rows = [4, 6, 5]
    starts = np.cumsum([0] + rows)
    group = np.searchsorted(starts, epoch_order(rows, seed=0, epoch=2, shuffle=True), side="right") - 1
    assert np.count_nonzero(np.diff(group)) == len(rows) - 1


def test_resume_point_goes_to_worker_zero():
    """A DataLoader asks worker 0 first: after a resume at batch 5, worker 0 must hold batch 5."""
    assert list(worker_batches(10, start=5, worker=0, num_workers=2)) == [5, 7, 9]
    assert list(worker_batches(10, start=5, worker=1, num_workers=2)) == [6, 8]
