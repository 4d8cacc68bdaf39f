"""Benchmark the packing strategies, and TRL's and axolotl's packers when a peer venv has them.

    python scripts/bench_pack.py --out bench-out/pack.json --peer-python bench-out/peer-venv/bin/python
    python scripts/bench_pack.py --quick

Lengths are drawn per distribution, clipped to 16384, and lengths over the capacity are dropped
and redrawn (the distribution is truncated at C, n stays exact). Every packer sees the same
PCG64(0)-shuffled lengths. Times are medians after a warm-up call, single process, single thread:
"kernel" is the strategy's assignment alone, "total" is pack_lengths end to end (shuffle,
assignment, renumbering, grouping, metrics). Displacement is measured with shuffle_packs=False,
i.e. the strategy's own reordering; pack shuffling would add O(n) to every strategy alike.
--window-ages adds rows for the window kernel with other pack lifetimes (the design table).

Peers run in a separate interpreter (--peer-python) because they are not project dependencies:
  * trl: trl.pack_dataset(dataset, C, strategy="bfd") on a datasets.Dataset whose input_ids hold
    each example's index as its tokens. Its default map batch of 1000 rows packs every 1000
    examples separately ("trl-bfd"); "trl-bfd-global" passes one batch of all rows. Its time
    includes moving the tokens, which is what the API does.
  * axolotl: axolotl.utils.samplers.multipack.pack_parallel, the numba first-fit used by
    MultipackBatchSampler, with its defaults group_size=100000 and bin_size=200, one process.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import Timer, write_json  # noqa: E402  (standard library only: the peer venv imports it too)

TAIL_CLIP = 16_384
DISTRIBUTIONS = {
    "lognormal": "SFT-like: lognormal, median 350, sigma 1.0",
    "short": "short-heavy: lognormal, median 64, sigma 0.8",
    "bimodal": "70% lognormal(median 180, sigma 0.4) + 30% lognormal(median 1800, sigma 0.25)",
    "uniform": "uniform integers 1..C",
}


def draw_lengths(distribution: str, n: int, capacity: int, seed: int = 0) -> np.ndarray:
    """n lengths in 1..capacity: clip the tail to TAIL_CLIP, drop lengths > capacity, redraw."""
    rng = np.random.default_rng(seed)
    kept = np.zeros(0, dtype=np.int64)
    while kept.size < n:
        m = 2 * (n - kept.size) + 100
        if distribution == "lognormal":
            raw = rng.lognormal(np.log(350), 1.0, m)
        elif distribution == "short":
            raw = rng.lognormal(np.log(64), 0.8, m)
        elif distribution == "bimodal":
            raw = np.where(
                rng.random(m) < 0.7, rng.lognormal(np.log(180), 0.4, m), rng.lognormal(np.log(1800), 0.25, m)
            )
        else:
            raw = rng.integers(1, capacity + 1, m).astype(np.float64)
        lengths = np.clip(np.rint(raw), 1, TAIL_CLIP).astype(np.int64)
        kept = np.concatenate([kept, lengths[lengths <= capacity]])
    return kept[:n]


def median_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Median wall, median CPU and best wall seconds after a warm-up call. CPU and best times are
    reported too because the machines this runs on are shared: other processes inflate wall time."""
    fn()  # warm-up: JIT or cache load, page faults
    wall, cpu = [], []
    for _ in range(repeats):
        with Timer() as timed:
            fn()
        wall.append(timed.span.wall_s)
        cpu.append(timed.span.cpu_s)
    return float(np.median(wall)), float(np.median(cpu)), float(min(wall))


# ---------------------------------------------------------------- peers (run under --peer-python)


def _trl_packs(lengths: np.ndarray, capacity: int, batch_size: int) -> tuple[list[np.ndarray], float, float]:
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable
    from trl import pack_dataset

    datasets.disable_progress_bars()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = np.repeat(np.arange(lengths.size, dtype=np.int32), lengths)  # token = example index
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
    dataset = datasets.Dataset(InMemoryTable(pa.table({"input_ids": column})))
    with Timer() as timed:
        packed = pack_dataset(dataset, capacity, strategy="bfd", map_kwargs={"batch_size": batch_size})
        table = packed.with_format("arrow")[:]
    seconds, cpu_seconds = timed.span.wall_s, timed.span.cpu_s
    ids = table["input_ids"].combine_chunks().values.to_numpy()
    seq_lengths = table["seq_lengths"].combine_chunks()
    starts = np.concatenate([[0], np.cumsum(seq_lengths.values.to_numpy())[:-1]])
    per_pack = np.diff(seq_lengths.offsets.to_numpy())
    return np.split(ids[starts].astype(np.int64), np.cumsum(per_pack)[:-1]), seconds, cpu_seconds


