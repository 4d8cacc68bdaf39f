"""``pack`` with 1, 2, 4, ... worker processes on one corpus: the speedup curve and where it flattens.

Each row is a fresh ``packcli pack --workers N`` process (cold: imports, tokenizer loads and worker
start-up included, as a user waits for them), measured alone (``wait4``: wall and CPU of it and its
workers). The corpus is cut into units small enough that the largest worker count has several
each (``--unit-lines``), so the curve shows the machine, not the unit size. Every row must give the
same manifest hash: the artifact does not depend on the worker count, which the script checks.

Where it flattens: the first worker count whose speedup over the previous row is under
``FLAT_GAIN`` for a doubling, or whose efficiency (speedup / workers) is under one half.

The tokenizer and template default to Qwen3's with TRL's training template when
``scripts/fetch_real_assets.py`` has fetched them, else the committed fixture tokenizer with ChatML;
the corpus is written with ``scripts/make_bench_corpus.py`` (synthetic, seeded, offline) unless given.
Rows stop starting after ``--budget-s`` seconds, so the table is printed well within a time cap.

    python scripts/scaling_check.py --workers 1,2,4,8,16 --n 100000 --out bench-out/scaling.json
    scripts/scaling_check.sh                      # the same, offline, time-capped, JSON to $OUT if set

Prints a table last and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import load_summary, markdown_table, run_environment, run_measured, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / ".cache" / "assets"
FLAT_GAIN = 1.15  # a doubling of workers that buys less than 15% more speed: the curve has flattened


def default_setup() -> tuple[str, str]:
    """Qwen3 and its training template where fetched (real costs), else the fixture tokenizer and ChatML."""
    qwen, template = ASSETS / "qwen3", ASSETS / "templates" / "qwen3_training.jinja"
    if qwen.is_dir() and template.is_file():
        return str(qwen), str(template)
    return str(ROOT / "fixtures" / "tokenizer"), "chatml"


def run_row(corpus: Path, workers: int, args: argparse.Namespace, out: Path) -> dict:
    stdout = out.with_suffix(".json")
    cmd = [sys.executable, "-m", "packcli", "pack", str(corpus), "-t", args.tokenizer, "--template", args.template,
           "-c", str(args.capacity), "--unit-lines", str(args.unit_lines), "--workers", str(workers), "-o", str(out),
           "--force", "--json"]
    load = os.getloadavg()[0]
    with stdout.open("w") as handle:
        child = run_measured(cmd, stdout=handle)
    if child.returncode:
        raise SystemExit(f"error: exit {child.returncode} from: {' '.join(cmd)}")
    report = json.loads(stdout.read_text())
    shutil.rmtree(out, ignore_errors=True)  # the next row writes its own
    return {"workers": workers, "wall_s": child.wall_s, "cpu_s": child.cpu_s, "load_before": load,
            "manifest_sha256": report["manifest_sha256"], "units": report["units"],
            "tokens": report["counts"]["tokens"], "records": report["counts"]["records"],
            "stage_seconds": report["stage_seconds"], "backend": report["tokenization"]["backend"]}


def curve(rows: list[dict]) -> tuple[list[dict], int | None]:
    """Speedup and efficiency per row (against the first), and the worker count where it flattens."""
    base = rows[0]
    flat = None
    for k, row in enumerate(rows):
        row["speedup"] = base["wall_s"] / row["wall_s"] * base["workers"]
        row["efficiency"] = row["speedup"] / row["workers"]
        if k and flat is None:
            prev = rows[k - 1]
            per_doubling = (prev["wall_s"] / row["wall_s"]) ** (1 / math.log2(row["workers"] / prev["workers"]))
            if per_doubling < FLAT_GAIN or row["efficiency"] < 0.5:
                flat = row["workers"]
    return rows, flat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts, comma-separated (default %(default)s)")
    parser.add_argument("--corpus", type=Path, help="JSONL corpus (default: --n synthetic conversations, written once)")
    parser.add_argument("--n", type=int, default=100_000, help="conversations of the default corpus (%(default)s)")
    parser.add_argument("-t", "--tokenizer", help="default: Qwen3 if fetched, else the fixture tokenizer")
    parser.add_argument("--template", help="default: Qwen3's training template if fetched, else chatml")
    parser.add_argument("-c", "--capacity", type=int, default=4096)
    parser.add_argument("--unit-lines", type=int, default=1000, help="lines per unit (default %(default)s)")
    parser.add_argument("--budget-s", type=float, default=420, help="start no row after this many seconds")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench-out" / "scaling")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if not counts or min(counts) < 1 or counts != sorted(set(counts)):
        parser.error("--workers: increasing positive counts, e.g. 1,2,4,8,16")
    tok, template = default_setup()
    args.tokenizer, args.template = args.tokenizer or tok, args.template or template
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        from make_bench_corpus import ensure_bench

        corpus = ensure_bench(args.workdir / f"corpus-{args.n}.jsonl", args.n)
    start, load_start = time.monotonic(), os.getloadavg()
    rows = []
    for workers in counts:
        if rows and time.monotonic() - start > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: no row for {workers} workers", file=sys.stderr)
            break
        rows.append(run_row(corpus, workers, args, args.workdir / f"w{workers}"))
        print(f"{workers} workers: {rows[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    rows, flat = curve(rows)
    identical = len({r["manifest_sha256"] for r in rows}) == 1
    data = {"corpus": str(corpus), "tokenizer": args.tokenizer, "template": args.template, "capacity": args.capacity,
            "unit_lines": args.unit_lines, "rows": rows, "flattens_at": flat, "identical": identical,
            "environment": {**run_environment(ROOT), "usable_cpus": len(os.sched_getaffinity(0))
                            if hasattr(os, "sched_getaffinity") else os.cpu_count()}}
    if args.out:
        write_json(args.out, data)
    first = rows[0]
    print(f"\ncorpus {corpus} ({first['records']:,} conversations, {first['tokens']:,} tokens, {first['units']} units "
          f"of {args.unit_lines:,} lines), tokenizer {args.tokenizer}, template {args.template}, backend "
          f"{first['backend']}; {data['environment']['usable_cpus']} usable CPUs")
    print(load_summary(load_start))
    print(f"byte-identical across worker counts: {identical}; "
          + (f"flattens at {flat} workers" if flat else "no flattening within the counts run"))
    table = [(r["workers"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", f"{r['speedup']:.2f}x", f"{r['efficiency']:.0%}",
              f"{r['stage_seconds']['tokenize_wall_s']:.1f}", f"{r['stage_seconds']['write_s']:.1f}",
              f"{r['tokens'] / r['wall_s']:,.0f}", f"{r['load_before']:.1f}") for r in rows]
    print("\n" + markdown_table(("workers", "wall s", "CPU s", "speedup", "efficiency", "units' wall s", "write s",
                                 "tokens/s", "load before"), table, align="rrrrrrrrr"))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
