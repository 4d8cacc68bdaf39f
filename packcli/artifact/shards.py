"""The Parquet shard format: its Arrow schema, the writer, and the flat reader the loader and verify share.

One row per pack. No padding is stored: a trainer pads to the capacity in the manifest if it needs
fixed shapes. Column names match what HF/TRL padding-free training consumes.

    pack row:      | ex 17 (len 4)   | ex 3 (len 3) | ex 42 (len 2) |
    input_ids      | a0 a1 a2 a3     | b0 b1 b2     | c0 c1         |
    position_ids   | 0  1  2  3      | 0  1  2      | 0  1          |   reset at every seam
    labels         | -  a1 a2 a3     | -  -  b2     | -  c1         |   '-' = -100; first of each is -100
    cu_seqlens     [0,               4,             7,              9]     flash-attn / HF varlen boundaries
    seq_lengths    [4,               3,             2]                      the same seams, as TRL reads them
    example_ids    [17, 3, 42]

``seq_lengths`` is ``diff(cu_seqlens)``: redundant on purpose, because TRL's padding-free collator
builds positions and boundaries only from a column of that name (docs/contract.md, "Consumers").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from packcli.artifact.manifest import ShardPin
from packcli.contract import IGNORE_INDEX, file_sha256
from packcli.errors import ContractError

SCHEMA = pa.schema([
    pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("labels", pa.list_(pa.int32()), nullable=False),
    pa.field("position_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("cu_seqlens", pa.list_(pa.int32()), nullable=False),
    pa.field("seq_lengths", pa.list_(pa.int32()), nullable=False),
    pa.field("example_ids", pa.list_(pa.int64()), nullable=False),
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("num_supervised", pa.int32(), nullable=False),
])


def build_table(
    ids: npt.NDArray[np.int32], labels: npt.NDArray[np.int32], example_lengths: npt.NDArray[np.int64],
    examples_per_pack: npt.NDArray[np.int64], example_ids: npt.NDArray[np.int64],
) -> pa.Table:
    """Assemble shard columns from flat token arrays, vectorised (no per-pack Python loop).

    Args:
        ids, labels: the shard's tokens, examples concatenated in packed order.
        example_lengths: length of every example, in the same order.
        examples_per_pack: how many consecutive examples form each row.
        example_ids: stable ID of every example, in the same order.
    """
    ex_starts = np.concatenate([[0], np.cumsum(example_lengths)]).astype(np.int64)
    # int32 from the start (a row's list offsets are int32 anyway): each token-sized temporary is fresh
    # memory, and the page faults of int64 ones took longer than the arithmetic.
    positions = np.arange(len(ids), dtype=np.int32)
    positions -= np.repeat(ex_starts[:-1].astype(np.int32), example_lengths)
    pack_ex = np.concatenate([[0], np.cumsum(examples_per_pack)]).astype(np.int64)
    row_offsets = ex_starts[pack_ex].astype(np.int32)
    # cu_seqlens of a row: the example boundaries from its first to its last example, rebased to 0.
    per_row = examples_per_pack + 1
    cu_offsets = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    row_of_bound = np.repeat(np.arange(len(per_row)), per_row)
    bounds = pack_ex[row_of_bound] + np.arange(cu_offsets[-1]) - cu_offsets[row_of_bound]
    cu = (ex_starts[bounds] - ex_starts[pack_ex[row_of_bound]]).astype(np.int32)
    ex_offsets = pack_ex.astype(np.int32)
    supervised = np.add.reduceat(labels != IGNORE_INDEX, row_offsets[:-1], dtype=np.int64) if len(ids) else np.zeros(0)
    return pa.table({
        "input_ids": pa.ListArray.from_arrays(pa.array(row_offsets), pa.array(ids, pa.int32())),
        "labels": pa.ListArray.from_arrays(pa.array(row_offsets), pa.array(labels, pa.int32())),
        "position_ids": pa.ListArray.from_arrays(pa.array(row_offsets), pa.array(positions, pa.int32())),
        "cu_seqlens": pa.ListArray.from_arrays(pa.array(cu_offsets.astype(np.int32)), pa.array(cu, pa.int32())),
        "seq_lengths": pa.ListArray.from_arrays(pa.array(ex_offsets), pa.array(example_lengths, pa.int32())),
        "example_ids": pa.ListArray.from_arrays(pa.array(ex_offsets), pa.array(example_ids, pa.int64())),
        "num_tokens": pa.array(np.diff(row_offsets), pa.int32()),
        "num_supervised": pa.array(np.asarray(supervised, dtype=np.int32), pa.int32()),
    }, schema=SCHEMA)


def write_shard(table: pa.Table, path: Path) -> ShardPin:
    """Write a shard (zstd) and describe it. The caller writes into a temporary directory; the file is
    written under a name of its own and renamed into place whole, so a second attempt at the same shard
    (a Ray task re-run after its node was lost, while the first still runs) never leaves half a file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd", compression_level=3, use_dictionary=False,
                       write_statistics=False, row_group_size=len(table) or 1)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return ShardPin(name=path.name, rows=len(table), bytes=path.stat().st_size, sha256=file_sha256(path),
                     tokens=int(pc.sum(table["num_tokens"]).as_py() or 0),
                     supervised=int(pc.sum(table["num_supervised"]).as_py() or 0))


