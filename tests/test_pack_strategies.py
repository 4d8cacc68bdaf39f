"""pack_lengths, its metrics, lower bounds and budgets, checked against independent recomputation."""

import dataclasses
import itertools
import json
import math

import numpy as np
import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.artifact.manifest import PackSettings
from packcli.contract import MANIFEST_NAME
from packcli.pack import STRATEGIES, PackPlan, check_budgets, kernels, lower_bounds, pack_lengths
from packcli.pack.strategies import DEFAULT_WINDOW, WINDOW_MAX_AGE, resolved_window, window_displacement_bound

FIXTURE_SETTINGS = PackSettings.of(json.loads((FIXTURES / "packed" / MANIFEST_NAME).read_text())["config"])


def run_settings(**kw) -> PackSettings:
    """The run's settings a plan was made with (the fixture's, changed by ``kw``): what `check_budgets` reads."""
    return dataclasses.replace(FIXTURE_SETTINGS, **kw)


def shuffled_positions(plan: PackPlan, *, seed: int = 0, shuffle: bool = True) -> np.ndarray:
    """Shuffled position of every example, recomputed from the documented seeding."""
    n = plan.lengths.size
    perm = np.random.Generator(np.random.PCG64(seed)).permutation(n) if shuffle else np.arange(n)
    position = np.empty(n, dtype=np.int64)
    position[perm] = np.arange(n)
    return position


def assert_consistent(plan: PackPlan, capacity: int, *, seed: int = 0, shuffle: bool = True,
                      shuffle_packs: bool = True) -> None:
    n = plan.lengths.size
    offsets = plan.pack_offsets
    assert sorted(plan.order.tolist()) == list(range(n)), "every example exactly once"
    assert offsets.size == plan.num_packs + 1 and offsets[0] == 0 and offsets[-1] == n
    assert (np.diff(offsets) > 0).all(), "no empty pack"
    position = shuffled_positions(plan, seed=seed, shuffle=shuffle)
    firsts = []
    for pack in range(plan.num_packs):
        members = plan.order[offsets[pack] : offsets[pack + 1]]
        assert (plan.pack_of[members] == pack).all()
        assert plan.lengths[members].sum() <= capacity
        assert (np.diff(position[members]) > 0).all(), "shuffled order kept within a pack"
        firsts.append(position[members[0]])
    if not shuffle_packs:
        assert firsts == sorted(firsts), "packs numbered by first shuffled position"
    assert plan.metrics.num_packs == plan.num_packs and plan.metrics.num_examples == n


@settings(max_examples=120, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), max_size=250),
    extra=st.integers(0, 64),
    strategy=st.sampled_from(STRATEGIES),
    window=st.integers(1, 50),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
    shuffle_packs=st.booleans(),
)
def test_plans_are_consistent_and_deterministic(lengths, extra, strategy, window, seed, shuffle, shuffle_packs):
    capacity = max(max(lengths, default=1) + extra, 2)  # 2: the least capacity a pack of labels has
    kwargs = dict(strategy=strategy, window=window, seed=seed, shuffle=shuffle, shuffle_packs=shuffle_packs)
    plan = pack_lengths(lengths, capacity, **kwargs)
    assert_consistent(plan, capacity, seed=seed, shuffle=shuffle, shuffle_packs=shuffle_packs)
    again = pack_lengths(np.array(lengths, dtype=np.int32), capacity, **kwargs)
    for name in ("pack_of", "order", "pack_offsets"):
        assert np.array_equal(getattr(plan, name), getattr(again, name))
    assert plan.metrics == again.metrics
    if strategy == "window":
        assert plan.metrics.displacement_max <= window_displacement_bound(window)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=300), window=st.integers(1, 30))
def test_window_displacement_matches_recomputation_and_bound(lengths, window):
    plan = pack_lengths(lengths, 40, window=window, shuffle_packs=False, seed=1)
    moved = np.abs(shuffled_positions(plan, seed=1)[plan.order] - np.arange(len(lengths)))
    assert moved.max() == plan.metrics.displacement_max <= WINDOW_MAX_AGE * window - 1


