"""What a forger can recompute: edit an artifact and re-seal it so every hash and count agrees again.

The negative controls (`packcli.verify.faults`, the forgery tests: tests/forgery.py) damage copies of an
artifact through these helpers, so what they test is the semantic check, never a stale hash: after
`reseal`, every pinned file's bytes, sha256 and rows, every shard's tokens and supervised labels, and
the manifest hash are right, the dataset card is re-rendered from the edited manifest (and, with
``recount_counts``, the counts and each input's records are recounted too).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.card import write_card
from packcli.artifact.seams import SEAM_TABLE_SCHEMA, reject_row, write_seam_table
from packcli.artifact.shards import SCHEMA, load_flat, write_shard
from packcli.contract import (
    IGNORE_INDEX,
    IN_PACKS,
    MANIFEST_NAME,
    SEAM_TABLE_NAME,
    STATUSES,
    file_sha256,
    shard_name,
    token_hash,
)
from packcli.ingest import read_lines
from packcli.tokenizer import Encoded
from packcli.verify.bookkeeping import recount
from packcli.verify.locate import find_source, find_tokenizer
from packcli.verify.packs import PackIndex
from packcli.verify.reconstruct import ReconstructJob


def reseal(directory: Path, edit: Callable[[dict], None] | None = None, *, recount_counts: bool = False) -> dict:
    """Apply ``edit`` to the manifest, then recompute every pinned file's facts and the manifest hash.

    Args:
        recount_counts: also recount ``counts`` and every input's ``records`` from the seam table
            and the packs, as a forger who edited those would.
    """
    manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    if edit:
        edit(manifest)
    if recount_counts:
        packs = PackIndex(directory)
        for name in dict.fromkeys(info["name"] for info in manifest["shards"]):
            packs.add(load_flat(pq.read_table(directory / name), name))
        rows = pq.read_table(directory / SEAM_TABLE_NAME).to_pydict()
        kept = {k: v for k, v in manifest["counts"].items() if k == "dropped_fields"}  # not in the seam table
        manifest["counts"] = dict(recount(packs.totals.values(), rows, len(manifest["inputs"])), **kept)
        per_input = Counter(k for k, copy, chunk in zip(rows["input"], rows["copy"], rows["chunk"])
                            if copy == 0 and chunk == 0)  # records, not copies or chunks
        for k, entry in enumerate(manifest["inputs"]):
            entry["records"] = per_input.get(k, 0)
    if "dataset_card" in manifest:
        # rendered from the manifest: a forger re-renders it
        manifest["dataset_card"] = write_card(directory, mf.Manifest.of(manifest)).to_dict()
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
        if path.is_file():  # from the columns as stored, so a shard with malformed rows re-seals too
            table = pq.read_table(path, columns=["input_ids", "labels"])
            labels = table["labels"].combine_chunks().flatten()  # nulls in it are not counted (a forger's nulls)
            info.update(tokens=len(table["input_ids"].combine_chunks().flatten()),
                        supervised=int(pc.sum(pc.not_equal(labels, IGNORE_INDEX)).as_py() or 0))
    manifest["manifest_sha256"] = mf.manifest_hash(manifest)
    mf.write_manifest(manifest, directory)
    return manifest


def set_field(manifest: dict, path: str, value: object) -> None:
    """Set the manifest field at ``path`` (``config.capacity``, ``inputs[2].name``: `packcli.verify.owners`'
    paths) to ``value``, as a forger editing one field does."""
    parts = path.replace("[", ".[").split(".")
    node = manifest
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    node[int(last[1:-1]) if last.startswith("[") else last] = value


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


@dataclass
class Segment:
    """One example in a pack, as a forger moves it: its id, tokens and labels (positions follow)."""

    example_id: int
    input_ids: list[int]
    labels: list[int]


def read_segments(directory: Path, shard: int) -> list[list[Segment]]:
    """Shard ``shard``'s packs, each a list of its segments in order."""
    packs = []
    for row in pq.read_table(directory / shard_name(shard)).to_pylist():
        cu = row["cu_seqlens"]
        packs.append([Segment(eid, row["input_ids"][a:b], row["labels"][a:b])
                      for eid, a, b in zip(row["example_ids"], cu[:-1], cu[1:])])
    return packs


def write_segments(directory: Path, shard: int, packs: list[list[Segment]]) -> None:
    """Write shard ``shard`` from packs of segments, every column consistent with them (positions
    reset per segment, cu_seqlens, counts), as a forger who knows the contract would."""
    rows = []
    for pack in packs:
        lengths = [len(s.input_ids) for s in pack]
        labels = [label for s in pack for label in s.labels]
        rows.append({"input_ids": [t for s in pack for t in s.input_ids], "labels": labels,
                     "position_ids": [p for n in lengths for p in range(n)],
                     "cu_seqlens": [0, *np.cumsum(lengths).tolist()], "seq_lengths": lengths,
                     "example_ids": [s.example_id for s in pack],
                     "num_tokens": sum(lengths), "num_supervised": sum(label != IGNORE_INDEX for label in labels)})
    unknown = set(SCHEMA.names) - set(rows[0] if rows else SCHEMA.names)
    if unknown:
        raise AssertionError(f"write_segments does not know how to forge {sorted(unknown)}")
    write_shard(pa.Table.from_pylist(rows, schema=SCHEMA), directory / shard_name(shard))


