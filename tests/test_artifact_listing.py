"""`packcli.artifact.listing`: an artifact folder is a closed set (the files its manifest lists, each a regular
file): every stranger named with what it is, and a folder is packcli's (``--force`` may replace it) only
when its manifest's own hash holds and nothing else is in it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from packcli.artifact.listing import describe_stranger, listed_names, not_an_artifact, strangers


def manifest_of(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def test_the_listed_names_are_the_manifest_its_shards_and_its_pinned_files(packed_copy):
    manifest = manifest_of(packed_copy)
    assert listed_names(manifest) == {"manifest.json", "examples.parquet", "rejects.jsonl", "README.md",
                                      *(s["name"] for s in manifest["shards"])}
    assert listed_names({"shards": "not a list", "seam_table": {"name": 7}}) == {"manifest.json"}  # a forger's


def test_every_stranger_is_named_with_what_it_is(packed_copy):
    manifest = manifest_of(packed_copy)
    assert strangers(packed_copy, manifest) == []
    (packed_copy / ".huggingface.yaml").write_text("configs: []\n")
    (packed_copy / "data").mkdir()
    shard = packed_copy / "shard-00001.parquet"
    shard.rename(packed_copy / "elsewhere.parquet")
    shard.symlink_to(packed_copy / "elsewhere.parquet")  # a listed name, but a link
    assert strangers(packed_copy, manifest) == [(".huggingface.yaml", "a file"), ("data", "a folder"),
                                                ("elsewhere.parquet", "a file"),
                                                ("shard-00001.parquet", "a symbolic link")]


def test_each_stranger_says_why_it_matters_and_what_to_do():
    assert describe_stranger("shard-00001.parquet", "a symbolic link", listed=True).startswith(
        "shard-00001.parquet is a symbolic link, not a regular file")
    assert "as the dataset card's YAML" in describe_stranger(".huggingface.yaml", "a file", listed=False)
    assert describe_stranger("notes.txt", "a file", listed=False) == (
        "notes.txt (a file) is not part of the artifact: the manifest does not list it, and a reader that globs the "
        "folder (load_dataset, a Hub upload) may pick it up; remove it")


def test_a_folder_is_packclis_only_with_a_manifest_whose_hash_holds_and_no_stranger(packed_copy, tmp_path):
    assert not_an_artifact(packed_copy) is None
    (packed_copy / "notes.txt").write_text("mine")
    assert not_an_artifact(packed_copy) == "holds notes.txt, which its manifest.json does not list"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not_an_artifact(empty) == "is empty"
    shutil.copy(packed_copy / "notes.txt", empty / "a.txt")
    assert not_an_artifact(empty) == "holds a.txt, and no manifest.json"
    (empty / "manifest.json").write_text("{not json")
    assert not_an_artifact(empty) == "its manifest.json is not one packcli wrote (not JSON)"
    edited = manifest_of(packed_copy)
    edited["counts"]["packs"] += 1  # by hand: the hash no longer holds
    (empty / "manifest.json").write_text(json.dumps(edited))
    assert not_an_artifact(empty) == "its manifest.json is not one packcli wrote (its hash does not match)"