def test_window_carries_packs_across_window_edges():
    # Closing packs at every window edge (TRL's batches) would keep every example within one window.
    lengths = np.clip(np.rint(np.random.default_rng(0).lognormal(np.log(100), 1.0, 20_000)), 1, 1024)
    plan = pack_lengths(lengths.astype(int), 1024, window=100, shuffle_packs=False)
    assert (WINDOW_MAX_AGE - 1) * 100 < plan.metrics.displacement_max <= window_displacement_bound(100)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_uses_its_kernel_on_the_shuffled_lengths(strategy):
    lengths = np.random.default_rng(3).integers(1, 300, 2500)
    plan = pack_lengths(lengths, 512, strategy=strategy, window=100, seed=9, shuffle_packs=False)
    shuffled = lengths[np.random.Generator(np.random.PCG64(9)).permutation(lengths.size)]
    raw, count = {
        "bfd": lambda: kernels.best_fit_windows(shuffled, 512, shuffled.size, 1),
        "ffd": lambda: kernels.first_fit_decreasing(shuffled, 512),
        "window": lambda: kernels.best_fit_windows(shuffled, 512, 100, WINDOW_MAX_AGE),
        "sequential": lambda: kernels.next_fit(shuffled, 512),
    }[strategy]()
    assert plan.num_packs == count
    first_seen = list(dict.fromkeys(raw.tolist()))
    want = [first_seen.index(p) for p in raw.tolist()]
    assert np.array_equal(plan.pack_of[np.argsort(shuffled_positions(plan, seed=9))], want)


def test_pack_shuffle_is_the_jumped_generator_permutation():
    lengths = np.random.default_rng(0).integers(1, 100, 1000)
    fixed = pack_lengths(lengths, 128, seed=5, shuffle_packs=False)
    shuffled = pack_lengths(lengths, 128, seed=5, shuffle_packs=True)
    perm = np.random.Generator(np.random.PCG64(5).jumped()).permutation(fixed.num_packs)
    assert np.array_equal(shuffled.pack_of, perm[fixed.pack_of])
    assert not np.array_equal(shuffled.pack_of, fixed.pack_of)


def test_different_seeds_give_different_plans():
    lengths = np.random.default_rng(0).integers(1, 100, 500)
    assert not np.array_equal(pack_lengths(lengths, 128, seed=1).order, pack_lengths(lengths, 128, seed=2).order)


def test_sequential_without_shuffles_preserves_input_order():
    lengths = [3, 5, 2, 8, 1, 1, 7]
    plan = pack_lengths(lengths, 8, strategy="sequential", shuffle=False, shuffle_packs=False)
    assert plan.order.tolist() == list(range(7))
    assert plan.pack_of.tolist() == [0, 0, 1, 2, 3, 3, 4]
    assert plan.metrics.displacement_max == 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_edge_cases(strategy):
    empty = pack_lengths([], 16, strategy=strategy)
    assert (empty.num_packs, empty.order.size, empty.pack_offsets.tolist()) == (0, 0, [0])
    assert empty.metrics.density == 0.0 and empty.metrics.lower_bound == 0
    one = pack_lengths([5], 16, strategy=strategy)
    assert (one.num_packs, one.pack_of.tolist(), one.order.tolist()) == (1, [0], [0])
    full = pack_lengths([16] * 9, 16, strategy=strategy)
    assert full.num_packs == 9 and full.metrics.density == 1.0
    for n_bits in (2, 5, 12):
        capacity = 2**n_bits + 1
        half_up = pack_lengths([2 ** (n_bits - 1) + 1] * 10, capacity, strategy=strategy)
        assert half_up.num_packs == 10, "two of C/2 + 1/2 never share a pack"
        half = pack_lengths([2 ** (n_bits - 1)] * 10, capacity, strategy=strategy)
        assert half.num_packs == 5
    same = pack_lengths([3] * 100, 10, strategy=strategy)
    assert same.num_packs == math.ceil(100 / 3)
    for plan, packed_at in ((empty, 16), (one, 16), (full, 16), (half, capacity), (same, 10)):
        assert_consistent(plan, packed_at)


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        ([5, 0, 3], r"lengths\[1\] = 0 is outside 1\.\.8"),
        ([5, 8, 9, 12], r"lengths\[2\] = 9 is outside 1\.\.8 .*2 example"),
        ([-1], r"lengths\[0\] = -1"),
        ([1.0, 2.0], "must be integers"),
        ([[1, 2]], "one-dimensional"),
    ],
)
def test_bad_lengths_are_rejected(lengths, message):
    with pytest.raises(ValueError, match=message):
        pack_lengths(lengths, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(strategy="best"), "unknown strategy 'best'; choose one of bfd, ffd, window, sequential"),
        (dict(capacity=1), "`capacity` must be an integer from 2 to 2,147,483,647, got 1"),
        (dict(capacity=True), "`capacity` must be an integer from 2"),
        (dict(capacity=2**31), "`capacity` must be an integer from 2 to 2,147,483,647, got 2147483648"),
        (dict(window=0), "`window` must be an integer from 1 to 2,147,483,647, got 0"),
        (dict(seed=-1), "`seed` must be an integer from 0 to 9,223,372,036,854,775,807, got -1"),
        (dict(seed=2**63), "`seed` must be an integer from 0"),  # a seed no manifest could hold
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pack_lengths([1, 2], **{"capacity": 8, **kwargs})


