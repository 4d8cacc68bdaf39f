"""The constants of the packing contract (docs/contract.md): what every layer agrees on.

It imports nothing of packcli, so the tokenizer, the pack job, the artifact readers, the loader and
the verifier can all stand on it without standing on each other.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

CONTRACT_VERSION = 3  # 3: over-long examples split into chunks (seam-table chunk columns, status split)
# Contracts whose shards `packcli.data` reads: 3 changed the seam table and the manifest, not the packs.
SHARD_CONTRACTS = (2, 3)
MAX_INT32 = 2**31 - 1  # token counts, offsets and line numbers are int32 in the artifact
MAX_SEED = 2**63 - 1  # a seed a reader of the manifest can hold in an int64
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
CARD_NAME = "README.md"  # the dataset card: makes the artifact folder a Hugging Face dataset repository
HUB_PREFIX = "hf:"  # a name in the local Hugging Face cache: an input (hf:NAME[:CONFIG][:SPLIT]) or a tokenizer

# An example's fate, as the seam table spells it: in a pack whole, cut, or as one chunk of several; left
# out as over-long, unusable, an exact duplicate (--dedupe exact), or not drawn by a mixture (--mix).
STATUSES = ("packed", "truncated", "dropped", "rejected", "duplicate", "unsampled", "split")
PACKED, TRUNCATED, DROPPED, REJECTED, DUPLICATE, UNSAMPLED, SPLIT = range(7)  # the same, as the pack job's codes
IN_PACKS = ("packed", "truncated", "split")  # statuses whose rows sit in a pack
IN_PACK_CODES = (PACKED, TRUNCATED, SPLIT)


def shard_name(index: int) -> str:
    """The file name of shard ``index``: zero-padded, so names sort in shard order."""
    return f"shard-{index:05d}.parquet"


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes as stored (compressed bytes for .gz/.zst), as the manifest pins it."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def example_id(input_sha256: str, occurrence: int, record: int, copy: int = 0) -> int:
    """Stable 63-bit ID of one copy of one record (docs/contract.md, "Example ids").

    ``blake2b-64("{input_sha256}:{occurrence}:{record}:{copy}") >> 1``, where ``occurrence`` counts the
    earlier inputs of the run with the same sha256 (0 unless the same content is given twice),
    ``record`` is the record's number in its input (JSONL line, Parquet or dataset row) and ``copy``
    which copy of it a mixture made (0: the first or only one). Content and position, never a path:
    the same record keeps its id wherever its file lives and whatever else is packed with it, and no
    two examples of one artifact share the inputs to the hash.
    """
    digest = hashlib.blake2b(f"{input_sha256}:{occurrence}:{record}:{copy}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def token_hash(ids: npt.NDArray[np.int32]) -> str:
    """A short content hash of an example's token ids, stored in the seam table."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int32).tobytes(), digest_size=8).hexdigest()
