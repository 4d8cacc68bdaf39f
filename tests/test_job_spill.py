"""The spill files a unit writes (`packcli.job.spill`): read back by global token offset across units, in any
order, with files evicted and reads merged; a truncated spill is an error, never zeros."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from packcli.ingest import SourceKind, Span
from packcli.job.spill import SpillLayout, SpillReader, spill_paths
from packcli.job.units import UnitSpec


def test_spill_reader_gathers_across_units_in_any_order(tmp_path):
    """Examples read back by global token offset, across unit files, in a shuffled order."""
    rng = np.random.default_rng(0)
    specs = [UnitSpec(k, 0, "x", "sha", 0, Span(SourceKind.jsonl, "x", 1, 0, -1)) for k in range(4)]
    lengths = [rng.integers(1, 50, size=7) for _ in specs]
    lengths[1] = lengths[1][:0]  # a unit whose records were all rejected: no tokens
    truth_ids, truth_labels = [], []
    for spec, lens in zip(specs, lengths):
        ids = rng.integers(0, 1000, size=int(lens.sum()), dtype=np.int32)
        labels = np.where(rng.random(len(ids)) < 0.5, ids, -100).astype(np.int32)
        ids_path, labels_path = spill_paths(tmp_path, spec.name)
        ids_path.write_bytes(ids.tobytes())
        labels_path.write_bytes(labels.tobytes())
        truth_ids.append(ids)
        truth_labels.append(labels)
    all_ids, all_labels = np.concatenate(truth_ids), np.concatenate(truth_labels)
    lens = np.concatenate(lengths)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    order = rng.permutation(len(lens))
    layout = SpillLayout.of(tmp_path, [s.name for s in specs], [int(x.sum()) for x in lengths])
    assert pickle.loads(pickle.dumps(layout)) == layout  # shard-writing tasks receive it
    with SpillReader(layout) as spill:
        spill.MAX_OPEN = 2  # evicts: the reads below cycle through more units than stay open
        for gap in (0, 30, 1 << 14):  # example by example, some merged, each unit in one read
            spill.GAP = gap
            head = lens[order] - (np.arange(len(order)) % 3 == 0) * (lens[order] // 2)  # some cut short
            ids, labels = spill.gather(offsets[order], head)
            want = np.concatenate([all_ids[offsets[k]:offsets[k] + h] for k, h in zip(order, head)])
            want_labels = np.concatenate([all_labels[offsets[k]:offsets[k] + h] for k, h in zip(order, head)])
            assert np.array_equal(ids, want) and np.array_equal(labels, want_labels), gap
        k = int(order[0])
        head_ids, head_labels = spill.read(offsets[k], 1)
        assert head_ids.tolist() == [all_ids[offsets[k]]] and head_labels.tolist() == [all_labels[offsets[k]]]
        spill_paths(tmp_path, specs[3].name)[0].write_bytes(b"")  # a truncated spill is an error, not zeros
        with pytest.raises(OSError, match="ends early"):
            spill.read(offsets[-1], lens[-1])
