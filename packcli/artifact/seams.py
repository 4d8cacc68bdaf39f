"""The seam table (``examples.parquet``: one row per example, in input order) and ``rejects.jsonl``.

The seam table is how every token is traced back to exactly one record and one loss decision: a
packed example names its shard, row and offset; a dropped, truncated, rejected, duplicate or
unsampled one says why. A record is named by ``input`` (its file's index in the manifest's
``inputs``) and ``line``; ``source`` is that input's name, for people: no column holds a location,
so the table's bytes do not depend on where the files were. A record has one row per copy a mixture
made of it (``copy`` 0, 1, ...), and one row whatever happens to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SEAM_TABLE_SCHEMA = pa.schema([
    ("example_id", pa.int64()), ("input", pa.int32()), ("source", pa.string()), ("line", pa.int32()),
    ("copy", pa.int32()),
    ("status", pa.string()),
    ("reason", pa.string()), ("shard", pa.string()), ("row", pa.int32()), ("offset", pa.int32()),
    ("length", pa.int32()), ("original_length", pa.int32()), ("supervised", pa.int32()),
    ("supervised_lost", pa.int32()), ("token_hash", pa.string()), ("format", pa.string()),
])
NULLABLE_COLUMNS = ("shard", "format")  # a record in no pack has no shard; one of no known format, no format


def write_seam_table(path: Path, columns: dict[str, object]) -> None:
    """Write the seam table from its columns (names and types: `SEAM_TABLE_SCHEMA`)."""
    table = pa.table({field.name: _array(columns[field.name], field.type) for field in SEAM_TABLE_SCHEMA},
                     schema=SEAM_TABLE_SCHEMA)
    pq.write_table(table, path, compression="zstd", write_statistics=False)


def reject_row(index: int, source: str, line: int, reason: str) -> dict[str, object]:
    """One line of rejects.jsonl, as written and as ``verify`` expects it from the seam table."""
    return {"input": index, "source": source, "line": line, "reason": reason}


def _array(values: object, kind: pa.DataType) -> pa.Array:
    """A column as Arrow: an Arrow array as it is (cast to ``kind``), anything else converted."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.cast(kind)
    return pa.array(values, kind)


def write_rejects(path: Path, rejects: Iterable[tuple[int, str, int, str]]) -> int:
    """Write (input, source, line, reason) per rejected record, one JSON object a line; return how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for index, source, line, reason in rejects:
            handle.write(json.dumps(reject_row(index, source, line, reason), ensure_ascii=False) + "\n")
            count += 1
    return count

