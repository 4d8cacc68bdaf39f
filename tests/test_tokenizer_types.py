"""EncodedBatch: examples end to end, indexable one by one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packcli.tokenizer.types import Encoded, EncodedBatch

fastokens = pytest.importorskip("fastokens")


@given(st.lists(st.lists(st.integers(-100, 500), max_size=6), max_size=8), st.data())
def test_an_encoded_batch_holds_its_examples_end_to_end(rows, data):
    examples = [Encoded(np.asarray(r, np.int32), np.asarray(r, np.int32)[::-1].copy(),
                        np.arange(2 * len(r), dtype=np.int64).reshape(-1, 2)) for r in rows]
    batch = EncodedBatch.of(examples)
    assert len(batch) == len(rows) and batch.lengths.tolist() == [len(r) for r in rows]
    assert batch.supervised.tolist() == [e.supervised for e in examples]  # empty examples count 0
    for got, want in zip(batch, examples):
        for what in ("input_ids", "labels", "offsets"):
            np.testing.assert_array_equal(getattr(got, what), getattr(want, what))
    if rows:
        k = data.draw(st.integers(-len(rows), len(rows) - 1))
        np.testing.assert_array_equal(batch[k].labels, examples[k].labels)
    start, stop = sorted(data.draw(st.lists(st.integers(0, len(rows)), min_size=2, max_size=2)))
    part, want = batch[start:stop], EncodedBatch.of(examples[start:stop])
    for what in ("ids", "labels", "bounds", "offsets"):
        np.testing.assert_array_equal(getattr(part, what), getattr(want, what))
    without = EncodedBatch.of([*examples, Encoded(np.zeros(1, np.int32), np.zeros(1, np.int32))])
    assert without.offsets is None and len(without) == len(rows) + 1  # offsets only when every example has them
    with pytest.raises(IndexError):
        batch[len(rows)]
