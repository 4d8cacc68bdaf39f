"""Each packing kernel against a short pure-Python reference: identical assignments, not just valid ones.

The references scan every open pack (O(n x packs)), so they share no data structure with the
kernels (bitset + per-room stacks, segment tree); they encode only the documented tie-breaks.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.pack import kernels


def ref_sort_decreasing(lengths, start, stop):
    return sorted(range(start, stop), key=lambda pos: (-lengths[pos], pos))


def ref_best_fit_windows(lengths, capacity, window, max_age):
    """Least room that fits; ties to the pack whose room changed last; close packs by age."""
    pack_of = [-1] * len(lengths)
    room, born, touched, closed = [], [], [], []
    clock = 0
    for chunk, start in enumerate(range(0, len(lengths), window)):
        for pos in ref_sort_decreasing(lengths, start, min(start + window, len(lengths))):
            fits = [p for p in range(len(room)) if not closed[p] and room[p] >= lengths[pos]]
            if fits:
                pack = min(fits, key=lambda p: (room[p], -touched[p]))
            else:
                pack = len(room)
                room.append(capacity)
                born.append(chunk)
                touched.append(0)
                closed.append(False)
            room[pack] -= lengths[pos]
            clock += 1
            touched[pack] = clock
            pack_of[pos] = pack
        for pack in range(len(room)):
            closed[pack] = closed[pack] or born[pack] <= chunk - max_age + 1
    return pack_of, len(room)


def ref_first_fit_decreasing(lengths, capacity):
    pack_of, room = [-1] * len(lengths), []
    for pos in ref_sort_decreasing(lengths, 0, len(lengths)):
        pack = next((p for p in range(len(room)) if room[p] >= lengths[pos]), len(room))
        if pack == len(room):
            room.append(capacity)
        room[pack] -= lengths[pos]
        pack_of[pos] = pack
    return pack_of, len(room)


def ref_next_fit(lengths, capacity):
    pack_of, pack, fill = [], -1, capacity
    for length in lengths:
        if fill + length > capacity:
            pack, fill = pack + 1, 0
        fill += length
        pack_of.append(pack)
    return pack_of, pack + 1


def random_lengths(rng, n, capacity):
    """Mix of short, long and exactly-full examples, so ties and full packs occur."""
    kind = rng.integers(3)
    if kind == 0:
        return rng.integers(1, capacity + 1, n)
    if kind == 1:
        return np.minimum(rng.geometric(min(1.0, 4 / capacity), n), capacity)
    return rng.choice(np.unique([1, capacity // 3 or 1, capacity // 2 or 1, capacity]), n)


GRID = [
    (n, capacity, seed)
    for n in (0, 1, 2, 17, 150)
    for capacity in (1, 2, 3, 17, 33, 64, 65, 1000)
    for seed in range(3)
]


@pytest.mark.parametrize(("n", "capacity", "seed"), GRID)
def test_best_fit_matches_reference(n, capacity, seed):
    rng = np.random.default_rng(seed)
    lengths = random_lengths(rng, n, capacity).astype(np.int64)
    for window, max_age in ((max(n, 1), 1), (1, 1), (7, 1), (7, 2), (16, 4), (40, 3)):
        got, count = kernels.best_fit_windows(lengths, capacity, window, max_age)
        want, want_count = ref_best_fit_windows(lengths.tolist(), capacity, window, max_age)
        assert got.tolist() == want, f"window={window} max_age={max_age}"
        assert count == want_count


@pytest.mark.parametrize(("n", "capacity", "seed"), GRID)
def test_first_fit_decreasing_matches_reference(n, capacity, seed):
    lengths = random_lengths(np.random.default_rng(seed), n, capacity).astype(np.int64)
    got, count = kernels.first_fit_decreasing(lengths, capacity)
    want, want_count = ref_first_fit_decreasing(lengths.tolist(), capacity)
    assert got.tolist() == want
    assert count == want_count


@pytest.mark.parametrize(("n", "capacity", "seed"), GRID)
def test_next_fit_matches_reference(n, capacity, seed):
    lengths = random_lengths(np.random.default_rng(seed), n, capacity).astype(np.int64)
    got, count = kernels.next_fit(lengths, capacity)
    assert (got.tolist(), count) == ref_next_fit(lengths.tolist(), capacity)


def test_first_fit_grows_its_tree_past_the_initial_guess():
    # 200 examples of C/2 + 1 need 200 packs, far above the 9/8 * ceil(sum/C) first guess.
    lengths = np.full(200, 513, dtype=np.int64)
    got, count = kernels.first_fit_decreasing(lengths, 1024)
    assert count == 200
    assert got.tolist() == ref_first_fit_decreasing(lengths.tolist(), 1024)[0]


@pytest.mark.parametrize("capacity", [5, 40, 4096, 100_000])
@pytest.mark.parametrize(("start", "stop"), [(0, 0), (0, 1), (3, 30), (0, 600)])
def test_sort_decreasing_both_paths_match_reference(capacity, start, stop):
    # A length range over 16x the window (27 examples under C=4096) takes the merge sort path.
    lengths = np.random.default_rng(stop).integers(1, capacity + 1, 600).astype(np.int64)
    counts = np.zeros(capacity + 1, dtype=np.int64)
    order, ordered = kernels.sort_decreasing(lengths, start, stop, capacity, counts)
    want = ref_sort_decreasing(lengths.tolist(), start, stop)
    assert order.tolist() == want
    assert ordered.tolist() == [int(lengths[pos]) for pos in want]


@pytest.mark.parametrize("universe", [1, 63, 64, 65, 4097, 262_145])
def test_bitset_first_at_least_matches_a_set(universe):
    rng = np.random.default_rng(universe)
    bits, offsets = kernels._bitset_new(universe)
    members: set[int] = set()
    for _ in range(400):
        x = int(rng.integers(universe))
        if rng.random() < 0.6:
            kernels._bitset_add(bits, offsets, x)
            members.add(x)
        else:
            kernels._bitset_discard(bits, offsets, x)
            members.discard(x)
        query = int(rng.integers(universe))
        want = min((m for m in members if m >= query), default=-1)
        assert kernels._bitset_first_at_least(bits, offsets, query) == want


def ref_group(pack_of, packs):
    """Positions sorted by (pack, position) and the offsets: the grouping by definition."""
    grouped = sorted(range(len(pack_of)), key=lambda pos: (pack_of[pos], pos))
    return grouped, [0, *np.cumsum(np.bincount(np.asarray(pack_of, dtype=np.int64), minlength=packs)).tolist()]


def test_group_by_first_position_and_permute_packs_match_reference():
    rng = np.random.default_rng(0)
    for n, packs in itertools.product((0, 1, 50), (1, 7)):
        pack_of = rng.integers(packs, size=n).astype(np.int32)
        used = int(pack_of.max()) + 1 if n else 0
        renumbered, grouped, offsets = kernels.group_by_first_position(pack_of, used)
        first_seen = list(dict.fromkeys(pack_of.tolist()))
        want = [first_seen.index(p) for p in pack_of.tolist()]
        assert renumbered.tolist() == want
        assert [grouped.tolist(), offsets.tolist()] == list(ref_group(want, used))
        perm = rng.permutation(used)
        shuffled_from = rng.permutation(n)
        new_of, order, new_offsets = kernels.permute_packs(renumbered, offsets, perm, shuffled_from)
        moved = perm[renumbered] if n else np.zeros(0, dtype=np.int64)
        want_grouped, want_offsets = ref_group(moved.tolist(), used)
        assert order.tolist() == shuffled_from[want_grouped].tolist() and new_offsets.tolist() == want_offsets
        assert new_of[shuffled_from].tolist() == moved.tolist() and new_of.dtype == np.int32


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), max_size=300),
    extra=st.integers(0, 30),
    window=st.integers(1, 40),
    max_age=st.integers(1, 5),
)
def test_window_packs_are_valid_and_span_at_most_max_age_windows(lengths, extra, window, max_age):
    capacity = max(lengths, default=1) + extra
    array = np.array(lengths, dtype=np.int64)
    pack_of, count = kernels.best_fit_windows(array, capacity, window, max_age)
    assert sorted(set(pack_of.tolist())) == list(range(count))
    fill = np.bincount(pack_of, weights=array, minlength=count)
    assert (fill <= capacity).all()
    for pack in range(count):
        positions = np.flatnonzero(pack_of == pack)
        assert positions.max() // window - positions.min() // window < max_age


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=300), st.integers(64, 96), st.integers(1, 64),
       st.integers(1, 3))
def test_python_and_compiled_kernels_agree(lengths, capacity, window, max_age):
    """Up to `SMALL` items a kernel runs as the Python it is written in, beyond as numba's machine code: the
    same assignments, orders and offsets either way, on the same inputs."""
    array = np.array(lengths, dtype=np.int64)
    k = kernels.KERNELS

    def both(name, *args):
        with np.errstate(over="ignore"):
            py = k[name].py(*args)
        return py, k[name].jit(*args)

    for name, args in (("best_fit_windows", (array, capacity, window, max_age)),
                       ("first_fit_decreasing", (array, capacity)), ("next_fit", (array, capacity))):
        (py_of, py_n), (jit_of, jit_n) = both(name, *args)
        assert py_n == jit_n and np.array_equal(py_of, jit_of) and py_of.dtype == jit_of.dtype, name
    pack_of, packs = k["next_fit"].py(array, capacity)
    py_grouping, jit_grouping = both("group_by_first_position", pack_of[::-1].copy(), packs)
    assert all(np.array_equal(p, j) for p, j in zip(py_grouping, jit_grouping, strict=True))
    perm = np.random.default_rng(len(lengths)).permutation(packs)
    shuffled_from = np.random.default_rng(capacity).permutation(len(lengths))
    py_moved, jit_moved = both("permute_packs", py_grouping[0], py_grouping[2], perm, shuffled_from)
    assert all(np.array_equal(p, j) and p.dtype == j.dtype for p, j in zip(py_moved, jit_moved, strict=True))
    for start, stop in ((0, len(array)), (len(array) // 3, len(array))):
        (py_order, py_sorted), (jit_order, jit_sorted) = both(
            "sort_decreasing", array, start, stop, capacity, np.empty(capacity + 1, dtype=np.int64))
        assert np.array_equal(py_order, jit_order) and np.array_equal(py_sorted, jit_sorted)
    wide = np.array([1, 1 + 64 * 17 * len(array)] + lengths, dtype=np.int64)  # a range past 16x: the merge sort
    (py_order, _), (jit_order, _) = both("sort_decreasing", wide, 0, len(wide), int(wide.max()),
                                         np.empty(int(wide.max()) + 1, dtype=np.int64))
    assert np.array_equal(py_order, jit_order)


def test_a_small_input_runs_as_python_and_a_big_one_compiled(monkeypatch):
    """The size decides, per call: a big input is never run as slow Python, a small one never waits for numba."""
    seen = []
    best_fit = kernels.KERNELS["best_fit_windows"]
    assert best_fit.jit is not None  # compiled from the real Python kernel before it is replaced below
    monkeypatch.setattr(best_fit, "py", lambda *args: seen.append("py") or (np.zeros(0, np.int32), 0))
    best_fit(np.ones(kernels.SMALL, dtype=np.int64), 8, 8, 1)
    assert seen == ["py"]
    pack_of, count = best_fit(np.ones(kernels.SMALL + 1, dtype=np.int64), 8, kernels.SMALL + 1, 1)
    assert seen == ["py"] and count == (kernels.SMALL + 1 + 7) // 8 and len(pack_of) == kernels.SMALL + 1


def test_a_big_capacity_does_not_make_a_small_input_big():
    """The examples decide, not the capacity: a few examples at capacity 32,768 (scratch arrays that size) are
    packed as Python, and numba is never imported (a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from packcli.pack import pack_lengths; "
            "plan = pack_lengths(np.array([30000, 2000, 700, 30], np.int64), 32768, strategy='bfd'); "
            "print(plan.num_packs, 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "False"]
