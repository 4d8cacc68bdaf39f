"""`packcli.verify.forge`: the forger's kit re-seals what a forger can recompute, so the forgery tests
(tests/forgery.py, tests/test_verify_<check>.py) test a semantic check, never a stale hash. Here: the kit itself
leaves nothing a hash could catch, and edits nothing it was not asked to."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from packcli.artifact.manifest import manifest_hash
from packcli.contract import IGNORE_INDEX, file_sha256
from packcli.verify import verify_artifact
from packcli.verify.forge import read_segments, reseal, rewrite_packs, set_field, write_segments


def pinned_files(manifest: dict) -> list[dict]:
    """The manifest's entries that pin a file by name, bytes and sha256 (the shards, the seam table, ...)."""
    pins = [v for v in manifest.values() if isinstance(v, dict) and {"name", "bytes", "sha256"} <= set(v)]
    return pins + manifest["shards"]


def test_a_resealed_edit_leaves_every_hash_and_count_right(packed_copy):
    def supervise_a_seam(rows: list[dict]) -> None:
        row = next(r for r in rows if len(r["cu_seqlens"]) > 2)
        row["labels"][row["cu_seqlens"][1]] = row["input_ids"][row["cu_seqlens"][1]]  # a seam's first label

    rewrite_packs(packed_copy, 0, supervise_a_seam)
    manifest = reseal(packed_copy)
    assert manifest["manifest_sha256"] == manifest_hash(manifest)
    assert len(pinned_files(manifest)) >= 5  # the seam table, rejects, the card and the shards
    for entry in pinned_files(manifest):
        path = packed_copy / entry["name"]
        assert (entry["bytes"], entry["sha256"]) == (path.stat().st_size, file_sha256(path)), entry["name"]
    shard = pq.read_table(packed_copy / "shard-00000.parquet").to_pydict()
    assert manifest["shards"][0]["supervised"] == sum(x != IGNORE_INDEX for row in shard["labels"] for x in row)
    checks = {c.name: c for c in verify_artifact(packed_copy).checks}
    assert checks["integrity"].ok and not checks["pack_layout"].ok  # only the check that owns it can tell


def test_set_field_follows_a_fields_path_as_the_owner_table_writes_it():
    manifest = {"config": {"capacity": 1024}, "inputs": [{"name": "a"}, {"name": "b"}]}
    set_field(manifest, "config.capacity", 512)
    set_field(manifest, "inputs[1].name", "c")
    assert manifest == {"config": {"capacity": 512}, "inputs": [{"name": "a"}, {"name": "c"}]}


def test_segments_read_and_written_back_leave_the_shard_as_it_was(packed_copy):
    before = pq.read_table(packed_copy / "shard-00001.parquet").to_pylist()
    write_segments(packed_copy, 1, read_segments(packed_copy, 1))
    assert pq.read_table(packed_copy / "shard-00001.parquet").to_pylist() == before


def test_reseal_without_an_edit_changes_nothing(packed_copy):
    before = (packed_copy / "manifest.json").read_text()
    assert reseal(packed_copy) == json.loads(before)
