"""What the driver of `verify` holds while the global bookkeeping is judged: in this process (the local path)
or on an engine's workers (`--engine ray`: `packcli.verify.bookkeeping._spread_suspects`).

For each artifact: integrity reads it once (the seam table's and the segments' columns, which the driver
holds either way: reconstruction and the plan check read them); then `check_global` runs once per engine, with
tracemalloc on (numpy's arrays are traced; the Ray workers are other processes), and the table gives the
driver's peak above what it held before, while the rows and segments are judged (`_suspects`, or
`_spread_suspects` on Ray) and over the whole check (its recount of ``counts`` included), the check's
peak per example, the copies check's peak (spread on Ray too), the global check's wall, the bytes the
workers handed back, and whether the two reports are the same. Ray is started here with ``--workers`` CPUs.

    python scripts/bench_verify_spread.py bench-out/art-250k bench-out/art-1m --out bench-out/spread.json
    python scripts/bench_verify_spread.py bench-out/art-1m --part-rows 65536 --out bench-out/spread-64k.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import load_summary, run_environment, write_json

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


class Counting:
    """An engine that counts what its workers hand back to the driver: ``received``, the bytes of the arrays in
    the results; ``pickled``, the bytes of the results as they cross from a Ray worker (pickled)."""

    def __init__(self, engine) -> None:
        self.engine, self.received, self.pickled = engine, 0, 0
        self.name, self.shares_paths = engine.name, engine.shares_paths

    def session(self, warm=None, work=None):
        return self.engine.session(warm, work)

    def map(self, fn, common, items, on_done=lambda item, result: None, *, keep=True):
        import pickle

        import numpy as np

        results = self.engine.map(fn, common, items, on_done, keep=keep)
        for result in results:
            self.pickled += len(pickle.dumps(result, protocol=5))
            for value in result if isinstance(result, tuple) else (result,):
                self.received += np.asarray(value).nbytes
        return results


def peak_of(fn, *args) -> int:
    """The traced peak of ``fn(*args)`` above what was traced before it."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def measure(directory: Path, workers: int) -> list[dict]:
    import numpy as np

    from packcli.engine.ray import RayEngine
    from packcli.job.units import occurrences
    from packcli.verify import bookkeeping
    from packcli.verify.bookkeeping import check_global
    from packcli.verify.copies import check_copies
    from packcli.verify.integrity import check_integrity
    from packcli.verify.report import VerifyReport

    manifest = json.loads((directory / "manifest.json").read_text())
    report = VerifyReport(str(directory))
    artifact = check_integrity(directory, manifest, report.check("integrity"), on_shard=lambda shard: None)
    rows, segs = artifact.seam, artifact.packs.columns
    held = sum(np.asarray(getattr(column, "values", getattr(column, "codes", None))).nbytes for column in rows.values())
    held += sum(np.asarray(getattr(segs, name)).nbytes for name in segs.__dataclass_fields__)
    inputs = manifest["inputs"]
    occurrence = occurrences([entry["sha256"] for entry in inputs])
    out = []
    for name in ("local", "ray"):
        engine = None if name == "local" else Counting(RayEngine(workers=workers))
        judge = peak_of(bookkeeping._suspects, artifact, rows, inputs, occurrence) if engine is None else \
            peak_of(bookkeeping._spread_suspects, engine, artifact, rows, inputs, occurrence)
        copies = peak_of(check_copies, rows, manifest, VerifyReport(str(directory)).check("copies"), engine)
        engine = engine and Counting(engine.engine)
        result = VerifyReport(str(directory)).check("global", 1000)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        check_global(artifact, rows, manifest, result, engine=engine)
        wall = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        out.append({"artifact": str(directory), "examples": rows.rows, "engine": name, "held_mib": held / MIB,
                    "peak_above_mib": peak / MIB, "judgement_peak_mib": judge / MIB,
                    "copies_peak_mib": copies / MIB, "peak_bytes_per_example": peak / max(1, rows.rows),
                    "wall_s": wall, "received_bytes": engine.received if engine else None,
                    "violations": result.count, "report": json.dumps(result.__dict__, default=str, sort_keys=True)})
    out[1]["same_report"] = out[0].pop("report") == out[1].pop("report")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--workers", type=int, default=2, help="Ray CPUs (a local Ray started here)")
    parser.add_argument("--part-rows", type=int, default=None, help="rows a partition (default: PART_ROWS)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "verify-spread.json")
    args = parser.parse_args()
    import ray

    from packcli.verify import bookkeeping

    if args.part_rows:
        bookkeeping.PART_ROWS = args.part_rows
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env = run_environment(ROOT)
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             _temp_dir=tempfile.mkdtemp(prefix="pc-bench-", dir="/tmp"))
    try:
        rows = [row for directory in args.artifacts for row in measure(directory, args.workers)]
    finally:
        ray.shutdown()
    print(f"load: {load_summary(env['loadavg_start'])}")
    print(f"{'examples':>10} {'engine':>6} {'held MiB':>9} {'judging MiB':>12} {'check MiB':>10} {'B/example':>10} "
          f"{'copies MiB':>11} "
          f"{'wall s':>7} {'received B':>11} same")
    for row in rows:
        print(f"{row['examples']:>10,} {row['engine']:>6} {row['held_mib']:>9.1f} {row['judgement_peak_mib']:>12.1f} "
              f"{row['peak_above_mib']:>10.1f} {row['peak_bytes_per_example']:>10.1f} {row['copies_peak_mib']:>11.1f} "
              f"{row['wall_s']:>7.1f} {row['received_bytes']!s:>11} "
              f"{row.get('same_report', '')}")
    write_json(args.out, {"environment": env, "part_rows": bookkeeping.PART_ROWS, "rows": rows})


if __name__ == "__main__":
    main()
