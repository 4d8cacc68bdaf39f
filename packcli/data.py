"""Loading packs for training: iterate rows, collate batches for varlen attention.

Two consumers, two layouts:

* flash-attn style (``collate_varlen``): the batch's packs concatenated into one row, with global
  ``cu_seqlens`` (int32, every example a segment) and ``max_seqlen`` -- what ``flash_attn_varlen_func``
  and HF's padding-free path take. ``pad_to`` pads the token count to a fixed size and ``fixed_segments``
  pads ``cu_seqlens`` to a fixed length (repeating the last offset) so shapes are static for CUDA graphs
  and ``torch.compile``; padded tokens get ``labels=-100`` and form their own trailing segment.
* HF ``DataCollatorWithFlattening`` style: ``input_ids``, ``labels``, ``position_ids`` only, shape
  [1, T]. HF models derive the seams from positions that restart at 0.

Trap: passing an ``attention_mask`` along with packed ``position_ids`` (or running with a KV cache)
makes HF fall back to an ordinary causal mask over the whole row, and examples attend to each other.
Pass no attention_mask; ``packcli verify --attention hf`` shows the difference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.contract import IGNORE_INDEX


@dataclass(frozen=True)
class Pack:
    """One packed row as numpy arrays."""

    input_ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    position_ids: npt.NDArray[np.int32]
    cu_seqlens: npt.NDArray[np.int32]
    example_ids: npt.NDArray[np.int64]


def iter_packs(directory: str | Path) -> Iterator[Pack]:
    """Yield every pack of an artifact, shard by shard in manifest order."""
    import pyarrow.parquet as pq

    from packcli.artifact import manifest as mf
    from packcli.artifact.shards import load_flat

    directory = Path(directory)
    for info in mf.read_manifest(directory)["shards"]:
        flat = load_flat(pq.read_table(directory / info["name"]), info["name"])
        for r in range(flat.rows):
            a, b = flat.row_offsets[r], flat.row_offsets[r + 1]
            yield Pack(flat.ids[a:b], flat.labels[a:b], flat.positions[a:b], flat.cu[r], flat.example_ids[r])


def collate_varlen(packs: Sequence[Pack], *, pad_to: int | None = None, fixed_segments: int | None = None,
                   as_torch: bool = False) -> dict:
    """Concatenate packs into one varlen batch: input_ids, labels, position_ids [1, T],
    cu_seqlens [S+1] (int32) and max_seqlen.

    Raises:
        ValueError: the batch does not fit ``pad_to`` tokens or ``fixed_segments`` segments.
    """
    ids = np.concatenate([p.input_ids for p in packs])
    labels = np.concatenate([p.labels for p in packs])
    positions = np.concatenate([p.position_ids for p in packs])
    starts = np.cumsum([0] + [len(p.input_ids) for p in packs[:-1]])
    cu = np.concatenate([[0]] + [p.cu_seqlens[1:] + s for p, s in zip(packs, starts)]).astype(np.int32)
    if pad_to is not None:
        if len(ids) > pad_to:
            raise ValueError(f"batch has {len(ids)} tokens > pad_to {pad_to}")
        extra = pad_to - len(ids)
        if extra:
            ids = np.concatenate([ids, np.zeros(extra, np.int32)])
            labels = np.concatenate([labels, np.full(extra, IGNORE_INDEX, np.int32)])
            positions = np.concatenate([positions, np.arange(extra, dtype=np.int32)])
            cu = np.concatenate([cu, [pad_to]]).astype(np.int32)
    if fixed_segments is not None:
        if len(cu) - 1 > fixed_segments:
            raise ValueError(f"batch has {len(cu) - 1} segments > fixed_segments {fixed_segments}")
        cu = np.concatenate([cu, np.full(fixed_segments + 1 - len(cu), cu[-1], np.int32)])
    batch = {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None], "cu_seqlens": cu,
             "max_seqlen": int(np.diff(cu).max()) if len(cu) > 1 else 0}
    if as_torch:
        import torch

        batch = {k: torch.from_numpy(np.ascontiguousarray(v)).long() if k != "cu_seqlens" and isinstance(v, np.ndarray)
                 else (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in batch.items()}
    return batch


def collate_flattening(packs: Sequence[Pack]) -> dict:
    """HF ``DataCollatorWithFlattening`` layout: no attention_mask, positions restart per example."""
    batch = collate_varlen(packs)
    return {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