def _axolotl_packs(lengths: np.ndarray, capacity: int) -> tuple[list[np.ndarray], float, float]:
    from axolotl.utils.samplers.multipack import pack_parallel

    def run(values: np.ndarray) -> list[list[int]]:
        return pack_parallel(values, capacity, group_size=100_000, bin_size=200, num_processes=1, mp_start_method=None)

    run(lengths[:1000].astype(np.int32))  # its kernels are not cached: compile outside the timing
    with Timer() as timed:
        bins = run(lengths.astype(np.int32))
    seconds, cpu_seconds = timed.span.wall_s, timed.span.cpu_s
    return [np.asarray(b, dtype=np.int64) for b in bins], seconds, cpu_seconds


def peer_worker(in_path: str, out_path: str) -> None:
    """Runs inside the peer venv: no packcli import. Writes grouped positions, offsets, seconds."""
    data = np.load(in_path)
    lengths, capacity = data["lengths"], int(data["capacity"])
    peers = {
        "trl-bfd": lambda: _trl_packs(lengths, capacity, 1000),
        "trl-bfd-global": lambda: _trl_packs(lengths, capacity, lengths.size),
        "axolotl-multipack": lambda: _axolotl_packs(lengths, capacity),
    }
    arrays, report = {}, {}
    for name, run in peers.items():
        try:
            packs, seconds, cpu_seconds = run()
        except ImportError as error:
            report[name] = {"error": f"cannot import: {error}"}
            continue
        arrays[f"{name}/grouped"] = np.concatenate(packs) if packs else np.zeros(0, np.int64)
        arrays[f"{name}/offsets"] = np.concatenate([[0], np.cumsum([p.size for p in packs])])
        report[name] = {"seconds": seconds, "cpu_seconds": cpu_seconds}
    arrays["report"] = np.array(json.dumps(report))
    np.savez(out_path, **arrays)


# ---------------------------------------------------------------- main process


def run_peers(peer_python: str | None, shuffled: np.ndarray, capacity: int) -> list[dict]:
    from packcli.pack.strategies import measure_packing

    if not peer_python:
        return [{"strategy": "peers", "error": "skipped: no --peer-python"}]
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(f"{tmp}/in.npz", lengths=shuffled, capacity=capacity)
        try:
            done = subprocess.run(
                [peer_python, __file__, "--peer-worker", f"{tmp}/in.npz", f"{tmp}/out.npz"],
                capture_output=True,
                text=True,
            )
        except OSError as error:
            return [{"strategy": "peers", "error": f"cannot run --peer-python: {error}"}]
        if done.returncode != 0:
            return [{"strategy": "peers", "error": f"peer interpreter failed: {done.stderr.strip()[-300:]}"}]
        out = np.load(f"{tmp}/out.npz")
        rows = []
        for name, entry in json.loads(str(out["report"])).items():
            if "error" in entry:
                rows.append({"strategy": name, "error": entry["error"]})
                continue
            grouped, offsets = out[f"{name}/grouped"], out[f"{name}/offsets"]
            assert np.array_equal(np.sort(grouped), np.arange(shuffled.size)), f"{name}: not a partition"
            assert (np.add.reduceat(shuffled[grouped], offsets[:-1]) <= capacity).all(), f"{name}: overfull"
            metrics = measure_packing(shuffled, grouped, offsets, capacity)
            seconds, cpu_seconds = entry["seconds"], entry["cpu_seconds"]
            rows.append(
                {"strategy": name, "kernel_s": seconds, "kernel_cpu_s": cpu_seconds, "kernel_best_s": seconds}
                | {"total_s": seconds}
                | metrics.to_dict()
            )
        return rows


def jit_costs() -> dict[str, float]:
    """Import + first pack_lengths per strategy in fresh processes: empty cache, then warm cache."""
    code = (
        "import time; t = time.perf_counter(); from packcli.pack import pack_lengths, STRATEGIES\n"
        "[pack_lengths([3, 1, 2], 8, strategy=s) for s in STRATEGIES]; print(time.perf_counter() - t)"
    )
    root = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": root}
        seconds = [float(subprocess.check_output([sys.executable, "-c", code], env=env, text=True)) for _ in range(2)]
    return {"cold_cache_first_call_s": seconds[0], "warm_cache_first_call_s": seconds[1]}


def window_age_rows(shuffled: np.ndarray, capacity: int, ages: list[int], repeats: int) -> list[dict]:
    """The window kernel with other pack lifetimes (WINDOW_MAX_AGE is 4), for the design table."""
    from packcli.pack import kernels
    from packcli.pack.strategies import DEFAULT_WINDOW, measure_packing

    rows = []
    for age in ages:
        def run(age: int = age) -> tuple[np.ndarray, int]:
            return kernels.best_fit_windows(shuffled, capacity, DEFAULT_WINDOW, age)

        kernel_s, kernel_cpu_s, kernel_best_s = median_seconds(run, repeats)
        raw, count = run()
        _, grouped, offsets = kernels.group_by_first_position(raw, count)
        rows.append(
            {"strategy": f"window age={age}", "kernel_s": kernel_s, "kernel_cpu_s": kernel_cpu_s}
            | {"kernel_best_s": kernel_best_s, "total_s": None}
            | measure_packing(shuffled, grouped, offsets, capacity).to_dict()
        )
    return rows


