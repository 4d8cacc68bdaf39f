"""The seam table as ``verify`` holds it: one compact column each, read one row group at a time.

A Python object a cell (an int or a str, and a pointer to it) would cost about 1 KB an example,
more than everything else verify keeps. Here an integer column is a numpy array, a string
column a short list of distinct values and an int32 code a row (`Strings`), and ``token_hash`` (16 hex
digits a row) one uint64 a row (`Hashes`). Each still reads as the list it replaces: ``rows["line"][i]``
is a Python int, ``rows["status"][i]`` a str (None where null), and iterating a column yields those,
so the checks' per-example messages are the same; the checks that run over every example use the
arrays (`SeamColumns.codes`, ``np.asarray``) instead. What this costs per example:
docs/benchmarks-pipeline.md (memory).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from packcli.artifact.seams import SEAM_TABLE_SCHEMA
from packcli.job.scratch import BLOCK, IN_MEMORY, Scratch

STEP = 1 << 16  # values turned into Python objects at a time when a column is iterated
HASH_COLUMN = "token_hash"


def as_ints(values: npt.NDArray[np.integer]) -> Iterator[int]:
    """The values of an integer array as Python ints, a slice at a time: a loop over every example
    without a list of them all (36 bytes an int)."""
    for start in range(0, len(values), STEP):
        yield from values[start:start + STEP].tolist()


class Ints:
    """An integer column: a numpy array that reads as a list of Python ints."""

    def __init__(self, values: npt.NDArray[np.integer]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> int:
        return int(self.values[i])

    def __iter__(self) -> Iterator[int]:
        return as_ints(self.values)

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype, copy=False)

    def take(self, order: npt.NDArray[np.int64]) -> Ints:
        return Ints(self.values[order])


class Strings:
    """A string column as ``names[codes[i]]`` (None where the code is -1): a few distinct values (statuses,
    sources, shards, formats; a reason for each rejected or duplicate row) and an int32 a row."""

    def __init__(self, codes: npt.NDArray[np.int32], names: list[str]) -> None:
        self.codes, self.names = codes, names

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> str | None:
        code = int(self.codes[i])
        return None if code < 0 else self.names[code]

    def __iter__(self) -> Iterator[str | None]:
        names = [*self.names, None]  # code -1 reads the last
        for start in range(0, len(self.codes), STEP):
            yield from (names[c] for c in self.codes[start:start + STEP].tolist())

    def take(self, order: npt.NDArray[np.int64]) -> Strings:
        return Strings(self.codes[order], self.names)

    def isin(self, values: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Per row, whether its value is one of ``values``."""
        wanted = np.array([name in values for name in self.names] + [False], dtype=bool)
        return wanted[self.codes]

    def recode(self, names: Sequence[str]) -> npt.NDArray[np.signedinteger]:
        """Per row, the index of its value in ``names``; -1 for another value or null."""
        index = {name: k for k, name in enumerate(names)}
        dtype = np.int16 if len(names) < 2**15 else np.int64  # a status a row: two bytes, not eight
        table = np.array([index.get(name, -1) for name in self.names] + [-1], dtype=dtype)
        return table[self.codes]


class Hashes:
    """``token_hash``: 16 lowercase hex digits a row as the uint64 they spell; any other value (a forger's)
    kept as the string it is, for its row alone."""

    def __init__(self, values: npt.NDArray[np.uint64], odd: dict[int, str]) -> None:
        self.values, self.odd = values, odd

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> str | None:
        i = int(i)
        return self.odd[i] if i in self.odd else f"{int(self.values[i]):016x}"

    def __iter__(self) -> Iterator[str | None]:
        for i in range(len(self.values)):
            yield self[i]

    def take(self, order: npt.NDArray[np.int64]) -> Hashes:
        """The rows in ``order`` (a reordering, or some of the rows: a partition, `packcli.verify.bookkeeping`)."""
        if not self.odd:
            return Hashes(self.values[order], {})
        moved = np.full(len(self.values), -1, np.int64)
        moved[order] = np.arange(len(order))
        return Hashes(self.values[order], {int(moved[i]): value for i, value in self.odd.items() if moved[i] >= 0})

    def exact(self) -> npt.NDArray[np.bool_]:
        """Per row, whether its value is 16 hex digits (``values`` then holds it exactly)."""
        mask = np.ones(len(self.values), dtype=bool)
        mask[list(self.odd)] = False
        return mask


