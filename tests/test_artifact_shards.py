"""`packcli.artifact.shards`: a shard's columns, seq_lengths (what TRL reads) naming the same seams as cu_seqlens."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from packcli.artifact import manifest as mf
from packcli.artifact.shards import load_flat


def test_seq_lengths_are_the_seams(packed):
    manifest = mf.read_manifest(packed)
    for info in manifest["shards"]:
        flat = load_flat(pq.read_table(packed / info["name"]), info["name"])
        assert flat.rows
        for r in range(flat.rows):
            assert flat.seq_lengths[r].dtype == np.int32
            assert np.array_equal(flat.seq_lengths[r], np.diff(flat.cu[r]))
            assert int(flat.seq_lengths[r].sum()) == flat.num_tokens[r]
