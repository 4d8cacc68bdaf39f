"""Integrity: the artifact is what its manifest says, byte for byte, and every file is well formed.

The manifest hash over its own fields; the shard list (``shard-00000.parquet``, ``shard-00001...``,
each exactly once); the folder a closed set (every entry a file the manifest lists, each a regular
file: `packcli.artifact.listing`); every pinned file's bytes, sha256 and rows (shards, the seam
table, rejects.jsonl, the dataset card); every shard's schema, its rows' lists of equal length, its
tokens and supervised labels; the seam table's schema; the dataset card is the one this manifest
renders (`packcli.artifact.card.render_card`). A shard that fails its hash is still read when it can
be, so one corrupted byte does not hide a broken seam elsewhere; a shard whose rows are malformed is
reported here and left out of the checks that would misread it. Each shard is read once, by
`read_shard_task` (in this process, or on an engine's workers), checked for its layout there and reduced to
its segments (`packcli.verify.packs.index_shard`): one shard in memory at a time in each process, and the
driver receives findings, totals and segments, not tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.card import render_card
from packcli.artifact.listing import describe_stranger, listed_names, strangers
from packcli.artifact.seams import NULLABLE_COLUMNS, SEAM_TABLE_SCHEMA
from packcli.artifact.shards import SCHEMA, load_flat, numpy_view, read_parquet
from packcli.contract import CARD_NAME, REJECTS_NAME, SEAM_TABLE_NAME, file_sha256, shard_name
from packcli.engine import Engine
from packcli.errors import DISK_FULL
from packcli.job.scratch import IN_MEMORY, Scratch
from packcli.verify.columns import SeamColumns, read_seam_columns
from packcli.verify.layout import check_packs
from packcli.verify.packs import PackIndex, ShardTotals, index_shard
from packcli.verify.report import CheckResult, Violation
from packcli.verify.spread import each_part


@dataclass
class Artifact:
    """What integrity could read, for the checks after it: the readable shards' segments and totals
    (the unreadable ones named in ``unreadable``), the seam table's columns, and rejects.jsonl's path when it
    reads as JSON lines (None when not: global compares it line by line, `reject_lines`)."""

    packs: PackIndex
    seam: SeamColumns | None
    rejects: Path | None
    unreadable: set[str] = field(default_factory=set)


def check_integrity(directory: Path, manifest: mf.Manifest, result: CheckResult, layout: CheckResult,
                    engine: Engine | None = None, scratch: Scratch = IN_MEMORY) -> Artifact:
    """Manifest hash, the shard list, every pinned file, shard rows, the seam table's schema, nothing else in
    the folder (`packcli.artifact.listing`).

    Each shard is read, hashed, checked (here and, into ``layout``, the layout check) and indexed by
    `read_shard_task`: here one after the other, or on ``engine``'s workers (which then reach the artifact at
    its path), so the driver receives each shard's findings, totals and segments, never its tokens. The
    findings are added in shard order, each shard's as its turn comes (`packcli.verify.spread.each_part`: only the
    shards finished ahead of their turn wait), so the report is the same either way. The segments and the seam table's
    columns are ``scratch``'s (`packcli.job.scratch`: with a folder, mapped files).
    """
    if mf.manifest_hash(manifest.data) != manifest.manifest_sha256:
        result.fail(Violation("manifest.json was edited: its content no longer matches manifest_sha256"))
    artifact = Artifact(PackIndex(directory, scratch), None, None)
    first = {}  # each listed name's first position: only that one is read
    for k, info in enumerate(manifest.shards):
        first.setdefault(info.name, k)
    read = [k for k, info in enumerate(manifest.shards) if first[info.name] == k]
    common = (str(directory.resolve()), manifest.config.capacity, result.limit, layout.limit)
    position, reading = [0], iter(read)  # the next listed shard to report on; the next one read

    def listed_twice_before(stop: int) -> None:  # the listed shards not read (a name listed earlier) before ``stop``
        while position[0] < stop:
            k = position[0]
            name, at = manifest.shards[k].name, f"shards[{k}]"
            result.checked += 1
            result.fail(Violation(f"{name} is listed twice in the manifest: a reader would yield its packs twice",
                                  shard=name, field=f"{at}.name"))
            position[0] += 1

    def take(shard: ShardRead) -> None:  # each shard read, in the manifest's order
        k = next(reading)
        listed_twice_before(k)
        result.checked += 1
        name = manifest.shards[k].name
        if name != shard_name(k):
            result.fail(Violation(f"shard {k} is named {name}, not {shard_name(k)}", shard=name,
                                  field=f"shards[{k}].name"))
        _add(result, shard.integrity)
        _add(layout, shard.layout)
        if shard.index is None:
            artifact.unreadable.add(name)
        else:
            artifact.packs.add_indexed(name, *shard.index)
        position[0] = k + 1

    each_part(engine, read_shard_task, common, len(read), lambda j: (manifest.shards[read[j]], f"shards[{read[j]}]"),
              take)
    listed_twice_before(len(manifest.shards))
    names = listed_names(manifest.data)
    for name, kind in strangers(directory, manifest.data):
        shard = name if name.startswith("shard-") else None
        result.fail(Violation(describe_stranger(name, kind, name in names), shard=shard))
    for key, name in (("seam_table", SEAM_TABLE_NAME), ("rejects", REJECTS_NAME), ("dataset_card", CARD_NAME)):
        result.checked += 1
        if getattr(manifest, key).name != name:
            result.fail(Violation(f"{key}.name is {getattr(manifest, key).name!r}, the contract's is {name!r}",
                                  field=f"{key}.name"))
    seam_info = manifest.seam_table
    if _pinned_file(directory / SEAM_TABLE_NAME, seam_info, "seam_table", result):
        artifact.seam = _read_seam_table(directory / SEAM_TABLE_NAME, seam_info, result, scratch)
        pa.default_memory_pool().release_unused()  # the row groups read: only the columns stay
    rejects_info = manifest.rejects
    if _pinned_file(directory / REJECTS_NAME, rejects_info, "rejects", result):
        if _read_rejects(directory / REJECTS_NAME, rejects_info, result):
            artifact.rejects = directory / REJECTS_NAME
    if _pinned_file(directory / CARD_NAME, manifest.dataset_card, "dataset_card", result):
        if (directory / CARD_NAME).read_bytes() != render_card(manifest).encode("utf-8"):
            result.fail(Violation(f"{CARD_NAME} (the dataset card) is not the card this manifest renders: edited, "
                                  "or written for another artifact", field="dataset_card.sha256"))
    return artifact


@dataclass
class ShardRead:
    """What reading one shard gives the driver: its integrity and layout findings (the first of each, and how
    many), and its totals and segments (`packcli.verify.packs.index_shard`; None: unreadable or malformed)."""

    integrity: CheckResult
    layout: CheckResult
    index: tuple[ShardTotals, tuple[np.ndarray, ...]] | None = None


def read_shard_task(common: tuple[str, int, int, int], item: tuple[mf.ShardPin, str]) -> ShardRead:
    """One shard of `check_integrity` (a worker's task): its bytes against its pin, its schema and rows, the
    per-pack layout (`packcli.verify.layout.check_packs`), its segments indexed and its totals compared. The
    shard is in memory only here, and let go before the next is read."""
    directory, capacity, limit, layout_limit = common
    info, at = item
    name = info.name
    result = ShardRead(CheckResult("integrity", limit=limit), CheckResult("pack_layout", limit=layout_limit))
    path = Path(directory) / name
    if not _pinned_file(path, info, at, result.integrity):
        return result
    try:
        table = read_parquet(path)
    except (pa.ArrowException, OSError) as exc:
        result.integrity.fail(Violation(f"shard unreadable: {exc}", shard=name))
        return result
    if not table.schema.equals(SCHEMA):
        result.integrity.fail(Violation(f"schema differs from the contract: {table.schema}", shard=name))
        return result
    if len(table) != info.rows:
        result.integrity.fail(Violation(f"{len(table)} rows != {at}.rows {info.rows}", shard=name, field=f"{at}.rows"))
    if not _rows_well_formed(table, name, result.integrity):
        return result
    flat = load_flat(table, name)
    del table  # the flat arrays are views of it: both go when this shard is done
    check_packs([flat], capacity, result.layout)
    totals, segments = index_shard(flat)
    del flat
    pa.default_memory_pool().release_unused()  # else the allocator keeps a shard's worth of pages for each
    for key, actual in (("tokens", totals.tokens), ("supervised", totals.supervised)):
        if getattr(info, key) != actual:
            result.integrity.fail(Violation(f"{at}.{key} is {getattr(info, key)}, the shard holds {actual}",
                                            shard=name, field=f"{at}.{key}"))
    result.index = totals, segments
    return result


def _add(result: CheckResult, part: CheckResult) -> None:
    """A shard's findings after those before it: the same first findings and count as one check over them all."""
    result.checked += part.checked
    for violation in part.violations:
        result.fail(violation)
    result.count += part.count - len(part.violations)


def _pinned_file(path: Path, info: mf.FilePin | mf.ShardPin, at: str, result: CheckResult) -> bool:
    """Size and sha256 as pinned; False when the file is missing (nothing more to read)."""
    if not path.is_file():
        result.fail(Violation(f"{path.name}, pinned by {at}, is missing", field=f"{at}.name"))
        return False
    size = path.stat().st_size
    if size != info.bytes:
        result.fail(Violation(f"{path.name}: size {size} != {at}.bytes {info.bytes}", field=f"{at}.bytes"))
    if file_sha256(path) != info.sha256:
        result.fail(Violation(f"{path.name}: sha256 differs from {at}.sha256 (corrupted or modified)",
                              field=f"{at}.sha256"))
    return True


def _rows_well_formed(table: pa.Table, name: str, result: CheckResult) -> bool:
    """No nulls; per row, labels and position_ids as long as input_ids; example_ids and seq_lengths one
    shorter than cu_seqlens."""
    def lengths(column: str) -> np.ndarray:
        return np.diff(numpy_view(table[column].combine_chunks().offsets))

    well_formed = True
    for column in table.column_names:  # a null anywhere is a value no reader can hold (the contract has none)
        array = table[column].combine_chunks()
        nulls = array.null_count + (array.values.null_count if pa.types.is_list(array.type) else 0)
        if nulls:
            result.fail(Violation(f"malformed: {column} holds {nulls} null values (the contract has none)", shard=name,
                                  field=column))
            well_formed = False
    if not well_formed:
        return False
    tokens = lengths("input_ids")
    pairs = (("labels", tokens, "input_ids"), ("position_ids", tokens, "input_ids"),
             ("example_ids", lengths("cu_seqlens") - 1, "cu_seqlens minus one"),
             ("seq_lengths", lengths("cu_seqlens") - 1, "cu_seqlens minus one"))
    for column, expected, what in pairs:
        got = lengths(column)
        bad = np.flatnonzero(got != expected)
        if len(bad):
            r = int(bad[0])
            result.fail(Violation(f"malformed row: {column} has {got[r]} entries, {what} {expected[r]} "
                                  f"({len(bad)} rows like it)", shard=name, row=r, field=column))
            well_formed = False
    return well_formed


def _read_seam_table(path: Path, info: mf.FilePin, result: CheckResult, scratch: Scratch) -> SeamColumns | None:
    """The seam table as columns (`packcli.verify.columns`), read one row group at a time: never whole, as
    Arrow or as Python objects."""
    try:
        with pq.ParquetFile(path) as handle:
            schema, rows = handle.schema_arrow, handle.metadata.num_rows
    except (pa.ArrowException, OSError) as exc:
        result.fail(Violation(f"{path.name} unreadable: {exc}"))
        return None
    if not schema.equals(SEAM_TABLE_SCHEMA):
        result.fail(Violation(f"{path.name}: schema differs from the contract: {schema}"))
        return None
    try:
        columns, null_counts = read_seam_columns(path, scratch)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            raise  # writing verify's own columns, not reading the artifact: the command reports it (`verify_scratch`)
        result.fail(Violation(f"{path.name} unreadable: {exc}"))
        return None
    if rows != info.rows:
        result.fail(Violation(f"{path.name}: {rows} rows != seam_table.rows {info.rows}",
                              field="seam_table.rows"))
    nulls = [name for name in SEAM_TABLE_SCHEMA.names if name not in NULLABLE_COLUMNS and null_counts[name]]
    if nulls:
        result.fail(Violation(f"{path.name}: null values in {', '.join(nulls)}", field=nulls[0]))
        return None
    return columns


def _read_rejects(path: Path, info: mf.FilePin, result: CheckResult) -> bool:
    """Is every line of rejects.jsonl a JSON object (global then compares them with what pack writes)? Read a
    line at a time: a rejected record's line is never held past its own check."""
    if path.stat().st_size and not _ends_with_newline(path):
        result.fail(Violation(f"{path.name}: the last line does not end with a newline (pack ends every line with one)",
                              field="rejects"))
    count = 0
    for count, line in enumerate(reject_lines(path), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            result.fail(Violation(f"{path.name}:{count}: not a JSON object ({exc.msg})"))
            return False
        if not isinstance(row, dict):
            result.fail(Violation(f"{path.name}:{count}: not a JSON object"))
            return False
    if count != info.rows:
        result.fail(Violation(f"{path.name}: {count} rows != rejects.rows {info.rows}", field="rejects.rows"))
    return True


def reject_lines(path: Path) -> Iterator[str]:
    """The lines of rejects.jsonl as text, without their newline, one at a time. Split at ``\\n`` alone (U+2028
    and ``\\r`` are text in a JSON line) and decoded line by line (a UTF-8 character never holds that byte)."""
    with open(path, "rb") as handle:
        for raw in handle:
            yield raw.removesuffix(b"\n").decode("utf-8", errors="replace")


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) == b"\n"
