"""What a forger can recompute: edit an artifact and re-seal it so every hash and count agrees again.

The negative controls (`packcli.verify.faults`, tests/test_verify_forgeries.py) damage copies of an
artifact through these helpers, so what they test is the semantic check, never a stale hash: after
`reseal`, every pinned file's bytes, sha256 and rows, every shard's tokens and supervised labels, and
the manifest hash are right (and, with ``recount``, the counts and each input's records too).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.seams import SEAM_TABLE_SCHEMA, write_seam_table
from packcli.artifact.shards import SCHEMA, load_flat, write_shard
from packcli.contract import IGNORE_INDEX, MANIFEST_NAME, SEAM_TABLE_NAME, file_sha256, shard_name
from packcli.verify.bookkeeping import recount


def reseal(directory: Path, edit: Callable[[dict], None] | None = None, *, recount_counts: bool = False) -> dict:
    """Apply ``edit`` to the manifest, then recompute every pinned file's facts and the manifest hash.

    Args:
        recount_counts: also recount ``counts`` and every input's ``records`` from the seam table
            and the packs, as a forger who edited those would.
    """
    manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    if edit:
        edit(manifest)
    for entry in _pinned_files(manifest):
        path = directory / entry["name"]
        if not path.is_file():
            continue
        entry.update(bytes=path.stat().st_size, sha256=file_sha256(path))
        if "rows" in entry:
            entry["rows"] = (pq.read_metadata(path).num_rows if path.suffix == ".parquet"
                             else path.read_bytes().count(b"\n"))
    for info in manifest["shards"]:
        path = directory / info["name"]
        if path.is_file():
            flat = load_flat(pq.read_table(path), path.name)
            info.update(tokens=len(flat.ids), supervised=int(np.count_nonzero(flat.labels != IGNORE_INDEX)))
    if recount_counts:
        shards = {i["name"]: load_flat(pq.read_table(directory / i["name"]), i["name"]) for i in manifest["shards"]}
        rows = pq.read_table(directory / SEAM_TABLE_NAME).to_pydict()
        manifest["counts"] = recount(shards, rows)
        per_source = Counter(rows["source"])
        for entry in manifest["inputs"]:
            entry["records"] = per_source.get(entry["path"], 0)
    manifest["manifest_sha256"] = mf.manifest_hash(manifest)
    mf.write_manifest(manifest, directory)
    return manifest


def _pinned_files(manifest: dict) -> list[dict]:
    """Every manifest entry that pins a file by name, bytes and sha256 (shards, seam table, rejects, ...)."""
    entries = [v for v in manifest.values() if isinstance(v, dict) and {"name", "bytes", "sha256"} <= set(v)]
    return entries + list(manifest["shards"])


def rewrite_packs(directory: Path, shard: int, mutate: Callable[[list[dict]], None], *,
                  recount_rows: bool = True) -> None:
    """Rewrite shard ``shard`` after ``mutate`` edits its rows (dicts of the shard's columns as lists).

    Args:
        recount_rows: recompute every row's num_tokens and num_supervised, as a forger would.
    """
    path = directory / shard_name(shard)
    rows = pq.read_table(path).to_pylist()
    mutate(rows)
    if recount_rows:
        for row in rows:
            row["num_tokens"] = len(row["input_ids"])
            row["num_supervised"] = sum(label != IGNORE_INDEX for label in row["labels"])
    write_shard(pa.Table.from_pylist(rows, schema=SCHEMA), path)


def rewrite_seam(directory: Path, mutate: Callable[[list[dict]], None]) -> None:
    """Rewrite the seam table after ``mutate`` edits its rows (dicts, one per record, in order)."""
    path = directory / SEAM_TABLE_NAME
    rows = pq.read_table(path).to_pylist()
    mutate(rows)
    write_seam_table(path, {f.name: [row[f.name] for row in rows] for f in SEAM_TABLE_SCHEMA})


def rewrite_rejects(directory: Path, mutate: Callable[[list[dict]], None]) -> None:
    """Rewrite rejects.jsonl after ``mutate`` edits its rows."""
    path = directory / json.loads((directory / MANIFEST_NAME).read_text())["rejects"]["name"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    mutate(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
