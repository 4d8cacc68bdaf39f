"""Pack example lengths into fixed-capacity packs: the strategy registry, metrics and budgets.

`pack_lengths` shuffles (seeded), lets a strategy assign the shuffled examples to packs, and
returns a `PackPlan`: which pack each example is in and the order training reads them in.

    input          e0 e1 e2 e3 e4 e5 e6 e7 e8 e9
    shuffled       e7 e2 e9 e4 e0 e5 ...              PCG64(seed).permutation(n)
    strategy       A = e7 e9 e0   B = e2 e4   C = e5 ...   (shuffled order kept inside a pack)
    numbered       A=0 B=1 C=2 by first shuffled position; with shuffle_packs, then permuted by
                   PCG64(seed).jumped(), say C=0 A=1 B=2
    plan.order     e5 ... | e7 e9 e0 | e2 e4
    pack_offsets   0        k          k+3     k+5          plan.pack_of[e9] == 1

Strategies, by what they trade (numbers: docs/benchmarks-packing.md):
  * ``bfd``: best-fit decreasing over the whole input. Densest (within 0.01% of the lower bound
    on SFT-like lengths) but a pack mixes examples from anywhere in the shuffled order.
  * ``ffd``: first-fit decreasing; as dense as BFD or slightly less, 2-3x slower.
  * ``window`` (default): BFD over windows of W shuffled examples with open packs carried into the
    next WINDOW_MAX_AGE - 1 windows, so a pack spans fewer than WINDOW_MAX_AGE * W consecutive
    shuffled positions and no example moves WINDOW_MAX_AGE * W or
    more positions (`window_displacement_bound`). Within 0.08% of BFD's density on SFT-like
    lengths; uniform lengths are its hard case (~0.7% below BFD at W=1000): use bfd or a larger W.
  * ``sequential``: next fit in shuffled order; zero reordering, the density control.

Displacement and the length-position correlation are measured before the pack shuffle: they
describe what the packer did to the order, not the unbiased permutation of whole packs after it.
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from packcli.artifact.fieldspec import setting_bounds
from packcli.artifact.manifest import PackSettings
from packcli.checks import int_problems
from packcli.choices import Strategy
from packcli.pack import kernels

DEFAULT_WINDOW = 1000
"""Examples per window: ~130 packs' worth of SFT-like examples at C=4096, enough choice for best
fit to land within 0.05% of whole-input BFD (docs/benchmarks-packing.md)."""

WINDOW_MAX_AGE = 4
"""Windows a pack stays open for. 1 closes packs at every window edge as TRL does per 1000-row
batch (0.42% below BFD's density on SFT-like lengths at C=4096); 2 leaves 0.05%; 4 costs almost no
mean displacement and cuts the loss on uniform lengths from 1.01% to 0.66% (docs/benchmarks-packing.md)."""


class PackAssigner(Protocol):
    """A strategy: writes the pack id (creation order) of every shuffled position into ``pack_of`` and returns
    the pack count."""

    def __call__(
        self, lengths: npt.NDArray[np.int64], capacity: int, window: int, pack_of: npt.NDArray[np.int32]
    ) -> int: ...


Allocate = Callable[[int, npt.DTypeLike], np.ndarray]
"""Makes an uninitialised array of ``n`` values of a dtype (``np.empty``, or `packcli.job.scratch.Scratch.empty`
for file-backed ones)."""

_ASSIGNERS: dict[str, PackAssigner] = {  # in the order budget messages try alternatives
    Strategy.bfd.value: lambda lengths, capacity, window, pack_of: kernels.best_fit_windows_into(
        lengths, capacity, max(lengths.size, 1), 1, pack_of
    ),
    Strategy.ffd.value: lambda lengths, capacity, window, pack_of: kernels.first_fit_decreasing_into(
        lengths, capacity, pack_of
    ),
    Strategy.window.value: lambda lengths, capacity, window, pack_of: kernels.best_fit_windows_into(
        lengths, capacity, min(window, max(lengths.size, 1)), WINDOW_MAX_AGE, pack_of
    ),
    Strategy.sequential.value: lambda lengths, capacity, window, pack_of: kernels.next_fit_into(
        lengths, capacity, pack_of
    ),
}

STRATEGIES: tuple[str, ...] = tuple(_ASSIGNERS)


def resolved_window(strategy: str, window: int | None) -> int | None:
    """The window ``strategy`` packs with: ``window`` or DEFAULT_WINDOW under ``window``, None under any other
    (what `PackPlan.window` and the manifest's ``config.window`` hold)."""
    if strategy != Strategy.window.value:
        return None
    return DEFAULT_WINDOW if window is None else window


def window_displacement_bound(window: int) -> int:
    """Largest |packed position - shuffled position| the window strategy allows (before the pack shuffle).

    With A = WINDOW_MAX_AGE: a pack created in window k takes examples from windows k..k+A-1 only,
    so its first position f and every member i lie in [kW, (k+A)W). Packs are numbered by first
    position, so every example shuffled before f is packed before i (packed(i) >= f > i - AW), and
    every example packed before i sits in a pack created in window k or earlier, hence at a
    shuffled position below (k+A)W (packed(i) <= (k+A)W - 1 <= i + AW - 1).
    """
    return WINDOW_MAX_AGE * window - 1


@dataclass(frozen=True)
class LowerBounds:
    """Lower bounds on the number of packs any packing needs."""

    sum: int
    """ceil(total tokens / capacity)."""
    l2: int
    """Martello-Toth L2 (1990), never below `sum`."""

    @property
    def best(self) -> int:
        return max(self.sum, self.l2)


def lower_bounds(lengths: npt.ArrayLike, capacity: int) -> LowerBounds:
    """ceil(sum/C) and Martello-Toth L2 = max over 0 <= K <= C/2 of
    |{l > C-K}| + |{C/2 < l <= C-K}| + max(0, ceil((sum{K <= l <= C/2} - free room of the second
    set) / C)), computed for every K at once from a length histogram in O(n + C).

    Raises:
        ValueError: a length outside 1..capacity (as pack_lengths).
    """
    lengths = _validated_lengths(lengths, capacity, copy=False)  # read only here
    if lengths.size == 0:
        return LowerBounds(sum=0, l2=0)
    hist = np.bincount(lengths, minlength=capacity + 1)[: capacity + 1]
    count_upto = np.cumsum(hist)  # items with length <= index
    tokens_upto = np.cumsum(hist * np.arange(capacity + 1))
    half = capacity // 2  # l <= C/2  <=>  l <= half, for integers
    k = np.arange(half + 1)
    big = lengths.size - count_upto[capacity - k]  # l > C - K
    mid = count_upto[capacity - k] - count_upto[half]  # C/2 < l <= C - K
    mid_tokens = tokens_upto[capacity - k] - tokens_upto[half]
    below_k = np.where(k > 0, k - 1, 0)
    small_tokens = tokens_upto[half] - tokens_upto[below_k]  # K <= l <= C/2
    overflow = small_tokens - (mid * capacity - mid_tokens)
    l2 = big + mid + np.maximum(0, -(-overflow // capacity))
    return LowerBounds(sum=int(-(-int(lengths.sum()) // capacity)), l2=int(l2.max()))


@dataclass(frozen=True)
class PackMetrics:
    """How dense a packing is and how far it moved examples from their shuffled positions."""

    num_examples: int
    num_packs: int
    tokens: int
    density: float
    """tokens / (num_packs * capacity); 0 with no packs."""
    lower_bound: int
    lb_sum: int
    lb_l2: int
    gap_to_bound: float
    """(num_packs - lower_bound) / lower_bound; 0 with no packs."""
    displacement_mean: float
    """|position after packing - position in the shuffled input|, in examples, measured before
    the pack shuffle (which moves whole packs at random and would make this O(n) for every strategy)."""
    displacement_p99: float
    displacement_max: int
    length_position_corr: float
    """Pearson correlation of length with position after packing, before the pack shuffle (0 if undefined)."""

    def to_dict(self) -> dict[str, int | float]:
        return asdict(self)


_STEP = 1 << 20  # elements an integer fill works on at a time (an exact operation, so the steps change nothing)


def _arange_into(out: np.ndarray) -> np.ndarray:
    """``out[i] = i`` (``np.arange`` into the caller's array), a step at a time: no n-long temporary."""
    for start in range(0, len(out), _STEP):
        out[start:start + _STEP] = np.arange(start, min(start + _STEP, len(out)))
    return out


def _dot(a: np.ndarray, b: np.ndarray, product: np.ndarray) -> float:
    """sum(a * b), the products in ``product``. Elementwise sums, not np.dot: BLAS threads stall for tens of ms
    on a busy machine."""
    return float(np.multiply(a, b, out=product).sum())


def measure_packing(
    shuffled_lengths: npt.NDArray[np.int64],
    grouped: npt.NDArray[np.int64],
    pack_offsets: npt.NDArray[np.int64],
    capacity: int,
    allocate: Allocate = np.empty,
) -> PackMetrics:
    """Metrics of any packing given as shuffled positions grouped by pack (also used for peers).

    Args:
        shuffled_lengths: lengths in the order the packer saw them.
        grouped: shuffled positions in packed order (a permutation of 0..n-1).
        pack_offsets: num_packs + 1 offsets into `grouped`.
        capacity: tokens per pack.
        allocate: makes the per-example work arrays (`pack_lengths`); every float is computed over whole
            arrays in one order whichever it is, so the metrics are the same bits.
    """
    n = int(shuffled_lengths.size)
    num_packs = int(pack_offsets.size - 1)
    tokens = int(shuffled_lengths.sum())
    bounds = lower_bounds(shuffled_lengths, capacity)
    displacement = allocate(n, np.int64)  # |position - grouped|, filled a step at a time (no n-long arange)
    np.subtract(_arange_into(displacement), grouped, out=displacement)
    np.abs(displacement, out=displacement)
    packed_lengths = allocate(n, np.float64)
    for start in range(0, n, _STEP):
        step = slice(start, start + _STEP)
        packed_lengths[step] = shuffled_lengths[grouped[step]]
    packed_lengths -= packed_lengths.mean() if n else 0.0
    positions = allocate(n, np.float64)
    np.subtract(_arange_into(positions), (n - 1) / 2, out=positions)
    product = allocate(n, np.float64)
    spread = float(np.sqrt(_dot(packed_lengths, packed_lengths, product) * _dot(positions, positions, product)))
    corr = _dot(packed_lengths, positions, product) / spread if spread > 0 else 0.0
    del packed_lengths, positions, product
    mean, most = (float(displacement.mean()), int(displacement.max())) if n else (0.0, 0)
    # Last: the percentile may reorder ``displacement`` (ours) instead of copying it.
    p99 = float(np.percentile(displacement, 99, overwrite_input=True)) if n else 0.0
    return PackMetrics(
        num_examples=n,
        num_packs=num_packs,
        tokens=tokens,
        density=tokens / (num_packs * capacity) if num_packs else 0.0,
        lower_bound=bounds.best,
        lb_sum=bounds.sum,
        lb_l2=bounds.l2,
        gap_to_bound=(num_packs - bounds.best) / bounds.best if bounds.best else 0.0,
        displacement_mean=mean,
        displacement_p99=p99,
        displacement_max=most,
        length_position_corr=corr,
    )


@dataclass(frozen=True, eq=False)
class PackPlan:
    """Where every example goes: the planner's output alone. The settings it was made with are the caller's
    (`packcli.artifact.manifest.PackSettings`, which `check_budgets` takes), never copied here. Arrays are
    read-only; `lengths` is kept so the plan can be checked and re-packed (check_budgets) without the caller
    passing the data again."""

    lengths: npt.NDArray[np.int64]
    """Token count per example, input order."""
    pack_of: npt.NDArray[np.int32]
    """Final pack index per example, input order."""
    order: npt.NDArray[np.int64]
    """Example indices in packed order: pack 0's examples, then pack 1's, ..."""
    pack_offsets: npt.NDArray[np.int64]
    """num_packs + 1 offsets into `order`."""
    num_packs: int
    metrics: PackMetrics


def _validated_lengths(lengths: npt.ArrayLike, capacity: int, *, copy: bool = True) -> npt.NDArray[np.int64]:
    """``lengths`` as a checked one-dimensional int64 array: a copy, or with ``copy=False`` the array itself
    when it is int64 already (for a caller that only reads it, or copies it where it wants it)."""
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise ValueError(f"lengths must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"lengths must be integers, got dtype {array.dtype}")
    if array.min() >= 1 and array.max() <= capacity:  # two reductions; the mask below only to name the culprit
        return array if not copy and array.dtype == np.int64 else array.astype(np.int64)
    bad = np.flatnonzero((array < 1) | (array > capacity))
    if bad.size:
        first = int(bad[0])
        raise ValueError(
            f"lengths[{first}] = {array[first]} is outside 1..{capacity} (capacity); "
            f"{bad.size} example(s) out of range: drop empty examples and truncate or drop "
            "over-long ones before packing"
        )
    return array.astype(np.int64)


def pack_lengths(
    lengths: npt.ArrayLike,
    capacity: int,
    *,
    strategy: Strategy | str = Strategy.window,
    window: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    shuffle_packs: bool = True,
    allocate: Allocate = np.empty,
) -> PackPlan:
    """Assign examples to packs of `capacity` tokens.

    Args:
        lengths: tokens per example, input order; each in 1..capacity.
        capacity: tokens per pack.
        strategy: one of STRATEGIES.
        window: examples per window for strategy="window" (default DEFAULT_WINDOW: `resolved_window`);
            ignored by the other strategies.
        seed: seeds the example shuffle (PCG64(seed)) and the pack shuffle (PCG64(seed).jumped()),
            so a seed gives the same plan on any machine.
        shuffle: permute the examples before packing; False packs them in input order.
        shuffle_packs: permute the packs, so training does not meet all long-example packs first;
            False numbers packs by their first example's shuffled position.
        allocate: makes every array of one value an example, the plan's and the work arrays (a few dozen
            bytes an example while it runs): ``np.empty`` by default; ``pack``'s driver passes
            `packcli.job.scratch.Scratch.empty`, so they are file-backed there
            (docs/benchmarks-pipeline.md, memory). The plan is the same whichever it is.

    Returns:
        The PackPlan with its metrics.

    Raises:
        ValueError: an unknown strategy, a capacity, window or seed outside the range a manifest holds
            (`packcli.artifact.fieldspec.setting_bounds`, the one definition pack and verify use), or a length
            outside 1..capacity.
    """
    if strategy not in _ASSIGNERS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    strategy = Strategy(strategy).value
    window = resolved_window(strategy, window)
    problems = [p for name, value in (("capacity", capacity), ("window", window), ("seed", seed))
                for p in int_problems(f"`{name}`", value, *setting_bounds(name))]
    if problems:
        raise ValueError("; ".join(problems))
    capacity = int(capacity)
    checked = _validated_lengths(lengths, capacity, copy=False)
    n = checked.size
    values = allocate(n, np.int64)
    values[...] = checked
    del checked

    shuffled_from = allocate(n, np.int64)
    _arange_into(shuffled_from)
    if shuffle:  # what Generator.permutation(n) does: shuffle an arange in place
        np.random.Generator(np.random.PCG64(seed)).shuffle(shuffled_from)
    shuffled = allocate(n, np.int64)
    np.take(values, shuffled_from, out=shuffled, mode="clip")  # a permutation: "raise" would buffer a copy
    raw = allocate(n, np.int32)
    num_packs = _ASSIGNERS[strategy](shuffled, capacity, int(window or 0), raw)
    pack_at, grouped = allocate(n, np.int32), allocate(n, np.int64)
    offsets = kernels.group_by_first_position_into(raw, num_packs, pack_at, grouped)
    del raw
    # Order metrics describe the packer, so they are taken before the pack shuffle: that shuffle is
    # an unbiased permutation of whole packs, which moves every example O(n) whatever the strategy.
    metrics = measure_packing(shuffled, grouped, offsets, capacity, allocate)
    del shuffled, grouped
    pack_perm = (np.random.Generator(np.random.PCG64(seed).jumped()).permutation(num_packs) if shuffle_packs
                 else np.arange(num_packs))
    pack_of, order = allocate(n, np.int32), allocate(n, np.int64)
    pack_offsets = kernels.permute_packs_into(pack_at, offsets, pack_perm, shuffled_from, pack_of, order)
    for array in (values, pack_of, order, pack_offsets):
        array.setflags(write=False)
    return PackPlan(
        lengths=values,
        pack_of=pack_of,
        order=order,
        pack_offsets=pack_offsets,
        num_packs=int(num_packs),
        metrics=metrics,
    )


def _meets(metrics: PackMetrics, min_density: float | None, max_displacement: float | None) -> bool:
    return (min_density is None or metrics.density >= min_density) and (
        max_displacement is None or metrics.displacement_mean <= max_displacement
    )


def check_budgets(plan: PackPlan, settings: PackSettings) -> list[str]:
    """One message per unmet budget, with the achieved value and an alternative that meets it.

    Args:
        plan: what `pack_lengths` made of the lengths under ``settings``.
        settings: the run's settings: the plan's capacity, strategy, seed and shuffles, and the budgets
            (``min_density``, ``max_displacement``; None: no budget).

    `max_displacement` is compared with `metrics.displacement_mean` (examples). Alternatives are
    found by re-packing `plan.lengths` with every other strategy (same capacity, seed and shuffles; the
    window strategy with its default window). Among those that meet the budget, one that meets every budget
    is named first, then the densest.

    Returns:
        Messages such as "density 0.9512 < `min_density` 0.97 (strategy=sequential); bfd reaches
        0.9987"; empty when every budget is met.
    """
    metrics, min_density, max_displacement = plan.metrics, settings.min_density, settings.max_displacement
    unmet_density = min_density is not None and metrics.density < min_density
    unmet_displacement = max_displacement is not None and metrics.displacement_mean > max_displacement
    if not (unmet_density or unmet_displacement):
        return []
    alternatives = []
    for strategy in STRATEGIES:
        if strategy == settings.strategy:
            continue
        other = pack_lengths(plan.lengths, settings.capacity, strategy=strategy, seed=settings.seed,
                             shuffle=settings.shuffle, shuffle_packs=settings.shuffle_packs)
        alternatives.append((strategy, other.metrics))
    alternatives.sort(key=lambda item: (not _meets(item[1], min_density, max_displacement), -item[1].density))
    where = f"(strategy={settings.strategy})"
    messages = []
    if unmet_density:
        found = [(name, m) for name, m in alternatives if m.density >= min_density]
        hint = f"{found[0][0]} reaches {found[0][1].density:.4f}" if found else (
            f"no strategy reaches it; the lower bound allows at most "
            f"{metrics.tokens / (metrics.lower_bound * settings.capacity):.4f}"
        )
        messages.append(f"density {metrics.density:.4f} < `min_density` {min_density} {where}; {hint}")
    if unmet_displacement:
        found = [(name, m) for name, m in alternatives if m.displacement_mean <= max_displacement]
        hint = (
            f"{found[0][0]} reaches {found[0][1].displacement_mean:.1f} at density {found[0][1].density:.4f}"
            if found
            else "no strategy reaches it; lower `window` or use sequential"
        )
        messages.append(
            f"mean displacement {metrics.displacement_mean:.1f} > `max_displacement` {max_displacement:g} "
            f"{where}; {hint}"
        )
    return messages
