"""Numba kernels that assign examples to packs: integer arrays in, integer arrays out.

Every kernel reads lengths in the order the caller wants them considered (the shuffled order) and
returns, for each of those positions, a pack id numbered in creation order. The ``_into`` kernels write
their per-example results into arrays the caller gives (`packcli.pack.strategies.pack_lengths` takes an
allocator, so ``pack``'s driver can give file-backed ones); the others allocate them. Nothing here knows about
seeds, metrics or the public API; `strategies.py` wires them together.

Best fit (`best_fit_windows`) places an example in O(log_64 C), not O(open packs): open packs sit
in a stack per remaining room 0..C, and a 64-ary summary bitset over room values answers "smallest
room >= length that has a pack" with a few word lookups (three levels up to C = 262143). Sorting a
window costs O(W + its length range), or O(W log W) if that range is over 16 W. First fit
(`first_fit_decreasing`) uses a max segment tree over packs, O(n log n). Both place examples in
sorted order and scatter the result afterwards, so the hot loop touches only the per-pack tables,
and those are int32 so that they stay in L2 (the kernels' speed: docs/benchmarks-packing.md).

Tie-breaks are part of the contract, because tests compare assignments with a reference:
  * decreasing order: longer first, equal lengths by position (a stable sort);
  * best fit: among packs with the same least room, the one whose room changed most recently;
  * first fit: the lowest pack id (creation order).

Numba is imported only when an input is big enough to pay for it (`Kernel`): importing it and loading
its cached machine code costs about a second, which is more than `verify` of a small artifact or
`stats` of a small corpus spends in total. Up to `SMALL` items a kernel runs as the plain Python it is
written in, the same code: a test compares both on random inputs.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable

import numpy as np

SMALL = 10_000  # array items up to which a kernel runs as Python (numba's import and cache load cost more)


class Kernel:
    """A kernel function that runs as Python on small arrays and as numba machine code on bigger ones."""

    def __init__(self, py: Callable) -> None:
        functools.update_wrapper(self, py)
        self.py = py
        self._jit: Callable | None = None

    def __call__(self, *args: object) -> object:
        # The first array is the examples' (lengths, pack ids); the others are sized by the capacity.
        first = next((a for a in args if isinstance(a, np.ndarray)), None)
        if first is None or first.size <= SMALL:
            with np.errstate(over="ignore"):  # the bit tricks wrap around on purpose, as machine code does
                return self.py(*args)
        return self.jit(*args)

    @property
    def jit(self) -> Callable:
        """The numba-compiled kernel (compiling, or loading from numba's cache, every kernel at once)."""
        if self._jit is None:
            _compile_all()
        return self._jit


KERNELS: dict[str, Kernel] = {}


def kernel(py: Callable) -> Kernel:
    KERNELS[py.__name__] = Kernel(py)
    return KERNELS[py.__name__]


def _compile_all() -> None:
    """Compile every kernel against a copy of this module's names in which the kernels are numba's
    dispatchers (compiled code calls only compiled code); the Python kernels keep calling each other."""
    from numba import njit

    names = dict(vars(sys.modules[__name__]))
    for name, wrapped in KERNELS.items():
        py = wrapped.py
        twin = types.FunctionType(py.__code__, names, py.__name__, py.__defaults__, py.__closure__)
        twin.__qualname__, twin.__module__ = py.__qualname__, py.__module__
        wrapped._jit = names[name] = njit(cache=True)(twin)


_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)


def _debruijn_table() -> np.ndarray:
    """Index of the lowest set bit, looked up by de Bruijn hashing of the isolated bit."""
    table = np.zeros(64, dtype=np.int64)
    for bit in range(64):
        table[((1 << bit) * int(_DEBRUIJN) % (1 << 64)) >> 58] = bit
    return table


_CTZ_TABLE = _debruijn_table()  # a constant the kernels read; numba freezes it into the code


@kernel
def _lowest_bit(word):
    """Index of the lowest set bit of a nonzero uint64 (portable count-trailing-zeros)."""
    isolated = word & (~word + np.uint64(1))
    return _CTZ_TABLE[np.int64((isolated * _DEBRUIJN) >> np.uint64(58))]