def test_window_defaults_and_is_ignored_elsewhere():
    assert resolved_window("window", None) == DEFAULT_WINDOW == 1000 and resolved_window("bfd", 7) is None
    lengths = np.random.default_rng(1).integers(1, 64, 3000)
    assert np.array_equal(pack_lengths(lengths, 64).order, pack_lengths(lengths, 64, window=DEFAULT_WINDOW).order)
    assert not np.array_equal(pack_lengths(lengths, 64).order, pack_lengths(lengths, 64, window=7).order)
    assert np.array_equal(pack_lengths(lengths, 64, strategy="bfd", window=7).order,
                          pack_lengths(lengths, 64, strategy="bfd").order)


def test_plan_arrays_are_read_only():
    plan = pack_lengths([1, 2, 3], 4)
    with pytest.raises(ValueError):
        plan.order[0] = 1


def l2_by_definition(lengths, capacity):
    """Martello-Toth L2, literally: sets J1, J2, J3 for every integer K in [0, C/2]."""
    best = 0
    for k in range(capacity // 2 + 1):
        j1 = [w for w in lengths if w > capacity - k]
        j2 = [w for w in lengths if capacity - k >= w > capacity / 2]
        j3 = [w for w in lengths if capacity / 2 >= w >= k]
        spare = len(j2) * capacity - sum(j2)
        best = max(best, len(j1) + len(j2) + max(0, math.ceil((sum(j3) - spare) / capacity)))
    return best


def optimal_packs(lengths, capacity):
    """Fewest packs by trying every assignment (tiny inputs only)."""
    for packs in range(1, len(lengths) + 1):
        for assignment in itertools.product(range(packs), repeat=len(lengths)):
            fill = [0] * packs
            for length, pack in zip(lengths, assignment, strict=True):
                fill[pack] += length
            if max(fill) <= capacity:
                return packs
    return 0


def test_lower_bounds_match_the_definition():
    rng = np.random.default_rng(0)
    for _ in range(300):
        capacity = int(rng.integers(1, 40))
        lengths = rng.integers(1, capacity + 1, int(rng.integers(1, 30))).tolist()
        bounds = lower_bounds(lengths, capacity)
        assert bounds.sum == math.ceil(sum(lengths) / capacity)
        assert bounds.l2 == l2_by_definition(lengths, capacity)
    assert lower_bounds([6, 6, 6], 10).sum == 2 and lower_bounds([6, 6, 6], 10).l2 == 3
    assert lower_bounds([], 10).best == 0


def test_lower_bounds_never_exceed_the_optimum():
    rng = np.random.default_rng(1)
    for _ in range(60):
        capacity = int(rng.integers(2, 20))
        lengths = rng.integers(1, capacity + 1, int(rng.integers(1, 7))).tolist()
        opt = optimal_packs(lengths, capacity)
        assert lower_bounds(lengths, capacity).best <= opt
        assert opt <= pack_lengths(lengths, capacity, strategy="bfd").num_packs


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_metrics_match_numpy_recomputation(strategy):
    lengths = np.random.default_rng(4).integers(1, 700, 3000)
    # Order metrics are taken before the pack shuffle, so they equal the unshuffled plan's.
    assert pack_lengths(lengths, 1024, strategy=strategy, window=200, seed=2).metrics == \
        pack_lengths(lengths, 1024, strategy=strategy, window=200, seed=2, shuffle_packs=False).metrics
    plan = pack_lengths(lengths, 1024, strategy=strategy, window=200, seed=2, shuffle_packs=False)
    m = plan.metrics
    packed_at = np.empty(lengths.size, dtype=np.int64)
    packed_at[plan.order] = np.arange(lengths.size)
    moved = np.abs(packed_at - shuffled_positions(plan, seed=2))
    x = lengths[plan.order] - lengths.mean()
    y = np.arange(lengths.size) - (lengths.size - 1) / 2
    assert m.tokens == lengths.sum()
    assert m.density == pytest.approx(lengths.sum() / (plan.num_packs * 1024))
    assert m.gap_to_bound == pytest.approx((plan.num_packs - m.lower_bound) / m.lower_bound)
    assert m.lower_bound == max(m.lb_sum, m.lb_l2) == lower_bounds(lengths, 1024).best
    assert m.displacement_mean == pytest.approx(moved.mean())
    rank = 0.99 * (moved.size - 1)
    low, high = np.sort(moved)[[math.floor(rank), math.ceil(rank)]]
    assert m.displacement_p99 == pytest.approx(low + (rank - math.floor(rank)) * (high - low))
    assert m.displacement_max == moved.max()
    assert m.length_position_corr == pytest.approx((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))
    assert set(m.to_dict()) >= {"density", "gap_to_bound", "displacement_p99", "length_position_corr"}


def test_constant_lengths_have_zero_correlation():
    assert pack_lengths([4] * 50, 16).metrics.length_position_corr == 0.0


def test_check_budgets_passes_met_budgets():
    plan = pack_lengths(np.random.default_rng(0).integers(1, 500, 2000), 1024, strategy="bfd")
    budgets = run_settings(capacity=1024, strategy="bfd", window=None)
    assert check_budgets(plan, dataclasses.replace(budgets, min_density=plan.metrics.density)) == []
    assert check_budgets(plan, budgets) == []


def test_check_budgets_names_the_value_and_a_strategy_that_meets_it():
    lengths = np.random.default_rng(0).integers(1, 1025, 5000)
    plan = pack_lengths(lengths, 1024, strategy="sequential")
    [message] = check_budgets(plan, run_settings(capacity=1024, strategy="sequential", window=None, min_density=0.95))
    bfd = pack_lengths(lengths, 1024, strategy="bfd").metrics.density
    assert message == (
        f"density {plan.metrics.density:.4f} < `min_density` 0.95 (strategy=sequential); bfd reaches {bfd:.4f}"
    )


def test_check_budgets_names_an_order_keeping_strategy_for_displacement():
    lengths = np.random.default_rng(0).integers(1, 500, 20_000)
    plan = pack_lengths(lengths, 1024, strategy="bfd")
    budgets = run_settings(capacity=1024, strategy="bfd", window=None, max_displacement=1000)
    [message] = check_budgets(plan, budgets)
    window = pack_lengths(lengths, 1024, strategy="window").metrics
    assert message == (
        f"mean displacement {plan.metrics.displacement_mean:.1f} > `max_displacement` 1000 (strategy=bfd); "
        f"window reaches {window.displacement_mean:.1f} at density {window.density:.4f}"
    )
    assert check_budgets(plan, dataclasses.replace(budgets, max_displacement=plan.metrics.displacement_mean)) == []


def test_check_budgets_says_when_nothing_can_meet_it():
    plan = pack_lengths([6, 6, 6], 10, strategy="bfd")
    [message] = check_budgets(plan, run_settings(capacity=10, strategy="bfd", window=None, min_density=0.7))
    assert "no strategy reaches it; the lower bound allows at most 0.6000" in message


def test_every_strategy_choice_has_an_assigner():
    from packcli.choices import Strategy

    assert set(STRATEGIES) == {s.value for s in Strategy}
    member, value = pack_lengths([3, 2, 7], 8, strategy=Strategy.bfd), pack_lengths([3, 2, 7], 8, strategy="bfd")
    assert np.array_equal(member.order, value.order)  # the member or its value, alike


@pytest.mark.parametrize(("strategy", "digest"), [
    ("bfd", "fa438390aef73b6b"), ("ffd", "d33f79aea849502a"), ("window", "1acb06f753cb57ce"),
    ("sequential", "7c839d0e4b109ff9"),
])
def test_plans_of_a_compiled_size_are_the_golden_ones(strategy, digest):
    """20,000 examples (compiled kernels): pack_of, order and offsets hash to what the plan gave before
    `group_by_first_position` and `permute_packs` replaced the regrouping passes; a plan is part of the
    artifact, so a faster path must not move one example."""
    import hashlib

    lengths = np.clip(np.random.default_rng(11).lognormal(np.log(350), 1.0, 20_000).round(), 1, 4096)
    plan = pack_lengths(lengths.astype(np.int64), 4096, strategy=strategy, seed=3)
    arrays = (plan.pack_of, plan.order, plan.pack_offsets)
    assert hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()[:16] == digest