def follow_packs(directory: Path) -> None:
    """Point every packed, truncated or split seam-table row at where its example (or chunk) now is in the
    packs, with its length, token_hash and supervised count, as a forger who moved segments would. A
    split example's chunks share its id: each row follows the segment holding its tokens (its
    token_hash), or else the next one of that id."""
    manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    found: dict[int, list[tuple]] = {}
    for k in range(len(manifest["shards"])):
        for r, pack in enumerate(read_segments(directory, k)):
            offset = 0
            for s in pack:
                found.setdefault(s.example_id, []).append((shard_name(k), r, offset, s))
                offset += len(s.input_ids)

    def mutate(rows: list[dict]) -> None:
        for row in rows:
            left = found.get(row["example_id"])
            if not left or row["status"] not in IN_PACKS:
                continue
            pick = next((p for p in left if token_hash(np.asarray(p[3].input_ids, np.int32)) == row["token_hash"]),
                        left[0])
            left.remove(pick)
            name, r, offset, s = pick
            supervised = sum(label != IGNORE_INDEX for label in s.labels)
            row.update(shard=name, row=r, offset=offset, length=len(s.input_ids), supervised=supervised,
                       supervised_lost=row["supervised"] + row["supervised_lost"] - supervised,
                       token_hash=token_hash(np.asarray(s.input_ids, np.int32)))
    rewrite_seam(directory, mutate)


def fresh_example(directory: Path, index: int, line: int) -> Encoded:
    """The example pack would make of line ``line`` of input ``index`` under the artifact's pinned
    tokenizer, template and policy: what a forger tokenizes to make a fake row's hashes right."""
    manifest = mf.load_manifest(directory)
    job = ReconstructJob.of(manifest, str(find_tokenizer(manifest, None)), manifest.template.text)
    raw = dict(read_lines(find_source(manifest, index, None), 0))[line]
    encoded = job.build_preparer().prepare([(0, line, raw)])[0]
    if isinstance(encoded, str):
        raise ValueError(f"input {index} line {line} is rejected ({encoded})")
    return encoded


def replan(directory: Path, reorder: Callable[[list[dict]], list[dict]]) -> None:
    """Re-make the packs with pack's own planner for the seam-table rows as ``reorder`` lists them, and write
    the rows in that order, as a forger who chooses which examples share a pack (and the training order) would:
    every example keeps its tokens and fate, the shards, seam table, metrics and counts all agree again."""
    from packcli.job.fates import Fates
    from packcli.job.plan import place_examples, plan_examples, plan_metrics

    manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    segments = {s.example_id: s for k in range(len(manifest["shards"])) for pack in read_segments(directory, k)
                for s in pack}
    rows = reorder(pq.read_table(directory / SEAM_TABLE_NAME).to_pylist())
    fates = Fates(np.array([STATUSES.index(r["status"]) for r in rows], np.int8),
                  np.array([r["length"] for r in rows], np.int64), np.array([r["supervised"] for r in rows], np.int64),
                  np.array([r["supervised_lost"] for r in rows], np.int64), [r["reason"] for r in rows])
    settings = mf.PackSettings.of(manifest["config"])
    plan = plan_examples(fates, settings)
    placement = place_examples(plan, fates, settings.packs_per_shard)
    packs = [[segments[rows[i]["example_id"]] for i in placement.ordered[a:b].tolist()]
             for a, b in zip(plan.pack_offsets[:-1].tolist(), plan.pack_offsets[1:].tolist())]
    for info in manifest["shards"]:
        (directory / info["name"]).unlink()
    per = settings.packs_per_shard
    for k in range(placement.num_shards):
        write_segments(directory, k, packs[k * per:(k + 1) * per])
    for i, row in enumerate(rows):
        k = int(placement.shard[i])
        row.update(shard=shard_name(k) if k >= 0 else None, row=int(placement.row[i]), offset=int(placement.offset[i]))
    rewrite_seam(directory, lambda table: table.__setitem__(slice(None), rows))
    rejected = [reject_row(r["input"], r["source"], r["line"], r["reason"]) for r in rows if r["status"] == "rejected"]
    rewrite_rejects(directory, lambda table: table.__setitem__(slice(None), rejected))

    def edit(m: dict) -> None:
        m["shards"] = [dict(m["shards"][0], name=shard_name(k)) for k in range(placement.num_shards)]
        m["metrics"] = plan_metrics(plan, fates, settings.capacity)
    reseal(directory, edit, recount_counts=True)
