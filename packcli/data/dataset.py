"""``PackDataset``: an artifact's packs as a torch ``IterableDataset`` (a plain iterable without torch).

It yields collated batches (``batch_packs`` packs each), not single packs, so that a DataLoader is
used with ``batch_size=None`` and yields the rank's batches in the same order for any number of
workers (`packcli.data.order`). That is what makes resuming exact: a position is one number, the
batches of this epoch already consumed on this rank.

    ds = PackDataset("out/", batch_packs=4, collate=collate_hf, seed=0)   # rank/world from torch.distributed
    loader = PackLoader(ds, num_workers=2)                                 # a DataLoader that counts
    for epoch in range(epochs):
        ds.set_epoch(epoch)                                                # new order from (seed, epoch)
        for batch in loader: ...
    state = loader.state_dict()            # save with the checkpoint; ds.load_state_dict(state) resumes

With a plain ``DataLoader`` and workers the main process never sees the batches go by: pass the
count yourself, ``ds.state_dict(batches_done=steps_this_epoch)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packcli.data.collate import collate_hf
from packcli.data.order import epoch_order, rank_batches, rank_packs, worker_batches
from packcli.data.read import Pack, PackReader
from packcli.errors import PackcliError

try:  # a torch IterableDataset where torch is installed, so DataLoader treats it as iterable-style
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # numpy users: the same class, a plain iterable
    _Base = object  # type: ignore[assignment,misc]

STATE_KEYS = ("artifact", "seed", "shuffle", "world_size", "batch_packs", "drop_last")


class PackDataset(_Base):  # type: ignore[valid-type,misc]
    """An artifact's packs for training: split across ranks and workers, reshuffled per epoch, resumable.

    Args:
        directory: the artifact (``--out`` of ``packcli pack``).
        batch_packs: packs per yielded batch.
        collate: turns a list of `Pack` into a batch (default `collate_hf`; ``list`` yields the packs).
        seed: the pack order of epoch ``e`` is a function of (seed, e) alone.
        shuffle: False keeps the stored order (the packer's own shuffle still applies).
        rank, world_size: this process's share; default from ``torch.distributed`` when it is
            initialized, else 0 and 1.
        drop_last: leave out the epoch's last ``N % world_size`` packs so every rank yields as many
            (DDP needs equal step counts); off, every pack is used and ranks may differ by one.
        check_hashes: check each shard's sha256 against the manifest when it is first read.

    Raises:
        PackcliError: a bad argument (rank >= world_size, batch_packs < 1) or artifact.
    """

    def __init__(self, directory: str | Path, *, batch_packs: int = 1,
                 collate: Callable[[Sequence[Pack]], Any] = collate_hf, seed: int = 0, shuffle: bool = True,
                 rank: int | None = None, world_size: int | None = None, drop_last: bool = False,
                 check_hashes: bool = True) -> None:
        rank, world_size = _distributed(rank, world_size)
        problems = []
        if world_size < 1:
            problems.append(f"world_size must be at least 1, got {world_size}")
        elif not 0 <= rank < world_size:
            problems.append(f"rank {rank} is outside 0..{world_size - 1} (world_size {world_size})")
        if batch_packs < 1:
            problems.append(f"batch_packs must be at least 1, got {batch_packs}")
        if problems:
            raise PackcliError("PackDataset: " + "; ".join(problems),
                               "pass rank in [0, world_size) as torch.distributed numbers them")
        self.reader = PackReader(directory, check_hashes=check_hashes)
        self.batch_packs, self.collate, self.seed, self.shuffle = batch_packs, collate, seed, shuffle
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.epoch = 0
        self._done = 0  # batches of this epoch consumed on this rank

    def set_epoch(self, epoch: int) -> None:
        """Order the packs for ``epoch``; a new epoch starts from its first batch (the same epoch
        resumes where the last iteration or the loaded state stopped)."""
        if epoch != self.epoch:
            self.epoch, self._done = epoch, 0

    def batches(self, epoch: int | None = None) -> list:
        """This rank's batches of ``epoch`` (default: the current one), as arrays of global pack indices."""
        return rank_batches(self._packs(epoch), self.batch_packs)

    def _packs(self, epoch: int | None = None) -> np.ndarray:
        """This rank's packs of ``epoch`` in order: one int64 a pack (iteration cuts its batches from it as
        it goes, not a list of arrays a batch)."""
        order = epoch_order([g.rows for g in self.reader.row_groups], seed=self.seed,
                            epoch=self.epoch if epoch is None else epoch, shuffle=self.shuffle)
        return rank_packs(order, rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)

    def _num_batches(self, epoch: int | None = None) -> int:
        return -(-len(self._packs(epoch)) // self.batch_packs)

    def __len__(self) -> int:
        """Batches this rank yields in a full epoch."""
        return self._num_batches()

    def __iter__(self) -> Iterator[Any]:
        worker, num_workers = _worker()
        mine = self._packs()
        size = self.batch_packs
        batches = range(-(-len(mine) // size))
        start = self._done
        groups = self.reader.row_groups
        first = [0]
        for g in groups:
            first.append(first[-1] + g.rows)
        cached: tuple[int, list[Pack]] | None = None  # one decoded row group per worker
        for b in worker_batches(len(batches), start=start, worker=worker, num_workers=num_workers):
            packs = []
            for index in mine[b * size:(b + 1) * size].tolist():
                g = _group_of(first, index)
                if cached is None or cached[0] != g:
                    cached = None  # the last row group goes before the next is read: one in memory
                    cached = (g, self.reader.read(groups[g]))
                packs.append(cached[1][index - first[g]])
            batch = self.collate(packs)
            if num_workers == 1:
                self._done = b + 1
            yield batch
        if num_workers == 1 and self._done >= len(batches):
            self._done = 0  # a finished pass: iterating again replays the epoch, as a sampler would

    def state_dict(self, batches_done: int | None = None) -> dict:
        """Where this rank is: save it with the checkpoint.

        Args:
            batches_done: batches of this epoch the trainer consumed; default, the count this object
                saw itself (in-process iteration, or through `PackLoader`).
        """
        return {"artifact": self.reader.artifact_id, "seed": self.seed, "shuffle": self.shuffle,
                "world_size": self.world_size, "batch_packs": self.batch_packs, "drop_last": self.drop_last,
                "rank": self.rank, "epoch": self.epoch, "batches_done": self._done if batches_done is None else batches_done}

    def load_state_dict(self, state: dict) -> None:
        """Resume from `state_dict`: the next iteration starts at the first batch not consumed.

        Raises:
            PackcliError: the state is from another artifact or another split, or is malformed.
        """
        missing = [k for k in (*STATE_KEYS, "epoch", "batches_done") if k not in state]
        if missing:
            raise PackcliError(f"PackDataset.load_state_dict: not a PackDataset state (missing {', '.join(missing)})")
        mine = self.state_dict()
        if state["artifact"] != mine["artifact"]:
            raise PackcliError(f"PackDataset.load_state_dict: the state is from another artifact (manifest "
                               f"{str(state['artifact'])[:16]}, this one {mine['artifact'][:16]})",
                               "resume on the artifact the checkpoint was trained on")
        differ = [f"{k} {state[k]!r} != {mine[k]!r}" for k in STATE_KEYS[1:] if state[k] != mine[k]]
        if differ:
            raise PackcliError("PackDataset.load_state_dict: the state is from another split (" + "; ".join(differ) + ")",
                               "resume with the same seed, shuffle, world_size, batch_packs and drop_last")
        if not 0 <= int(state["batches_done"]) <= self._num_batches(int(state["epoch"])):
            raise PackcliError(f"PackDataset.load_state_dict: batches_done {state['batches_done']} is outside the epoch")
        self.epoch, self._done = int(state["epoch"]), int(state["batches_done"])


def _group_of(first: list[int], index: int) -> int:
    import bisect

    return bisect.bisect_right(first, index) - 1


def _worker() -> tuple[int, int]:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def _distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values win; else torch.distributed's when initialized; else a single process."""
    if rank is not None and world_size is not None:
        return rank, world_size
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return (dist.get_rank() if rank is None else rank), (dist.get_world_size() if world_size is None else world_size)
    except ImportError:
        pass
    return (0 if rank is None else rank), (1 if world_size is None else world_size)


def global_supervised(batches: Sequence[dict], *, group: Any = None) -> int:
    """Supervised labels in one optimizer step: summed over this rank's micro-batches (gradient
    accumulation) and, when ``torch.distributed`` is initialized, over every rank (an all-reduce).

    The normaliser of docs/training.md: each micro-batch's loss is ``sum(token losses) * world_size / N``.
    """
    from packcli.data.collate import num_supervised

    total = sum(num_supervised(b) for b in batches)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return total
    if dist.is_available() and dist.is_initialized():
        tensor = torch.tensor([total], dtype=torch.int64,
                              device="cuda" if dist.get_backend(group) == "nccl" else "cpu")
        dist.all_reduce(tensor, group=group)
        total = int(tensor.item())
    return total


if _Base is not object:
    from torch.utils.data import DataLoader

    class PackLoader(DataLoader):
        """A ``DataLoader`` over a `PackDataset` (``batch_size=None``: the dataset batches) that
        counts the batches it hands out, so ``state_dict()`` is exact with any number of workers."""

        def __init__(self, dataset: PackDataset, **kwargs: Any) -> None:
            if not isinstance(dataset, PackDataset):
                raise TypeError(f"PackLoader takes a PackDataset, got {type(dataset).__name__}")
            if kwargs.get("persistent_workers"):
                # persistent workers keep the copy of the dataset made at the first epoch: they would
                # never see set_epoch or a loaded state
                raise PackcliError("PackLoader: persistent_workers=True would freeze the first epoch's order and "
                                   "position in the workers", "leave persistent_workers off")
            super().__init__(dataset, batch_size=None, **kwargs)

        def __iter__(self) -> Iterator[Any]:
            dataset: PackDataset = self.dataset  # type: ignore[assignment]
            counting = self.num_workers > 0  # with no workers the dataset counts itself, in this process
            total = len(dataset)
            for batch in super().__iter__():
                if counting:
                    dataset._done += 1
                yield batch
            if counting and dataset._done >= total:
                dataset._done = 0

        def state_dict(self) -> dict:
            return self.dataset.state_dict()  # type: ignore[attr-defined]

        def load_state_dict(self, state: dict) -> None:
            self.dataset.load_state_dict(state)  # type: ignore[attr-defined]

