"""`packcli.verify.seen.FirstSeen`: per content key, the first record that carried it, over batches in record
order: what a dict from key to first record gives, without a Python object a record."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.verify.seen import KEY, FirstSeen


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pool=st.integers(1, 60), batches=st.lists(st.integers(0, 40), max_size=30))
def test_first_seen_is_the_first_record_a_dict_remembers(seed: int, pool: int, batches: list[int]) -> None:
    rng = np.random.default_rng(seed)
    keys = np.frombuffer(rng.bytes(16 * pool), KEY)
    seen, oracle, line = FirstSeen(), {}, 0
    for size in batches:
        picked = keys[rng.integers(0, pool, size)]
        inputs = rng.integers(0, 3, size).astype(np.int32)
        lines = np.arange(line, line + size, dtype=np.int32)
        line += size
        first_input, first_line = seen.add(picked, inputs, lines)
        want = [oracle.setdefault(bytes(key), (int(k), int(n))) for key, k, n in zip(picked, inputs, lines)]
        assert list(zip(first_input.tolist(), first_line.tolist())) == want
    assert seen.size == len(oracle)
    assert len(seen.runs) <= max(1, int(np.log2(max(1, seen.size))) + 1)  # merged as a binary counter carries


def test_a_key_met_again_much_later_names_its_first_record() -> None:
    """Many batches of new keys (runs merged again and again), then the first key again: its first record."""
    seen = FirstSeen()
    keys = np.frombuffer(np.random.default_rng(0).bytes(16 * 1000), KEY)
    for b in range(100):
        seen.add(keys[b * 10:(b + 1) * 10], np.full(10, 1, np.int32), np.arange(b * 10, b * 10 + 10, dtype=np.int32))
    first_input, first_line = seen.add(keys[[0, 999, 500]], np.full(3, 2, np.int32), np.array([7, 8, 9], np.int32))
    assert first_input.tolist() == [1, 1, 1] and first_line.tolist() == [0, 999, 500]
