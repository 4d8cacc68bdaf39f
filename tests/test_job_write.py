"""`packcli.job.write`: a shard task gathered from the spills and written, the labels masked at each
segment's start, and the counts the manifest (and verify's recount) take from the fates."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from packcli.contract import DROPPED, DUPLICATE, IGNORE_INDEX, PACKED, REJECTED, SPLIT, TRUNCATED, token_hash
from packcli.job.plan import ShardTask
from packcli.job.spill import SpillLayout, spill_paths
from packcli.job.write import count_examples, losses_by_fate, mask_chunk_starts, overlong_losses, write_shard_task


def test_each_segment_starts_masked_and_a_chunk_masks_its_overlap():
    labels = np.arange(10, 19, dtype=np.int32)
    mask_chunk_starts(labels, np.array([3, 4, 2], np.int64), np.array([1, 3, 0], np.int64))
    assert labels.tolist() == [IGNORE_INDEX, 11, 12, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 16, 17, 18]


def test_a_shard_task_writes_its_packs_from_the_spills(tmp_path):
    """Two units' spills, end to end (an example lies in one unit); the task takes three examples from both into
    two packs, in its own order."""
    units = {"u0": np.arange(100, 106, dtype=np.int32), "u1": np.arange(200, 204, dtype=np.int32)}
    for name, ids in units.items():
        ids_path, labels_path = spill_paths(tmp_path, name)
        ids.tofile(ids_path)
        (ids + 1).tofile(labels_path)  # a label per token: the next id, as a stand-in
    layout = SpillLayout.of(tmp_path, list(units), [6, 4])
    task = ShardTask(3, str(tmp_path / "shard-00003.parquet"), spill_offsets=np.array([3, 0, 7], np.int64),
                     lengths=np.array([3, 2, 2], np.int64), examples_per_pack=np.array([2, 1], np.int64),
                     example_ids=np.array([7, 8, 9], np.int64), masked=np.ones(3, np.int64))
    result = write_shard_task(layout, task)
    rows = pq.read_table(task.path).to_pylist()
    assert [r["input_ids"] for r in rows] == [[103, 104, 105, 100, 101], [201, 202]]  # 7: unit 1's second token
    assert [r["labels"] for r in rows] == [[IGNORE_INDEX, 105, 106, IGNORE_INDEX, 102], [IGNORE_INDEX, 203]]
    assert [r["example_ids"] for r in rows] == [[7, 8], [9]]
    assert result.index == 3 and result.info.name == "shard-00003.parquet" and result.info.rows == 2
    assert [h.decode() for h in result.token_hashes] == [token_hash(np.array(ids, np.int32))
                                                        for ids in ([103, 104, 105], [100, 101], [201, 202])]


STATUS = np.array([PACKED, TRUNCATED, DROPPED, REJECTED, DUPLICATE, SPLIT, SPLIT], np.int8)
USED_LEN = np.array([5, 8, 0, 0, 0, 8, 6], np.int64)
USED_SUP = np.array([4, 6, 0, 0, 0, 7, 4], np.int64)


def test_counts_per_status_and_the_tokens_in_packs():
    counts = count_examples(STATUS, USED_LEN, USED_SUP)
    assert counts == {"packed": 1, "truncated": 1, "dropped": 1, "rejected": 1, "duplicate": 1, "unsampled": 0,
                      "split": 2, "tokens": 27, "supervised_tokens": 21}


def test_what_the_over_long_policy_cost_by_fate():
    length = np.array([5, 12, 10, 0, 3, 12, 12], np.int64)
    lost = np.array([0, 3, 9, 0, 0, 1, 0], np.int64)
    assert losses_by_fate(STATUS, length, USED_LEN, lost) == {
        "truncated": {"examples": 1, "tokens": 4, "supervised_tokens": 3},
        "dropped": {"examples": 1, "tokens": 10, "supervised_tokens": 9},
        "split": {"examples": 2, "tokens": 10, "supervised_tokens": 1}}


def test_the_seam_tables_losses_count_an_overlap_once_and_a_dropped_chunk_whole():
    """Rows: a whole example; one truncated (12 -> 8); one dropped (10); a split one whose chunks [0, 8) and
    [6, 12) overlap by 2 (nothing lost); a split one whose second chunk [6, 12) was dropped (4 tokens lost)."""
    status = np.array([PACKED, TRUNCATED, DROPPED, SPLIT, SPLIT, SPLIT, DROPPED], np.int8)
    length = np.array([5, 8, 0, 8, 6, 8, 0], np.int64)
    original = np.array([5, 12, 10, 12, 12, 12, 12], np.int64)
    chunk = np.array([0, 0, 0, 0, 1, 0, 1])
    chunk_start = np.array([0, 0, 0, 0, 6, 0, 6], np.int64)
    supervised_lost = np.array([0, 2, 7, 0, 1, 0, 3], np.int64)
    assert overlong_losses(status, length, original, chunk, chunk_start, supervised_lost) == (4 + 10 + 0 + 4, 13)