@dataclass(frozen=True)
class FlatShard:
    """A shard's list columns as flat numpy arrays with row offsets: cheap random access."""

    name: str
    ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    positions: npt.NDArray[np.int32]
    row_offsets: npt.NDArray[np.int64]
    cu: list[npt.NDArray[np.int32]]
    seq_lengths: list[npt.NDArray[np.int32]]
    example_ids: list[npt.NDArray[np.int64]]
    num_tokens: npt.NDArray[np.int32]
    num_supervised: npt.NDArray[np.int32]

    @property
    def rows(self) -> int:
        return len(self.row_offsets) - 1


def numpy_view(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A primitive Arrow array without nulls as a read-only numpy view of its data buffer. Not
    ``to_numpy``: in pyarrow that imports pandas (most of a second: more than ``verify`` of a small artifact)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ContractError(f"a {array.type} column holds nulls, which the contract's schema does not allow",
                            "run `packcli verify` on the artifact")
    dtype = np.dtype(array.type.to_pandas_dtype())
    data = array.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.zeros(0, dtype)
    view = np.frombuffer(data, dtype=dtype, count=array.offset + len(array))
    return view[array.offset:]


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    array = column.combine_chunks()
    offsets = numpy_view(array.offsets).astype(np.int64)
    values = numpy_view(array.values)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]


def load_flat(table: pa.Table, name: str) -> FlatShard:
    ids, offsets = _flat(table["input_ids"])
    labels, l_off = _flat(table["labels"])
    positions, p_off = _flat(table["position_ids"])
    cu_vals, cu_off = _flat(table["cu_seqlens"])
    sl_vals, sl_off = _flat(table["seq_lengths"])
    ex_vals, ex_off = _flat(table["example_ids"])
    if not (np.array_equal(offsets, l_off) and np.array_equal(offsets, p_off)):
        raise ValueError("input_ids, labels and position_ids rows differ in length")
    return FlatShard(
        name=name, ids=ids, labels=labels, positions=positions, row_offsets=offsets,
        cu=[cu_vals[cu_off[r]:cu_off[r + 1]] for r in range(len(cu_off) - 1)],
        seq_lengths=[sl_vals[sl_off[r]:sl_off[r + 1]] for r in range(len(sl_off) - 1)],
        example_ids=[ex_vals[ex_off[r]:ex_off[r + 1]] for r in range(len(ex_off) - 1)],
        num_tokens=numpy_view(table["num_tokens"]), num_supervised=numpy_view(table["num_supervised"]),
    )


def read_parquet(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file as a table. Not ``pq.read_table``: that goes through ``pyarrow.dataset``, whose import
    pulls in pandas (most of a second, more than all of ``verify`` takes on a small artifact)."""
    with pq.ParquetFile(path) as handle:
        return handle.read(columns=columns)


def read_shard(path: Path) -> pa.Table:
    """Read a shard and check its schema is the contract's."""
    table = read_parquet(path)
    if not table.schema.equals(SCHEMA):
        raise ContractError(f"{path.name}: schema differs from the contract", f"expected {SCHEMA}, found {table.schema}")
    return table