Column = Ints | Strings | Hashes


class SeamColumns(Mapping):
    """The seam table's columns by name (`SEAM_TABLE_SCHEMA`), each read as a list (`Ints`, `Strings`,
    `Hashes`) and held as arrays."""

    def __init__(self, columns: dict[str, Column]) -> None:
        self.columns = columns

    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def rows(self) -> int:
        return len(self.columns["example_id"])

    def take(self, order: npt.NDArray[np.int64]) -> SeamColumns:
        """The rows in ``order``."""
        return SeamColumns({name: column.take(order) for name, column in self.columns.items()})

    def gather(self, names: Sequence[str], picked: npt.NDArray[np.int64], scratch: Scratch) -> SeamColumns:
        """The rows ``picked`` (ascending) of the columns ``names``, in memory, read a `BLOCK` of the table's rows at
        a time with ``scratch``'s pages handed back after each: a partition of rows spread over the whole table (by
        example id) touches every page of every column it reads, and without the hand-back the resident set would
        hold them all (`packcli.job.scratch`)."""
        edges = np.searchsorted(picked, np.arange(0, self.rows + BLOCK, BLOCK)).tolist()
        out: dict[str, Column] = {}
        for name in names:
            column = self.columns[name]
            if isinstance(column, Hashes) and column.odd:  # a forger's values: their own rows' renumbering
                out[name] = column.take(picked)
                continue
            values = column.codes if isinstance(column, Strings) else column.values
            part = np.empty(len(picked), values.dtype)
            for a, b in zip(edges[:-1], edges[1:]):
                if a < b:
                    part[a:b] = values[picked[a:b]]
                    scratch.release()
            out[name] = (Strings(part, column.names) if isinstance(column, Strings)
                         else Hashes(part, {}) if isinstance(column, Hashes) else Ints(part))
        return SeamColumns(out)


def take_rows(rows: Mapping[str, Sequence], order: npt.NDArray[np.int64]) -> Mapping[str, Sequence]:
    """``rows`` (`SeamColumns`, or columns as lists) reordered."""
    if isinstance(rows, SeamColumns):
        return rows.take(order)
    picked = order.tolist()
    return {column: [values[j] for j in picked] for column, values in rows.items()}


def status_codes(column: Sequence[str | None], names: Sequence[str]) -> npt.NDArray[np.int64]:
    """Per row, the index of its status in ``names`` (-1: none of them), from a `Strings` column or a list."""
    if isinstance(column, Strings):
        return column.recode(names)
    index = {name: k for k, name in enumerate(names)}
    return np.array([index.get(s, -1) for s in column], dtype=np.int64)


def read_seam_columns(path: Path, scratch: Scratch = IN_MEMORY) -> tuple[SeamColumns, dict[str, int]]:
    """The seam table at ``path`` (its schema already checked) as columns, one column of one row group at a
    time written into its place (Arrow never holds more than one column chunk, and no column is held twice),
    and each column's null count. The columns are ``scratch``'s: with a folder, files the kernel can drop
    (`packcli.job.scratch`), so verify's driver does not hold the table in anonymous memory.

    Raises:
        pyarrow.ArrowException, OSError: the file does not read.
    """
    nulls = {f.name: 0 for f in SEAM_TABLE_SCHEMA}
    odd: dict[int, str] = {}
    columns: dict[str, Column] = {}
    with pq.ParquetFile(path) as handle:
        rows = handle.metadata.num_rows
        for field in SEAM_TABLE_SCHEMA:
            out = scratch.empty(rows, _empty(field).dtype)
            names: dict[str, int] = {}
            base = 0
            for group in range(handle.num_row_groups):
                array = handle.read_row_group(group, columns=[field.name])[field.name].combine_chunks()
                nulls[field.name] += array.null_count
                if field.name == HASH_COLUMN:
                    part = _hashes(array, base, odd)
                elif pa.types.is_string(field.type):
                    part = _codes(array, names)
                else:
                    part = _ints(array, 0)
                out[base:base + len(array)] = part
                base += len(array)
                del array, part
                scratch.release()  # the group's pages are in the file: the resident set holds one group's
            if field.name == HASH_COLUMN:
                columns[field.name] = Hashes(out, odd)
            elif pa.types.is_string(field.type):
                columns[field.name] = Strings(out, list(names))
            else:
                columns[field.name] = Ints(out)
    return SeamColumns(columns), nulls


