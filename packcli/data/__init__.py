"""Loading packs for training (docs/training.md).

    read.py      Pack, PackReader (row group at a time, shard hashes checked), iter_packs
    order.py     the epoch order and its split across ranks, batches and DataLoader workers
    dataset.py   PackDataset (torch IterableDataset or plain iterable), PackLoader, global_supervised
    collate.py   batches with the names each consumer reads (flash-attn, HF, TRL), num_supervised

Stands on ``packcli.artifact`` alone. Names resolve on first use, so ``from packcli.data import
iter_packs`` does not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Pack": "packcli.data.read",
    "PackReader": "packcli.data.read",
    "iter_packs": "packcli.data.read",
    "collate_varlen": "packcli.data.collate",
    "collate_hf": "packcli.data.collate",
    "collate_flattening": "packcli.data.collate",
    "trl_features": "packcli.data.collate",
    "split_examples": "packcli.data.collate",
    "num_supervised": "packcli.data.collate",
    "PackDataset": "packcli.data.dataset",
    "PackLoader": "packcli.data.dataset",
    "global_supervised": "packcli.data.dataset",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'packcli.data' has no attribute {name!r}")
