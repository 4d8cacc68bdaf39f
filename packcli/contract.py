"""The constants of the packing contract (docs/contract.md): what every layer agrees on.

It imports nothing of packcli, so the tokenizer, the pack job, the artifact readers, the loader and
the verifier can all stand on it without standing on each other.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

CONTRACT_VERSION = 2
IGNORE_INDEX = -100  # a label that carries no loss (HF and PyTorch's cross-entropy default)
CONVENTIONS = {
    "labels": "unshifted",
    "ignore_index": IGNORE_INDEX,
    "first_label_of_example": "ignored",
    "positions": "reset-per-example",
    "padding": "none-stored",
}

MANIFEST_NAME = "manifest.json"
SEAM_TABLE_NAME = "examples.parquet"
REJECTS_NAME = "rejects.jsonl"

STATUSES = ("packed", "truncated", "dropped", "rejected")  # a record's fate, as the seam table spells it
PACKED, TRUNCATED, DROPPED, REJECTED = range(4)  # the same, as the codes the pack job keeps per example
IN_PACKS = ("packed", "truncated")  # statuses whose examples sit in a pack


def shard_name(index: int) -> str:
    """The file name of shard ``index``: zero-padded, so names sort in shard order."""
    return f"shard-{index:05d}.parquet"


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes as stored (compressed bytes for .gz/.zst), as the manifest pins it."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def example_id(file_sha256: str, line: int) -> int:
    """Stable 63-bit ID from the source file's content and the line: the same record keeps its ID
    wherever the file lives and whatever else is packed with it."""
    digest = hashlib.blake2b(f"{file_sha256}:{line}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def token_hash(ids: npt.NDArray[np.int32]) -> str:
    """A short content hash of an example's token ids, stored in the seam table."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int32).tobytes(), digest_size=8).hexdigest()
