"""Which packs a rank's DataLoader worker yields, in which order, in a given epoch. Pure numpy.

    epoch order      row groups permuted by (seed, epoch), then the packs inside each row group
                     (a two-level shuffle: one row group decoded at a time, so memory stays flat)
    ranks            position i of the epoch order goes to rank i % world_size (strided, as
                     torch's DistributedSampler: step s of every rank comes from the same stretch of
                     the order, so the packer's ordering budget holds across ranks)
    batches          a rank's packs cut into consecutive batches of ``batch_packs``
    workers          batch b (counted from the resume point) goes to worker b % num_workers; a
                     DataLoader takes batches from its workers round-robin, so it yields the rank's
                     batches in order whatever the number of workers

Every pack lands in exactly one (rank, worker, batch) per epoch; with ``drop_last`` the last
``N % world_size`` packs of the epoch order are left out so that every rank gets the same count
(the packs left out change with the epoch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def epoch_order(group_rows: Sequence[int], *, seed: int, epoch: int, shuffle: bool) -> npt.NDArray[np.int64]:
    """Global pack indices (row groups laid end to end) in this epoch's order."""
    starts = np.concatenate([[0], np.cumsum(group_rows, dtype=np.int64)])
    if not shuffle:
        return np.arange(starts[-1], dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])
    parts = [starts[g] + rng.permutation(int(group_rows[g])) for g in rng.permutation(len(group_rows))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def rank_packs(order: npt.NDArray[np.int64], *, rank: int, world_size: int, drop_last: bool) -> npt.NDArray[np.int64]:
    """The packs of ``rank``, in epoch order."""
    if drop_last:
        order = order[:len(order) - len(order) % world_size]
    return order[rank::world_size]


def rank_batches(packs: npt.NDArray[np.int64], batch_packs: int) -> list[npt.NDArray[np.int64]]:
    """A rank's packs cut into consecutive batches (the last may be shorter)."""
    return [packs[i:i + batch_packs] for i in range(0, len(packs), batch_packs)]


def worker_batches(num_batches: int, *, start: int, worker: int, num_workers: int) -> range:
    """The batch indices worker ``worker`` yields, from the resume point ``start`` on."""
    return range(start + worker, num_batches, num_workers)
