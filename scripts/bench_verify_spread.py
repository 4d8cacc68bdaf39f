"""What the driver of `verify` holds, in this process (the local path) or with the work on an engine's workers
(`--engine ray`: `packcli.verify.spread`).

Two measures for each artifact and engine:

- the driver's whole peak: `verify --no-reconstruct` (integrity and the layout check, drift, global, copies,
  the plan check; ``--reconstruct``: a full `verify`, with ``--workers`` local processes or Ray CPUs) in a
  fresh process (``--child``), its VmHWM and, from samples every 20 ms, the highest RSS (and RssAnon) while
  each stage ran, so the table says where the peak is reached; the columns the driver
  holds (the seam table's and the segments'), and whether the two reports are the same (sha256 of their JSON);
- what each spread stage adds to the driver above the columns it holds (tracemalloc, in this process: numpy
  arrays and Python objects; the Ray workers are other processes): the global judgement (`_suspects`), the
  recount of ``counts`` (`recount`), the whole global check, the copies check; the bytes the workers handed back
  (arrays; pickled).

Ray is started with ``--workers`` CPUs (here, and in each Ray child).

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

        def counted(item, result):  # each result as it arrives, kept by the caller or not
            self.pickled += len(pickle.dumps(result, protocol=5))
            for value in result if isinstance(result, tuple) else (result,):
                self.received += np.asarray(value).nbytes
            on_done(item, result)

        return self.engine.map(fn, common, items, counted, keep=keep)


def peak_of(fn, *args) -> int:
    """The traced peak of ``fn(*args)`` above what was traced before it."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


STAGES = ("check_integrity", "check_drift", "check_global", "check_copies", "check_reconstruction",
          "check_plan")  # suite's calls, in order


def child(directory: Path, engine_name: str, workers: int, reconstruct: bool) -> None:
    """`verify_artifact(directory)` (without reconstruction unless ``reconstruct``) in this fresh process; prints
    its driver's memory as JSON."""
    import hashlib
    import threading

    from _common import proc_status_mib

    from packcli.verify import suite

    stage = ["start"]
    highest: dict[str, float] = {}
    anon: dict[str, float] = {}  # the anonymous part (Ray's object store pages are shared memory, not in it)
    held = []

    def labelled(name, fn):
        def run(*args, **kwargs):
            stage[0] = name
            result = fn(*args, **kwargs)
            if name == "check_integrity" and result.seam is not None:
                held.append(held_bytes(result))
            return result
        return run

    for name in STAGES:
        setattr(suite, name, labelled(name, getattr(suite, name)))
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            now = proc_status_mib("self", ("VmRSS", "RssAnon"))
            highest[stage[0]] = max(highest.get(stage[0], 0.0), now.get("VmRSS", 0.0))
            anon[stage[0]] = max(anon.get(stage[0], 0.0), now.get("RssAnon", 0.0))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    engine = None
    if engine_name == "ray":
        from packcli.engine.ray import RayEngine

        engine = RayEngine(workers=workers)
    t0 = time.perf_counter()
    report = suite.verify_artifact(directory, reconstruct=reconstruct, max_violations=1000, engine=engine,
                                   workers=workers)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    status = proc_status_mib("self", ("VmHWM", "RssAnon"))
    text = json.dumps(report.to_dict(), sort_keys=True)
    print(json.dumps({"vmhwm_mib": status["VmHWM"], "rss_anon_end_mib": status.get("RssAnon"), "wall_s": wall,
                      "ok": report.ok, "report_sha256": hashlib.sha256(text.encode()).hexdigest(),
                      "held_mib": held[0] / MIB if held else None, "stage_rss_mib": highest,
                      "stage_anon_mib": anon}))


def held_bytes(artifact) -> int:
    """The bytes of the seam table's and the segments' columns."""
    import numpy as np

    rows, segs = artifact.seam, artifact.packs.columns
    held = sum(np.asarray(getattr(column, "values", getattr(column, "codes", None))).nbytes for column in rows.values())
    return held + sum(np.asarray(getattr(segs, name)).nbytes for name in segs.__dataclass_fields__)


