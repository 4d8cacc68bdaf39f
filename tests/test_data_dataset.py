"""PackDataset: ranks x DataLoader workers, per-epoch reshuffle, exact resume, bad input (recipe 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, flip_a_byte

from packcli.data import PackDataset
from packcli.errors import PackcliError


def first_ids(packs) -> list[int]:
    """A collate that names each pack by its first example id (picklable, for DataLoader workers)."""
    return [int(p.example_ids[0]) for p in packs]


def all_packs(packed) -> list[int]:
    return [pid for batch in PackDataset(packed, collate=first_ids, shuffle=False) for pid in batch]


def run(ds, loader_workers: int | None = None) -> list[list[int]]:
    if loader_workers is None:
        return list(ds)
    from torch.utils.data import DataLoader

    return list(DataLoader(ds, batch_size=None, num_workers=loader_workers))


@pytest.mark.torch
def test_recipe_ranks_and_workers_cover_every_pack_once(packed):
    """Two simulated ranks, each with DataLoader(num_workers=2): every pack exactly once per epoch; the
    workers change nothing about the order; epoch 2 is another order, the same on every run."""
    everything = sorted(all_packs(packed))
    assert len(everything) == len(set(everything)) > 8
    epochs = []
    for epoch in (0, 1):
        per_rank = []
        for rank in (0, 1):
            ds = PackDataset(packed, batch_packs=2, collate=first_ids, seed=5, rank=rank, world_size=2)
            ds.set_epoch(epoch)
            with_workers = run(ds, loader_workers=2)
            assert with_workers == run(ds)  # in-process and two workers: the same batches, in the same order
            per_rank.append(with_workers)
        seen = [pid for batches in per_rank for batch in batches for pid in batch]
        assert sorted(seen) == everything
        epochs.append(per_rank)
    assert epochs[0] != epochs[1]
    again = PackDataset(packed, batch_packs=2, collate=first_ids, seed=5, rank=1, world_size=2)
    again.set_epoch(1)
    assert run(again, loader_workers=2) == epochs[1][1]


@pytest.mark.torch
def test_recipe_resume_mid_epoch_equals_an_uninterrupted_run(packed):
    from packcli.data import PackLoader

    def fresh() -> PackDataset:
        ds = PackDataset(packed, batch_packs=2, collate=first_ids, seed=9, rank=1, world_size=2)
        ds.set_epoch(3)
        return ds

    full = run(fresh(), loader_workers=2)
    k = 4
    loader = PackLoader(fresh(), num_workers=2)
    head = []
    for batch in loader:
        head.append(batch)
        if len(head) == k:
            break
    state = json.loads(json.dumps(loader.state_dict()))  # survives a checkpoint file
    assert state["epoch"] == 3 and state["batches_done"] == k
    resumed = fresh()
    resumed.set_epoch(0)  # whatever the object held, the state decides
    resumed.load_state_dict(state)
    tail = list(PackLoader(resumed, num_workers=2))
    assert head + tail == full
    # a plain DataLoader with workers: the trainer passes the count
    plain = fresh()
    plain.load_state_dict(fresh().state_dict(batches_done=k))
    assert run(plain, loader_workers=2) == full[k:]
    # in-process iteration counts by itself
    inproc = fresh()
    it = iter(inproc)
    got = [next(it) for _ in range(k)]
    assert got == full[:k] and inproc.state_dict()["batches_done"] == k


def test_bad_arguments_are_one_line_errors(packed, packed_copy):
    with pytest.raises(PackcliError, match=r"rank 2 is outside 0\.\.1 \(world_size 2\)"):
        PackDataset(packed, rank=2, world_size=2)
    with pytest.raises(PackcliError, match="batch_packs must be at least 1"):
        PackDataset(packed, batch_packs=0)
    state = PackDataset(packed, seed=1).state_dict(batches_done=1)
    with pytest.raises(PackcliError, match="another split.*seed 1 != 2"):
        PackDataset(packed, seed=2).load_state_dict(state)
    with pytest.raises(PackcliError, match="world_size 1 != 2"):
        PackDataset(packed, seed=1, rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(PackcliError, match="not a PackDataset state"):
        PackDataset(packed).load_state_dict({"epoch": 0})
    with pytest.raises(PackcliError, match="outside the epoch"):
        PackDataset(packed, seed=1).load_state_dict(dict(state, batches_done=10**6))


def test_a_state_from_another_artifact_is_refused(packed, tmp_path, corpus_files, tokenizer_dir):
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    other = tmp_path / "other"
    pack_corpus(PackConfig(inputs=tuple(corpus_files[:2]), tokenizer=str(tokenizer_dir), out=other, capacity=512))
    with pytest.raises(PackcliError, match="from another artifact"):
        PackDataset(other).load_state_dict(PackDataset(packed).state_dict())


def test_a_shard_failing_its_hash_stops_the_loader(packed_copy):
    flip_a_byte(packed_copy / "shard-00000.parquet")
    with pytest.raises(PackcliError, match="shard-00000.parquet: sha256 differs from the manifest"):
        list(PackDataset(packed_copy, collate=first_ids, shuffle=False))


def test_works_without_torch(packed):
    """numpy users: with torch unimportable, PackDataset is a plain iterable of numpy batches."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from packcli.data import PackDataset, collate_varlen\n"
        "ds = PackDataset(sys.argv[1], batch_packs=3, collate=collate_varlen, rank=1, world_size=2)\n"
        "batches = list(ds)\n"
        "assert type(batches[0]['input_ids']).__module__ == 'numpy', type(batches[0]['input_ids'])\n"
        "assert PackDataset.__mro__[1] is object\n"
        "print(len(batches), sum(b['input_ids'].shape[1] for b in batches))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(packed)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    batches, tokens = map(int, out.stdout.split())
    assert batches > 0 and tokens > 0


def test_one_row_group_decoded_at_a_time(packed):
    """Memory follows the row group, not the artifact: an epoch decodes each row group once, in turn."""
    ds = PackDataset(packed, batch_packs=3, collate=first_ids, seed=4)
    reads = []
    read = ds.reader.read

    def spy(group):
        reads.append(group)
        return read(group)

    ds.reader.read = spy
    assert sum(len(b) for b in ds) == ds.reader.num_packs
    assert sorted(reads, key=lambda g: (g.shard, g.index)) == ds.reader.row_groups  # each exactly once
