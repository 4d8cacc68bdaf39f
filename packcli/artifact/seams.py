"""The seam table (``examples.parquet``: one row per example, in input order) and ``rejects.jsonl``.

The seam table is how every token is traced back to exactly one record and one loss decision: a
packed example names its shard, row and offset; a dropped, truncated, rejected, duplicate or
unsampled one says why. A record is named by ``input`` (its file's index in the manifest's
``inputs``) and ``line``; ``source`` is that input's name, for people: no column holds a location,
so the table's bytes do not depend on where the files were. A record has one row per copy a mixture
made of it (``copy`` 0, 1, ...), and one row whatever happens to it; an example split into chunks
(``--overlong split``) has one row per chunk (``chunk`` 0, 1, ..., starting at ``chunk_start``
tokens into the example), so ``(input, line, copy, chunk)`` names a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SEAM_TABLE_SCHEMA = pa.schema([
    ("example_id", pa.int64()), ("input", pa.int32()), ("source", pa.string()), ("line", pa.int32()),
    ("copy", pa.int32()), ("chunk", pa.int32()), ("chunk_start", pa.int32()),
    ("status", pa.string()),
    ("reason", pa.string()), ("shard", pa.string()), ("row", pa.int32()), ("offset", pa.int32()),
    ("length", pa.int32()), ("original_length", pa.int32()), ("supervised", pa.int32()),
    ("supervised_lost", pa.int32()), ("token_hash", pa.string()), ("format", pa.string()),
])
NULLABLE_COLUMNS = ("shard", "format")  # a record in no pack has no shard; one of no known format, no format


ROW_GROUP = 1 << 20  # rows a row group holds: pq.write_table's default, so group by group gives the same bytes


class Codes:
    """A string column as ``names[codes[i]]`` (None where ``null``): a short list of names and an integer a
    row, turned into Arrow strings one row group at a time."""

    def __init__(self, codes: npt.NDArray[np.integer], names: Sequence[str],
                 null: npt.NDArray[np.bool_] | None = None) -> None:
        self.codes, self.names, self.null = np.asarray(codes, dtype=np.int32), pa.array(list(names), pa.string()), null

    def __len__(self) -> int:
        return len(self.codes)

    def arrow(self, rows: slice) -> pa.Array:
        mask = None if self.null is None else self.null[rows]
        return pa.DictionaryArray.from_arrays(pa.array(self.codes[rows], mask=mask), self.names).dictionary_decode()


class FixedWidth:
    """A string column of ASCII strings of one width, or empty (``b""``), as a numpy bytes array: the token
    hashes, 16 bytes a row instead of a Python string each."""

    def __init__(self, values: npt.NDArray[np.bytes_]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def arrow(self, rows: slice) -> pa.Array:
        values = self.values[rows]
        width = values.dtype.itemsize
        lengths = np.char.str_len(values).astype(np.int32) if len(values) else np.zeros(0, np.int32)
        if not np.isin(lengths, (0, width)).all():
            raise ValueError(f"FixedWidth: values of {width} characters or none, got lengths {np.unique(lengths)}")
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)
        data = pa.py_buffer(values[lengths == width].tobytes())
        return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), data)


class EmptyAsNull:
    """A string column given as a list, with ``""`` written as null (a record of no known format)."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def arrow(self, rows: slice) -> pa.Array:
        column = pa.array(self.values[rows], pa.string())
        return pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)


def write_seam_table(path: Path, columns: dict[str, object], after_group: Callable[[], None] = lambda: None) -> None:
    """Write the seam table from its columns (names and types: `SEAM_TABLE_SCHEMA`): numpy arrays, lists,
    or `Codes`/`FixedWidth`/`EmptyAsNull`, converted to Arrow one row group (`ROW_GROUP` rows) at a time, so
    a corpus's whole table is never in memory as Arrow (docs/benchmarks-pipeline.md, memory).
    ``after_group`` runs after each row group is written (``pack`` hands its file-backed columns' pages back
    there: `packcli.job.scratch.Scratch.release`)."""
    rows = len(columns[SEAM_TABLE_SCHEMA[0].name])
    if rows == 0:
        table = pa.table({f.name: _array(columns[f.name], slice(0, 0), f.type) for f in SEAM_TABLE_SCHEMA},
                         schema=SEAM_TABLE_SCHEMA)
        pq.write_table(table, path, compression="zstd", write_statistics=False)
        return
    with pq.ParquetWriter(path, SEAM_TABLE_SCHEMA, compression="zstd", write_statistics=False) as writer:
        for start in range(0, rows, ROW_GROUP):
            group = slice(start, start + ROW_GROUP)
            writer.write_table(pa.table({f.name: _array(columns[f.name], group, f.type) for f in SEAM_TABLE_SCHEMA},
                                        schema=SEAM_TABLE_SCHEMA))
            # Arrow's allocator keeps a written group's pages for reuse, and its reuse is not exact: hand them
            # back, or the driver's peak grows with the row groups (docs/benchmarks-pipeline.md, memory)
            pa.default_memory_pool().release_unused()
            after_group()


def reject_row(index: int, source: str, line: int, reason: str) -> dict[str, object]:
    """One line of rejects.jsonl as an object."""
    return {"input": index, "source": source, "line": line, "reason": reason}


def reject_line(index: int, source: str, line: int, reason: str) -> str:
    """One line of rejects.jsonl exactly as written (without its newline). ``verify`` compares the file with
    these lines as text, so the same object spelled otherwise (a key twice, other escapes) is caught."""
    return json.dumps(reject_row(index, source, line, reason), ensure_ascii=False)


def _array(values: object, rows: slice, kind: pa.DataType) -> pa.Array:
    """Rows ``rows`` of a column as Arrow."""
    if isinstance(values, (Codes, FixedWidth, EmptyAsNull)):
        return values.arrow(rows).cast(kind)
    return pa.array(values[rows], kind)


def write_rejects(path: Path, rejects: Iterable[tuple[int, str, int, str]]) -> int:
    """Write (input, source, line, reason) per rejected record, one JSON object a line; return how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        for index, source, line, reason in rejects:
            handle.write(reject_line(index, source, line, reason) + "\n")
            count += 1
    return count

