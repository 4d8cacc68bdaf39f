"""Integrity: the artifact is what its manifest says, byte for byte.

The manifest hash over its own fields, every shard's bytes, sha256, rows and schema, the seam table's
and the dataset card's hashes, and no shard the manifest does not list. A shard that fails its hash is still read when it can
be, so one corrupted byte does not hide a broken seam elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.shards import SCHEMA, FlatShard, load_flat
from packcli.contract import file_sha256
from packcli.verify.report import CheckResult, Violation


def check_integrity(directory: Path, manifest: dict, result: CheckResult) -> dict[str, FlatShard]:
    """Manifest hash, every shard's bytes/sha256/rows/schema, the seam table's hash, no stray shards."""
    if mf.manifest_hash(manifest) != manifest.get("manifest_sha256"):
        result.fail(Violation("manifest.json was edited: its content no longer matches manifest_sha256"))
    shards: dict[str, FlatShard] = {}
    listed = set()
    for info in manifest["shards"]:
        result.checked += 1
        name = info["name"]
        listed.add(name)
        path = directory / name
        if not path.is_file():
            result.fail(Violation("shard listed in the manifest is missing", shard=name))
            continue
        if path.stat().st_size != info["bytes"]:
            result.fail(Violation(f"shard size {path.stat().st_size} != manifest {info['bytes']}", shard=name))
        if file_sha256(path) != info["sha256"]:
            result.fail(Violation("shard sha256 differs from the manifest (corrupted or modified)", shard=name))
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            result.fail(Violation(f"shard unreadable: {exc}", shard=name))
            continue
        if not table.schema.equals(SCHEMA):
            result.fail(Violation(f"schema differs from the contract: {table.schema}", shard=name))
            continue
        if len(table) != info["rows"]:
            result.fail(Violation(f"{len(table)} rows != manifest {info['rows']}", shard=name))
        shards[name] = load_flat(table, name)
    for stray in sorted(p.name for p in directory.glob("shard-*.parquet") if p.name not in listed):
        result.fail(Violation("shard not listed in the manifest", shard=stray))
    seam = directory / manifest["seam_table"]["name"]
    if not seam.is_file() or file_sha256(seam) != manifest["seam_table"]["sha256"]:
        result.fail(Violation(f"{seam.name} missing or its sha256 differs from the manifest"))
    card = manifest.get("dataset_card")
    if card is None:
        result.fail(Violation("the manifest pins no dataset_card (README.md); the artifact is incomplete"))
    elif not (directory / card["name"]).is_file() or file_sha256(directory / card["name"]) != card["sha256"]:
        result.fail(Violation(f"{card['name']} (the dataset card) missing or its sha256 differs from the manifest"))
    return shards
