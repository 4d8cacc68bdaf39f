"""What verify's plan check (`packcli.verify.replan.check_plan`) adds to the process running it, with its
per-example columns in memory and file-backed (a `packcli.job.scratch.Scratch` over a folder), on artifacts.

Each artifact and mode runs in a fresh process (``--child``): it reads the manifest and the seam table (the
columns the check receives; not counted), loads every module and compiled kernel the check uses by running it on
its first 20,000 rows, in the same mode (a fixed cost, numba's most of it; not counted), then
runs the check (``--no-reconstruct``'s inputs: no reconstructed facts), sampling /proc/self/status every 20 ms:

- ``anon``: the highest RssAnon over the one before the check (what the kernel cannot drop);
- ``rss``: the same for VmRSS, which also counts the mapped columns' pages while they are resident (page cache
  the kernel can write back and drop; `Scratch.release` hands them back between stages);
- ``traced`` (a third process, ``--trace``): tracemalloc's peak during the check (numpy's arrays and Python
  objects; not the pages of a mapped file). Exact, but it slows the Python loops, so its wall is not reported.

The two modes must give the same report (sha256 of its JSON). The bytes a row are the added peak over the seam
table's rows.

    python scripts/bench_plan_check.py bench-out/art-250k bench-out/art-1m --out bench-out/plan-check.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import load_summary, markdown_table, proc_status_mib, run_environment, write_json

ROOT = Path(__file__).resolve().parents[1]
MODES = ("memory", "file-backed")


def child(artifact: Path, mode: str, trace: bool, folder: Path) -> dict:
    """One plan check on ``artifact`` in this process: what it added, its wall, its report's hash."""
    import tracemalloc
    from dataclasses import asdict

    import numpy as np

    from packcli.artifact import manifest as mf
    from packcli.contract import SEAM_TABLE_NAME
    from packcli.job.scratch import Scratch
    from packcli.verify.columns import read_seam_columns
    from packcli.verify.replan import check_plan
    from packcli.verify.report import CheckResult

    manifest = mf.Manifest.of(mf.read_manifest(artifact))
    rows, _ = read_seam_columns(artifact / SEAM_TABLE_NAME)
    with tempfile.TemporaryDirectory(dir=folder) as scratch_dir:
        scratch = Scratch(Path(scratch_dir) if mode == "file-backed" else None)
        # every module and compiled kernel the check uses loaded first (a fixed cost: some 28 MiB of numba's Python
        # objects come with the first table longer than a packing window): the check run once on the table's first
        # 20,000 rows, in the same mode
        check_plan(manifest, rows.take(np.arange(min(rows.rows, 20_000))), None, CheckResult("plan"), scratch)
        keys = ("RssAnon", "VmRSS")
        before = proc_status_mib("self", keys)
        peak, done = dict(before), threading.Event()

        def sample() -> None:
            while not done.is_set():
                for key, value in proc_status_mib("self", keys).items():
                    peak[key] = max(peak[key], value)
                time.sleep(0.02)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        result = CheckResult("plan")
        if trace:
            tracemalloc.start()
        start = time.perf_counter()
        check_plan(manifest, rows, None, result, scratch)
        wall = time.perf_counter() - start
        traced = tracemalloc.get_traced_memory()[1] if trace else None
        done.set()
        watcher.join()
        files = sum(f.stat().st_size for f in Path(scratch_dir).iterdir())
    report = json.dumps(asdict(result), sort_keys=True, default=str).encode()
    return {"artifact": str(artifact), "rows": rows.rows, "mode": mode, "trace": trace, "wall_s": wall,
            "anon_mib": peak["RssAnon"] - before["RssAnon"], "rss_mib": peak["VmRSS"] - before["VmRSS"],
            "traced_mib": None if traced is None else traced / (1 << 20), "files_mib": files / (1 << 20),
            "violations": result.count, "report_sha256": hashlib.sha256(report).hexdigest()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="*", type=Path, help="packed artifacts (``pack --out``)")
    parser.add_argument("--out", type=Path, help="write every measure here (JSON)")
    parser.add_argument("--scratch-dir", type=Path, default=ROOT / "bench-out",
                        help="where the file-backed columns' folder is made (a disk, not a tmpfs)")
    parser.add_argument("--child", nargs=2, metavar=("ARTIFACT", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.scratch_dir.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.trace, args.scratch_dir)))
        return 0
    if not args.artifacts:
        parser.error("name at least one artifact")
    facts = run_environment(ROOT)
    runs = []
    for artifact in args.artifacts:
        for mode in MODES:
            measured = {}
            for trace in (False, True):
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(artifact), mode, "--scratch-dir", str(args.scratch_dir)]
                done = subprocess.run(cmd + (["--trace"] if trace else []), capture_output=True, text=True, cwd=ROOT)
                if done.returncode:
                    raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
                measured[trace] = json.loads(done.stdout.splitlines()[-1])
            run = {**measured[False], "traced_mib": measured[True]["traced_mib"]}
            if measured[True]["report_sha256"] != run["report_sha256"]:
                raise SystemExit(f"{artifact} ({mode}): the traced run's report differs")
            runs.append(run)
        pair = [r for r in runs if r["artifact"] == str(artifact)]
        if len({r["report_sha256"] for r in pair}) != 1:
            raise SystemExit(f"{artifact}: the report in memory and file-backed differ")
    if args.out:
        write_json(args.out, {**facts, "runs": runs, "loadavg_end": os.getloadavg()})
    print(load_summary(facts["loadavg_start"]))

    def per_row(mib: float, rows: int) -> str:
        return f"{mib * (1 << 20) / rows:,.0f}" if rows else ""

    print(markdown_table(
        ["artifact", "rows", "columns", "wall s", "RssAnon added MiB", "B/row", "VmRSS added MiB", "tracemalloc MiB",
         "B/row", "files MiB", "violations", "report"],
        [[Path(r["artifact"]).name, f"{r['rows']:,}", r["mode"], f"{r['wall_s']:.1f}", f"{r['anon_mib']:.1f}",
          per_row(r["anon_mib"], r["rows"]), f"{r['rss_mib']:.1f}", f"{r['traced_mib']:.1f}",
          per_row(r["traced_mib"], r["rows"]), f"{r['files_mib']:.0f}", r["violations"], r["report_sha256"][:12]]
         for r in runs], align="lrlrrrrrrrrl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