def driver_peak(directory: Path, engine_name: str, workers: int, part_rows: int | None, reconstruct: bool) -> dict:
    """`child` in a fresh process (no Ray running in it before)."""
    import subprocess

    parts = (["--part-rows", str(part_rows)] if part_rows else []) + (["--reconstruct"] if reconstruct else [])
    out = subprocess.run([sys.executable, __file__, "--child", engine_name, "--workers", str(workers), *parts,
                          str(directory)],
                         check=True, capture_output=True, text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(directory: Path, workers: int) -> list[dict]:
    """The spread stages' tracemalloc peaks above the held columns, local and on Ray (already started)."""
    from packcli.artifact.manifest import Manifest
    from packcli.engine.ray import RayEngine
    from packcli.job.units import occurrences
    from packcli.verify import bookkeeping
    from packcli.verify.bookkeeping import check_global, recount
    from packcli.verify.copies import check_copies
    from packcli.verify.integrity import check_integrity
    from packcli.verify.report import VerifyReport

    manifest = Manifest.of(json.loads((directory / "manifest.json").read_text()))
    report = VerifyReport(str(directory))
    artifact = check_integrity(directory, manifest, report.check("integrity"), report.check("pack_layout"))
    rows = artifact.seam
    held = held_bytes(artifact)
    inputs = manifest.inputs
    occurrence = occurrences([entry.sha256 for entry in inputs])
    totals = artifact.packs.totals.values()
    out = []
    for name in ("local", "ray"):
        engine = None if name == "local" else Counting(RayEngine(workers=workers))
        judge = peak_of(bookkeeping._suspects, engine, artifact, rows, inputs, occurrence)
        counting = peak_of(recount, totals, rows, len(inputs), engine)
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
                    "peak_above_mib": peak / MIB, "judgement_peak_mib": judge / MIB, "recount_peak_mib": counting / MIB,
                    "copies_peak_mib": copies / MIB, "peak_bytes_per_example": peak / max(1, rows.rows),
                    "wall_s": wall, "received_bytes": engine.received if engine else None,
                    "received_pickled_bytes": engine.pickled if engine else None,
                    "violations": result.count, "report": json.dumps(result.__dict__, default=str, sort_keys=True)})
    out[1]["same_report"] = out[0].pop("report") == out[1].pop("report")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--workers", type=int, default=2, help="Ray CPUs (a local Ray started here)")
    parser.add_argument("--part-rows", type=int, default=None, help="rows a partition (default: PART_ROWS)")
    parser.add_argument("--child", choices=("local", "ray"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-stages", action="store_true", help="only the driver's whole peak (no tracemalloc runs)")
    parser.add_argument("--reconstruct", action="store_true",
                        help="the driver's whole peak with reconstruction (the sources where the artifact pins them)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out" / "verify-spread.json")
    args = parser.parse_args()
    from packcli.verify import bookkeeping

    if args.part_rows:
        bookkeeping.PART_ROWS = args.part_rows
    if args.child:
        return child(args.artifacts[0], args.child, args.workers, args.reconstruct)
    import ray

    env = run_environment(ROOT)
    drivers = [{"artifact": str(d), "engine": name,
                **driver_peak(d, name, args.workers, args.part_rows, args.reconstruct)}
               for d in args.artifacts for name in ("local", "ray")]
    print(f"{'artifact':>22} {'engine':>6} {'VmHWM MiB':>10} {'held MiB':>9} {'wall s':>7} same  "
          "highest RSS/RssAnon a stage (MiB)")
    for local, remote in zip(drivers[::2], drivers[1::2]):
        local["same_report"] = remote["same_report"] = local["report_sha256"] == remote["report_sha256"]
    for row in drivers:
        stages = ", ".join(f"{k.removeprefix('check_')} {v:.0f}/{row['stage_anon_mib'].get(k, 0):.0f}"
                           for k, v in row["stage_rss_mib"].items())
        print(f"{row['artifact']:>22} {row['engine']:>6} {row['vmhwm_mib']:>10.0f} {row['held_mib'] or 0:>9.1f} "
              f"{row['wall_s']:>7.1f} {row['same_report']!s:>5} {stages}")
    rows = []
    if not args.no_stages:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 _temp_dir=tempfile.mkdtemp(prefix="pc-bench-", dir="/tmp"))
        try:
            rows = [row for directory in args.artifacts for row in measure(directory, args.workers)]
        finally:
            ray.shutdown()
        print(f"{'examples':>10} {'engine':>6} {'held MiB':>9} {'judging MiB':>12} {'recount MiB':>12} "
              f"{'check MiB':>10} {'B/example':>10} {'copies MiB':>11} {'wall s':>7} {'received B':>11} "
              f"{'pickled B':>10} same")
        for row in rows:
            print(f"{row['examples']:>10,} {row['engine']:>6} {row['held_mib']:>9.1f} "
                  f"{row['judgement_peak_mib']:>12.1f} {row['recount_peak_mib']:>12.1f} {row['peak_above_mib']:>10.1f} "
                  f"{row['peak_bytes_per_example']:>10.1f} {row['copies_peak_mib']:>11.1f} {row['wall_s']:>7.1f} "
                  f"{row['received_bytes']!s:>11} {row['received_pickled_bytes']!s:>10} {row.get('same_report', '')}")
    print(f"load: {load_summary(env['loadavg_start'])}")
    write_json(args.out, {"environment": env, "part_rows": bookkeeping.PART_ROWS, "drivers": drivers, "rows": rows})


if __name__ == "__main__":
    main()
