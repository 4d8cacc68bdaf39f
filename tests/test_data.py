"""`packcli.data`: the public API (both collators, type hints shipped), and the shards read by ``datasets`` as
they are."""

from __future__ import annotations

import pytest

from packcli.data import iter_packs


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