def bench_config(
    distribution: str, n: int, capacity: int, repeats: int, peer_python: str | None, window_ages: list[int]
) -> list[dict]:
    from packcli.pack import STRATEGIES, pack_lengths
    from packcli.pack.strategies import _ASSIGNERS, DEFAULT_WINDOW

    lengths = draw_lengths(distribution, n, capacity)
    shuffled = lengths[np.random.Generator(np.random.PCG64(0)).permutation(n)]
    rows = []
    for strategy in STRATEGIES:
        window = DEFAULT_WINDOW if strategy == "window" else 0
        plan = pack_lengths(lengths, capacity, strategy=strategy, shuffle_packs=False)
        kernel_s, kernel_cpu_s, kernel_best_s = median_seconds(
            lambda: _ASSIGNERS[strategy](shuffled, capacity, window), repeats
        )
        total_s, _, _ = median_seconds(
            lambda: pack_lengths(lengths, capacity, strategy=strategy, shuffle_packs=False), max(1, repeats // 2)
        )
        rows.append(
            {"strategy": strategy, "kernel_s": kernel_s, "kernel_cpu_s": kernel_cpu_s, "kernel_best_s": kernel_best_s}
            | {"total_s": total_s}
            | plan.metrics.to_dict()
        )
    rows += window_age_rows(shuffled, capacity, window_ages, repeats)
    if peer_python is not None:
        rows += run_peers(peer_python, shuffled, capacity)
    return [{"distribution": distribution, "n": n, "capacity": capacity, **row} for row in rows]


def format_table(rows: list[dict]) -> str:
    head = (
        f"{'dist':9} {'n':>8} {'C':>5} {'strategy':18} {'kernel ms':>10} {'(cpu)':>7} {'(best)':>7} {'total ms':>9} {'packs':>8} "
        f"{'density':>8} {'gap %':>7} {'disp mean':>10} {'p99':>8} {'max':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        key = f"{r['distribution']:9} {r['n']:>8} {r['capacity']:>5} {r['strategy']:18}"
        if "error" in r:
            lines.append(f"{key} {r['error']}")
            continue
        total = "-" if r["total_s"] is None else f"{r['total_s'] * 1e3:.1f}"
        lines.append(
            f"{key} {r['kernel_s'] * 1e3:>10.1f} {r['kernel_cpu_s'] * 1e3:>7.1f} {r['kernel_best_s'] * 1e3:>7.1f} {total:>9} {r['num_packs']:>8} {r['density']:>8.5f} "
            f"{r['gap_to_bound'] * 100:>7.3f} {r['displacement_mean']:>10.1f} {r['displacement_p99']:>8.0f} {r['displacement_max']:>8}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run: n=20000, C=4096, lognormal")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per kernel (median)")
    parser.add_argument("--peer-python", help="interpreter of a venv with trl==1.16.0 and/or axolotl")
    parser.add_argument("--distributions", nargs="+", choices=list(DISTRIBUTIONS), default=list(DISTRIBUTIONS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="values of n")
    parser.add_argument("--capacities", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument(
        "--peer-n", type=int, nargs="+", default=[100_000],
        help="n at which peers run (lognormal, C=4096); trl takes ~1 min per packer at 1M",
    )
    parser.add_argument(
        "--window-ages", type=int, nargs="*", default=[],
        help="also run the window kernel with these pack lifetimes, in windows (design table)",
    )
    parser.add_argument("--peer-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_worker:
        peer_worker(*args.peer_worker)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    started = time.perf_counter()
    load_before = os.getloadavg()
    jit = jit_costs()
    if args.quick:
        configs = [("lognormal", 20_000, 4096, True)]
    else:
        configs = [
            (distribution, n, capacity, distribution == "lognormal" and capacity == 4096 and n in args.peer_n)
            for n in args.sizes
            for distribution in args.distributions
            for capacity in args.capacities
        ]
    rows = []
    for distribution, n, capacity, with_peers in configs:
        peer_python = args.peer_python if with_peers else None
        rows += bench_config(distribution, n, capacity, args.repeats, peer_python, args.window_ages)
        print(f"done {distribution} n={n} C={capacity} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    import numba

    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
        },
        "distributions": DISTRIBUTIONS,
        "jit": jit,
        "wall_s": time.perf_counter() - started,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, result)
    print(f"JIT: first call in a fresh process {jit['cold_cache_first_call_s']:.2f} s with an empty cache, "
          f"{jit['warm_cache_first_call_s']:.2f} s with a warm one; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print(format_table(rows))


if __name__ == "__main__":
    main()