@kernel
def _bitset_new(universe):
    """A 64-ary summary bitset over 0..universe-1: level k+1 has a bit per nonzero word of level k."""
    levels = 1
    words = (universe + 63) >> 6
    while words > 1:
        words = (words + 63) >> 6
        levels += 1
    offsets = np.zeros(levels + 1, dtype=np.int64)
    words = (universe + 63) >> 6
    for level in range(levels):
        offsets[level + 1] = offsets[level] + words
        words = (words + 63) >> 6
    return np.zeros(offsets[levels], dtype=np.uint64), offsets


@kernel
def _bitset_add(bits, offsets, x):
    for level in range(offsets.size - 1):
        word = offsets[level] + (x >> 6)
        old = bits[word]
        bits[word] = old | (np.uint64(1) << np.uint64(x & 63))
        if old != 0:
            return
        x >>= 6


@kernel
def _bitset_discard(bits, offsets, x):
    for level in range(offsets.size - 1):
        word = offsets[level] + (x >> 6)
        new = bits[word] & ~(np.uint64(1) << np.uint64(x & 63))
        bits[word] = new
        if new != 0:
            return
        x >>= 6


@kernel
def _bitset_first_at_least(bits, offsets, x):
    """Smallest member >= x, or -1: climb until a word has a bit at or after x, then descend."""
    levels = offsets.size - 1
    level = 0
    while level < levels:
        word = x >> 6
        if offsets[level] + word >= offsets[level + 1]:
            return -1
        masked = bits[offsets[level] + word] & (_ALL_ONES << np.uint64(x & 63))
        if masked != 0:
            x = (word << 6) | _lowest_bit(masked)
            while level > 0:
                level -= 1
                x = (x << 6) | _lowest_bit(bits[offsets[level] + x])
            return x
        x = word + 1
        level += 1
    return -1


