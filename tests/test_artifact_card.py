"""`packcli.artifact.card`: the dataset card is pinned, describes the artifact, and its YAML is what
``datasets.load_dataset(OUT)`` reads."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.artifact import manifest as mf
from packcli.artifact.card import render_card
from packcli.contract import CARD_NAME, CONTRACT_VERSION, file_sha256


def test_card_is_pinned_and_describes_the_artifact(packed):
    manifest = mf.read_manifest(packed)
    card = manifest["dataset_card"]
    assert card["name"] == CARD_NAME and card["sha256"] == file_sha256(packed / CARD_NAME)
    text = (packed / CARD_NAME).read_text(encoding="utf-8")
    assert text == render_card(mf.Manifest.of(manifest))  # written from the hashed fields alone: reproducible
    assert text.startswith("---\nconfigs:\n- config_name: default\n") and 'path: "shard-*.parquet"' in text
    counts = manifest["counts"]
    for fact in (f"{counts['packs']:,}", f"{counts['supervised_tokens']:,}", f"packing contract {CONTRACT_VERSION}",
                 "padding_free=True", "max_length=None", '"skip_prepare_dataset": True', "load_dataset("):
        assert fact in text, fact


def test_load_dataset_reads_the_folder(packed, tmp_path, monkeypatch):
    """The folder is a Hugging Face dataset repository: load_dataset(out_dir) gets the packs and only them."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    from packcli.data import iter_packs

    ds = datasets.load_dataset(str(packed), split="train", cache_dir=str(tmp_path / "cache"))
    packs = list(iter_packs(packed))
    assert len(ds) == len(packs) == mf.read_manifest(packed)["counts"]["packs"]
    assert {"input_ids", "labels", "seq_lengths", "cu_seqlens"} <= set(ds.column_names)
    assert "example_id" not in ds.column_names  # examples.parquet is not a split
    for i in (0, len(ds) - 1):
        assert ds[i]["input_ids"] == packs[i].input_ids.tolist()
        assert ds[i]["seq_lengths"] == np.diff(packs[i].cu_seqlens).tolist()