def _empty(field: pa.Field) -> np.ndarray:
    if field.name == HASH_COLUMN:
        return np.zeros(0, np.uint64)
    return np.zeros(0, np.int32 if pa.types.is_string(field.type) else np.dtype(field.type.to_pandas_dtype()))


def _codes(array: pa.Array, names: dict[str, int]) -> npt.NDArray[np.int32]:
    """One row group of a string column as codes into ``names`` (grown with its new values); null is -1."""
    encoded = pc.dictionary_encode(array)
    local = encoded.dictionary.to_pylist()
    table = np.array([names.setdefault(name, len(names)) for name in local] + [-1], dtype=np.int32)
    return table[_ints(encoded.indices, len(local))]


def _ints(array: pa.Array, null: int) -> np.ndarray:
    """A primitive integer array as numpy, ``null`` where it is null. Read from its buffers: pyarrow's
    conversions (``np.asarray``, ``fill_null``, ``pa.array``) import pandas, most of a second of a small
    artifact's ``verify`` (tests/test_layout.py)."""
    dtype = np.dtype(array.type.to_pandas_dtype())
    data = array.buffers()[1]
    if data is None:
        return np.full(len(array), null, dtype)
    values = np.frombuffer(data, dtype, count=array.offset + len(array))[array.offset:].copy()
    if array.null_count:
        values[_nulls(array)] = null
    return values


def _nulls(array: pa.Array) -> npt.NDArray[np.bool_]:
    """Where ``array`` is null, from its validity bitmap."""
    bitmap = array.buffers()[0]
    if bitmap is None:
        return np.zeros(len(array), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
    return bits[array.offset:array.offset + len(array)] == 0


HEX = np.full(256, 255, dtype=np.uint8)
HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)


def _hashes(array: pa.Array, base: int, odd: dict[int, str]) -> npt.NDArray[np.uint64]:
    """One row group of ``token_hash`` as uint64; a value that is not 16 lowercase hex digits goes to ``odd``
    by its row (``base`` is the group's first) and reads as 0 here."""
    n = len(array)
    values = np.zeros(n, np.uint64)
    if n == 0:
        return values
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=array.offset + n + 1)[array.offset:].astype(np.int64)
    sixteen = (np.diff(offsets) == 16) & ~_nulls(array)
    everywhere = np.flatnonzero(sixteen)
    raw = np.frombuffer(array.buffers()[2], np.uint8) if len(everywhere) else None
    bad = [np.flatnonzero(~sixteen)]
    for start in range(0, len(everywhere), STEP):  # a slice at a time: the digits take 16 bytes a row, their index 128
        where = everywhere[start:start + STEP]
        digits = HEX[raw[offsets[where][:, None] + np.arange(16)]]
        good = (digits != 255).all(axis=1)
        nibbles = np.where(digits == 255, 0, digits).astype(np.uint64)
        parsed = np.zeros(len(digits), np.uint64)
        for k in range(16):
            parsed = (parsed << np.uint64(4)) | nibbles[:, k]
        values[where] = parsed
        bad.append(where[~good])
    bad = np.unique(np.concatenate(bad))
    for i in bad.tolist():
        value = array[i].as_py()
        odd[base + i] = value
    return values