@kernel
def _merge_sort(keys):
    """Ascending bottom-up merge sort; hand-written because np.sort/argsort add ~5 s of JIT."""
    src = keys.copy()
    dst = np.empty_like(keys)
    n = keys.size
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            for k in range(lo, hi):
                if i < mid and (j >= hi or src[i] <= src[j]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
        src, dst = dst, src
        width *= 2
    return src


@kernel
def sort_decreasing(lengths, start, stop, capacity, counts):
    """Positions start..stop-1 by length descending, ties by position (stable), and their lengths.

    Counting sort over the window's length range, O(size + range), unless the range exceeds 16x
    the size (tiny windows, huge capacities): then a merge sort, O(size log size). The counting
    sort writes the sorted lengths from the histogram instead of gathering them (a gather is 1M
    random reads at n=1M). `counts` is scratch of size capacity+1.
    """
    size = stop - start
    shortest = capacity
    longest = 0
    for pos in range(start, stop):
        shortest = min(shortest, lengths[pos])
        longest = max(longest, lengths[pos])
    order = np.empty(size, dtype=np.int64)
    ordered = np.empty(size, dtype=np.int64)
    if longest - shortest > 16 * size:
        # Key = (capacity - length, position): unique, so any correct sort is stable here.
        keys = np.empty(size, dtype=np.int64)
        for i in range(size):
            keys[i] = (capacity - lengths[start + i]) * size + i
        keys = _merge_sort(keys)
        for i in range(size):
            order[i] = keys[i] % size + start
            ordered[i] = capacity - keys[i] // size
        return order, ordered
    for length in range(shortest, longest + 1):
        counts[length] = 0
    for pos in range(start, stop):
        counts[lengths[pos]] += 1
    running = 0
    for length in range(longest, shortest - 1, -1):
        here = counts[length]
        for i in range(running, running + here):
            ordered[i] = length
        counts[length] = running
        running += here
    for pos in range(start, stop):
        length = lengths[pos]
        order[counts[length]] = pos
        counts[length] += 1
    return order, ordered


@kernel
def best_fit_windows(lengths, capacity, window, max_age):
    """`best_fit_windows_into` a new array: (pack id per position, number of packs)."""
    pack_of = np.empty(lengths.size, dtype=np.int32)
    return pack_of, best_fit_windows_into(lengths, capacity, window, max_age, pack_of)


@kernel
def best_fit_windows_into(lengths, capacity, window, max_age, pack_of):
    """Best-fit decreasing within consecutive windows, carrying open packs across window edges.

    Positions [k*window, (k+1)*window) form window k; each window is sorted longest-first and every
    example goes to the open pack with the least room that still fits (a new pack if none does).
    After window k, packs created in window k - max_age + 1 or earlier are closed, so a pack only
    ever holds examples from max_age consecutive windows. window >= n is plain BFD.

    Packs are created in window order, so "closed" is simply "id < oldest"; closed packs stay in
    their room's stack and are dropped lazily when they reach its top (amortised O(1) each).

    Writes the pack id per position, in creation order, into ``pack_of`` (int32, the caller's: it may be
    file-backed) and returns the number of packs.
    """
    n = lengths.size
    born = np.empty(n, dtype=np.int32)
    below = np.empty(n, dtype=np.int32)  # next pack down in the same room's stack, -1 at the bottom
    top = np.full(capacity + 1, -1, dtype=np.int32)  # newest pack per room value, -1 if none
    bits, offsets = _bitset_new(capacity + 1)  # room values whose stack is nonempty
    counts = np.empty(capacity + 1, dtype=np.int64)
    num_packs = 0
    oldest = 0
    for chunk in range((n + window - 1) // window):
        start = chunk * window
        order, ordered = sort_decreasing(lengths, start, min(start + window, n), capacity, counts)
        # Place in sorted order, then scatter (module docstring).
        placed = np.empty(order.size, dtype=np.int32)
        for i in range(order.size):
            length = ordered[i]
            pack = -1
            while pack < 0:
                fit = _bitset_first_at_least(bits, offsets, length)
                if fit < 0:
                    pack = num_packs
                    num_packs += 1
                    born[pack] = chunk
                    left = capacity - length
                    break
                pack = top[fit]
                while pack >= 0 and pack < oldest:  # closed: drop it now
                    pack = below[pack]
                top[fit] = below[pack] if pack >= 0 else -1
                if top[fit] < 0:
                    _bitset_discard(bits, offsets, fit)
                left = fit - length  # unused if pack < 0: every pack in that stack was closed, search again
            below[pack] = top[left]
            if top[left] < 0:
                _bitset_add(bits, offsets, left)
            top[left] = pack
            placed[i] = pack
        for i in range(order.size):
            pack_of[order[i]] = placed[i]
        while oldest < num_packs and born[oldest] <= chunk - max_age + 1:
            oldest += 1
    return num_packs


@kernel
def _grow_tree(tree, size, capacity):
    """Double the number of leaves; the new leaves are fresh packs with full room."""
    bigger = np.full(4 * size, capacity, dtype=np.int32)
    for leaf in range(size):
        bigger[2 * size + leaf] = tree[size + leaf]
    for node in range(2 * size - 1, 0, -1):
        bigger[node] = max(bigger[2 * node], bigger[2 * node + 1])
    return bigger, 2 * size


@kernel
def first_fit_decreasing(lengths, capacity):
    """`first_fit_decreasing_into` a new array: (pack id per position, number of packs)."""
    pack_of = np.empty(lengths.size, dtype=np.int32)
    return pack_of, first_fit_decreasing_into(lengths, capacity, pack_of)


@kernel
def first_fit_decreasing_into(lengths, capacity, pack_of):
    """First-fit decreasing: each example, longest first, into the lowest-numbered pack that fits.

    The segment tree's leaves are packs initialised to full room, so "the first leaf with room >=
    length" is either an open pack or the next fresh one. It starts with a power of two above
    9/8 of the sum bound (FFD is within 11/9 of optimal) and doubles when the leaves run out. Writes
    ``pack_of`` (the caller's) and returns the number of packs.
    """
    n = lengths.size
    tokens = 0
    for pos in range(n):
        tokens += lengths[pos]
    bound = (tokens + capacity - 1) // capacity
    size = 1
    while size < bound + bound // 8 + 1:
        size *= 2
    tree = np.full(2 * size, capacity, dtype=np.int32)  # room per pack at the leaves, max above
    num_packs = 0
    order, ordered = sort_decreasing(lengths, 0, n, capacity, np.empty(capacity + 1, dtype=np.int64))
    placed = np.empty(n, dtype=np.int32)
    for i in range(n):
        length = ordered[i]
        if tree[1] < length:
            tree, size = _grow_tree(tree, size, capacity)
        node = 1
        while node < size:
            node = 2 * node if tree[2 * node] >= length else 2 * node + 1
        placed[i] = node - size
        num_packs = max(num_packs, node - size + 1)
        tree[node] -= length
        node >>= 1
        while node > 0:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node >>= 1
    for i in range(n):
        pack_of[order[i]] = placed[i]
    return num_packs


@kernel
def next_fit(lengths, capacity):
    """`next_fit_into` a new array: (pack id per position, number of packs)."""
    pack_of = np.empty(lengths.size, dtype=np.int32)
    return pack_of, next_fit_into(lengths, capacity, pack_of)


@kernel
def next_fit_into(lengths, capacity, pack_of):
    """Next fit in the given order: start a new pack whenever the example does not fit the current one.
    Writes ``pack_of`` (the caller's) and returns the number of packs."""
    n = lengths.size
    pack = -1
    left = 0
    for pos in range(n):
        if lengths[pos] > left:
            pack += 1
            left = capacity
        left -= lengths[pos]
        pack_of[pos] = pack
    return pack + 1


@kernel
def group_by_first_position(pack_of, num_packs):
    """`group_by_first_position_into` new arrays: (new pack id per position, grouped positions, offsets)."""
    renumbered = np.empty(pack_of.size, dtype=np.int32)
    grouped = np.empty(pack_of.size, dtype=np.int64)
    return renumbered, grouped, group_by_first_position_into(pack_of, num_packs, renumbered, grouped)


@kernel
def group_by_first_position_into(pack_of, num_packs, renumbered, grouped):
    """Renumber packs 0.. in order of their first (lowest) position, and group positions by the new id.

    Writes the new pack id per position into ``renumbered`` (int32) and the positions grouped by pack, ascending
    within a pack, into ``grouped`` (int64), both the caller's; returns the num_packs + 1 offsets into them."""
    new_id = np.full(num_packs, -1, dtype=np.int32)
    offsets = np.zeros(num_packs + 1, dtype=np.int64)
    next_id = 0
    for pos in range(pack_of.size):
        pack = pack_of[pos]
        if new_id[pack] < 0:
            new_id[pack] = next_id
            next_id += 1
        renumbered[pos] = new_id[pack]
        offsets[new_id[pack] + 1] += 1
    for pack in range(num_packs):
        offsets[pack + 1] += offsets[pack]
    fill = offsets[:-1].copy()
    for pos in range(pack_of.size):
        pack = renumbered[pos]
        grouped[fill[pack]] = pos
        fill[pack] += 1
    return offsets


@kernel
def permute_packs(pack_at, offsets, pack_perm, shuffled_from):
    """`permute_packs_into` new arrays: (new pack id per input index, input indices in packed order, offsets)."""
    pack_of = np.empty(pack_at.size, dtype=np.int32)
    order = np.empty(pack_at.size, dtype=np.int64)
    return pack_of, order, permute_packs_into(pack_at, offsets, pack_perm, shuffled_from, pack_of, order)


@kernel
def permute_packs_into(pack_at, offsets, pack_perm, shuffled_from, pack_of, order):
    """Move whole packs (pack p becomes pack_perm[p]) and map shuffled positions back to input indices.

    `pack_at` is the pack per shuffled position and `offsets` its `group_by_first_position` offsets.
    One pass in position order writes each example straight to its slot, so positions stay ascending
    within a pack and no regrouping pass or gather of the big arrays is needed.

    Writes the new pack id per input index into ``pack_of`` (int32) and the input indices in new packed order
    into ``order`` (int64), both the caller's, and returns the new offsets: the grouping of
    `pack_perm[pack_at]` seen through `shuffled_from`.
    """
    num_packs = pack_perm.size
    new_offsets = np.zeros(num_packs + 1, dtype=np.int64)
    for pack in range(num_packs):
        new_offsets[pack_perm[pack] + 1] = offsets[pack + 1] - offsets[pack]
    for pack in range(num_packs):
        new_offsets[pack + 1] += new_offsets[pack]
    fill = new_offsets[:-1].copy()
    for pos in range(pack_at.size):
        new = pack_perm[pack_at[pos]]
        example = shuffled_from[pos]
        pack_of[example] = new
        order[fill[new]] = example
        fill[new] += 1
    return new_offsets
