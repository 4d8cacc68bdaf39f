"""Collating packs into batches, with the names each consumer reads.

All layouts are padding-free: the batch's packs are concatenated into one row ``[1, T]`` and the
seams travel beside the tokens.

    consumer                         function              seam names
    flash_attn_varlen_func           collate_varlen        cu_seqlens [S+1] int32, max_seqlen
    HF models (flash/sdpa/flex/eager) collate_hf           cu_seq_lens_q/k, max_length_q/k, position_ids
    HF DataCollatorWithFlattening    collate_flattening    position_ids only (restarting at every seam)
    TRL's padding-free collator      trl_features          seq_lengths (TRL builds positions from it)

Fixed shapes (CUDA graphs, ``torch.compile``): ``pad_to`` pads the tokens to a fixed count and
``fixed_segments`` pads the boundaries to a fixed length by repeating the last offset (empty
segments); padded tokens carry ``labels=-100`` and form their own trailing segment, so they
attend to nothing real. ``max_seqlen`` fixes the scalar too (it must be at least the longest segment).

Model inputs only: ``model(**batch)`` is safe. The loss normaliser is ``num_supervised(batch)``
(docs/training.md, "Normalising the loss").

Trap: an ``attention_mask`` passed with packed ``position_ids``, or a KV cache in use, makes HF fall
back to an ordinary causal mask over the whole row and examples attend to each other. Pass no
attention_mask and ``use_cache=False``; ``packcli verify --attention hf`` shows the difference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from packcli.contract import IGNORE_INDEX
from packcli.data.read import Pack


def collate_varlen(packs: Sequence[Pack], *, pad_to: int | None = None, fixed_segments: int | None = None,
                   max_seqlen: int | None = None, pad_id: int = 0, as_torch: bool = False) -> dict:
    """flash-attn layout: input_ids, labels, position_ids ``[1, T]``; cu_seqlens ``[S+1]`` int32; max_seqlen.

    Raises:
        ValueError: no packs, or the batch does not fit ``pad_to`` tokens, ``fixed_segments`` segments
            or ``max_seqlen``.
    """
    if not packs:
        raise ValueError("no packs to collate")
    ids = np.concatenate([p.input_ids for p in packs]).astype(np.int64)
    labels = np.concatenate([p.labels for p in packs]).astype(np.int64)
    positions = np.concatenate([p.position_ids for p in packs]).astype(np.int64)
    starts = np.cumsum([0] + [len(p.input_ids) for p in packs[:-1]])
    cu = np.concatenate([[0]] + [p.cu_seqlens[1:] + s for p, s in zip(packs, starts)]).astype(np.int32)
    if pad_to is not None:
        if len(ids) > pad_to:
            raise ValueError(f"batch has {len(ids)} tokens > pad_to {pad_to}")
        extra = pad_to - len(ids)
        if extra:
            ids = np.concatenate([ids, np.full(extra, pad_id, np.int64)])
            labels = np.concatenate([labels, np.full(extra, IGNORE_INDEX, np.int64)])
            positions = np.concatenate([positions, np.arange(extra, dtype=np.int64)])
            cu = np.concatenate([cu, [pad_to]]).astype(np.int32)
    if fixed_segments is not None:
        if len(cu) - 1 > fixed_segments:
            raise ValueError(f"batch has {len(cu) - 1} segments > fixed_segments {fixed_segments}")
        cu = np.concatenate([cu, np.full(fixed_segments + 1 - len(cu), cu[-1], np.int32)])
    longest = int(np.diff(cu).max()) if len(cu) > 1 else 0
    if max_seqlen is not None and max_seqlen < longest:
        raise ValueError(f"a segment has {longest} tokens > max_seqlen {max_seqlen}")
    batch = {"input_ids": ids[None], "labels": labels[None], "position_ids": positions[None], "cu_seqlens": cu,
             "max_seqlen": longest if max_seqlen is None else max_seqlen}
    return to_torch(batch) if as_torch else batch


def collate_hf(packs: Sequence[Pack], *, pad_to: int | None = None, fixed_segments: int | None = None,
               max_seqlen: int | None = None, pad_id: int = 0, as_torch: bool | None = None) -> dict:
    """HF padding-free kwargs, as transformers' flash path and TRL's collator name them:
    input_ids, labels, position_ids ``[1, T]``; cu_seq_lens_q/k ``[S+1]`` int32; max_length_q/k.

    Sdpa, flex and eager models find the seams from the restarting position_ids; flash models take
    the boundaries as they are. ``as_torch=None``: tensors when torch is installed.
    """
    batch = collate_varlen(packs, pad_to=pad_to, fixed_segments=fixed_segments, max_seqlen=max_seqlen, pad_id=pad_id)
    cu, longest = batch.pop("cu_seqlens"), batch.pop("max_seqlen")
    batch.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
    return to_torch(batch) if _want_torch(as_torch) else batch


def collate_flattening(packs: Sequence[Pack], *, as_torch: bool = False) -> dict:
    """HF ``DataCollatorWithFlattening`` layout: input_ids, labels, position_ids ``[1, T]``, no attention_mask."""
    batch = collate_varlen(packs)
    batch = {k: batch[k] for k in ("input_ids", "labels", "position_ids")}
    return to_torch(batch) if as_torch else batch


def trl_features(pack: Pack) -> dict[str, list[int]]:
    """One pack as the row TRL's ``DataCollatorForLanguageModeling(padding_free=True)`` reads: input_ids,
    labels and seq_lengths (the columns SFTTrainer keeps; TRL restarts positions at every seq_lengths seam)."""
    return {"input_ids": pack.input_ids.tolist(), "labels": pack.labels.tolist(),
            "seq_lengths": pack.seq_lengths.tolist()}


def split_examples(pack: Pack) -> list[dict[str, list[int]]]:
    """A pack cut back into its examples (input_ids and labels each): the features transformers'
    ``DataCollatorWithFlattening`` needs, since it restarts positions per feature, not per seam."""
    bounds = pack.cu_seqlens.tolist()
    return [{"input_ids": pack.input_ids[a:b].tolist(), "labels": pack.labels[a:b].tolist()}
            for a, b in zip(bounds[:-1], bounds[1:])]


def num_supervised(batch: dict) -> int:
    """Labels that carry loss in a batch (any layout: numpy or torch, packcli's, TRL's or HF's)."""
    labels = batch["labels"]
    return int((labels != IGNORE_INDEX).sum())


def to_torch(batch: dict) -> dict:
    """numpy arrays to tensors: int64 tokens, labels and positions (what embeddings and
    cross-entropy index with); the boundaries stay int32, as the varlen kernels take them."""
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


def _want_torch(as_torch: bool | None) -> bool:
    if as_torch is not None:
        return as_torch
    import importlib.util

    return importlib.util.find_spec("torch") is not None

