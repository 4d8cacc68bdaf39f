"""`packcli.stats.packed`: ``stats DIR`` of the committed fixture artifact, every number recounted here from its
shards and seam table, independently of the module."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
from conftest import FIXTURES, seam_rows

from packcli.artifact.manifest import Manifest
from packcli.stats.packed import artifact_stats, input_counts

PACKED = FIXTURES / "packed"
MANIFEST = json.loads((PACKED / "manifest.json").read_text())


def test_per_shard_counts_fills_and_lengths_are_the_shards_own():
    stats = artifact_stats(PACKED)
    capacity = MANIFEST["config"]["capacity"]
    assert stats.identity["manifest_sha256"] == MANIFEST["manifest_sha256"] and stats.counts == MANIFEST["counts"]
    tokens = []
    for shard, info in zip(stats.shards, MANIFEST["shards"]):
        rows = pq.read_table(PACKED / info["name"]).to_pydict()
        assert shard["name"] == info["name"] and shard["packs"] == len(rows["input_ids"])
        assert shard["tokens"] == sum(map(len, rows["input_ids"])) == info["tokens"]
        assert shard["examples"] == sum(len(cu) - 1 for cu in rows["cu_seqlens"])
        tokens += rows["num_tokens"]
    assert np.allclose(stats.fill, np.array(tokens) / capacity)
    packed = [r["length"] for r in seam_rows(PACKED) if r["status"] in ("packed", "truncated", "split")]
    assert stats.lengths.tolist() == packed
    assert set(stats.to_dict()) >= {"fill_quantiles", "supervised_fill_quantiles"} and "fill" not in stats.to_dict()


def test_each_input_with_its_records_and_its_mixture_weight():
    rows = input_counts(Manifest.of(MANIFEST))
    assert [r["source"] for r in rows] == [i["name"] for i in MANIFEST["inputs"]]
    assert [r["records"] for r in rows] == [i["records"] for i in MANIFEST["inputs"]]
    assert all(r["weight"] is None for r in rows)  # no mixture
    mixed = json.loads(json.dumps(MANIFEST))
    mixed["config"]["mix"] = {"by": "repeat", "sources": [{"inputs": [0, 1, 2], "weight": 2.0},
                                                          {"inputs": [3, 4, 5], "weight": 1.0}]}
    assert [r["weight"] for r in input_counts(Manifest.of(mixed))] == ["2x"] * 3 + ["1x"] * 3
