"""packcli.data: loading packs and collating varlen batches."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.data import collate_flattening, collate_varlen, iter_packs


def test_iter_and_collate(packed):
    packs = list(iter_packs(packed))
    assert packs and all(len(p.input_ids) == p.cu_seqlens[-1] for p in packs)
    batch = collate_varlen(packs[:3])
    total = sum(len(p.input_ids) for p in packs[:3])
    assert batch["input_ids"].shape == (1, total) and batch["cu_seqlens"][-1] == total
    assert len(batch["cu_seqlens"]) == sum(len(p.example_ids) for p in packs[:3]) + 1
    seg = np.diff(batch["cu_seqlens"])
    assert batch["max_seqlen"] == seg.max()
    # positions restart exactly at the global seams
    assert np.all(batch["position_ids"][0][batch["cu_seqlens"][:-1]] == 0)


def test_fixed_shapes(packed):
    packs = list(iter_packs(packed))[:2]
    batch = collate_varlen(packs, pad_to=4096, fixed_segments=64)
    assert batch["input_ids"].shape == (1, 4096) and batch["cu_seqlens"].shape == (65,)
    assert np.all(batch["labels"][0][sum(len(p.input_ids) for p in packs):] == -100)
    with pytest.raises(ValueError, match="pad_to"):
        collate_varlen(packs, pad_to=10)


def test_flattening_has_no_attention_mask(packed):
    batch = collate_flattening(list(iter_packs(packed))[:2])
    assert set(batch) == {"input_ids", "labels", "position_ids"}


def test_hf_datasets_reads_the_shards(packed, tmp_path, monkeypatch):
    """The README's claim: `datasets.load_dataset("parquet", ...)` reads the shards as they are."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    files = sorted(str(p) for p in packed.glob("shard-*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))
    packs = list(iter_packs(packed))
    assert len(ds) == len(packs)
    assert ds[0]["input_ids"] == packs[0].input_ids.tolist() and ds[0]["cu_seqlens"] == packs[0].cu_seqlens.tolist()


def test_the_public_api_exports_both_collators_and_ships_type_hints():
    from pathlib import Path

    import packcli

    assert {"collate_varlen", "collate_flattening"} <= set(packcli.__all__)
    assert packcli.collate_flattening is __import__("packcli.data").data.collate_flattening
    assert (Path(packcli.__file__).parent / "py.typed").is_file()  # PEP 561: listed as package data, present
