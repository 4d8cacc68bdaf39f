"""Benchmark: `packcli pack --engine local` vs `--engine ray` on the same corpus.

Each run is a fresh `packcli` process (cold: tokenizer load, numba cache hit, Ray start-up included),
so the numbers are what a user waits for. Ray's own start-up is measured separately. The two
artifacts must have the same manifest hash (the engines are byte-identical), which the script checks.

    python scripts/make_bench_corpus.py --n 200000 --out bench-out/bench200k.jsonl
    python scripts/bench_ray.py --input bench-out/bench200k.jsonl --out bench-out/ray.json

Prints a table last and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_pack(args: argparse.Namespace, engine: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "packcli", "pack", args.input, "-t", args.tokenizer, "-o", str(out), "--force",
           "-c", str(args.capacity), "--unit-lines", str(args.unit_lines), "--engine", engine, "--json",
           "--tokenizer-backend", args.tokenizer_backend]
    if args.template:
        cmd += ["--template", args.template]
    if engine == "ray":
        cmd += ["--workers", str(args.workers)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{engine} run failed:\n{proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    return {"engine": engine, "wall_s": wall, "stage_seconds": data["stage_seconds"], "units": data["units"],
            "manifest_sha256": data["manifest_sha256"], "tokens": data["counts"]["tokens"],
            "records": data["counts"]["records"], "density": data["metrics"]["density"],
            "tokenization": data["tokenization"]}


def ray_startup(workers: int) -> float:
    code = ("import os,tempfile,time; os.environ.setdefault('RAY_USAGE_STATS_ENABLED','0'); import ray; t=time.perf_counter();"
            f"ray.init(num_cpus={workers}, include_dashboard=False, log_to_driver=False, logging_level='ERROR',"
            " _temp_dir=tempfile.mkdtemp(prefix='pcb-', dir='/tmp'));"
            "ray.get(ray.remote(lambda: 1).remote()); print(time.perf_counter()-t); ray.shutdown()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True)
    parser.add_argument("--tokenizer", default=str(ROOT / "fixtures" / "tokenizer"))
    parser.add_argument("--template", default=None)
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--unit-lines", type=int, default=25_000)
    parser.add_argument("--tokenizer-backend", default="auto", choices=("auto", "tokenizers", "fastokens"))
    parser.add_argument("--out", default="bench-out/ray.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pcb-", dir="/tmp") as tmp:
        local = run_pack(args, "local", Path(tmp) / "local")
        ray = run_pack(args, "ray", Path(tmp) / "ray")
    startup = ray_startup(args.workers)
    result = {"input": args.input, "capacity": args.capacity, "workers": args.workers, "unit_lines": args.unit_lines,
              "tokenizer_backend": args.tokenizer_backend,
              "local": local, "ray": ray, "ray_startup_s": startup,
              "identical": local["manifest_sha256"] == ray["manifest_sha256"]}
    for run in (local, ray):
        stages = run["stage_seconds"]
        run["tokens_per_s"] = run["tokens"] / run["wall_s"]
        run["per_unit_s"] = stages["tokenize_wall_s"] / max(1, run["units"])
    write_json(args.out, result)

    print(f"\nlocal vs ray: {local['records']:,} records, {local['tokens']:,} tokens, {local['units']} units of "
          f"{args.unit_lines:,} lines, {args.workers} Ray workers, Ray start-up {startup:.1f} s, tokenizer backend "
          f"{local['tokenization']['backend']}")
    print(f"{'engine':<8}{'wall s':>9}{'tokenize wall s':>17}{'per unit s':>12}{'pack s':>9}{'write s':>9}"
          f"{'tok/s':>12}  manifest")
    for run in (local, ray):
        s = run["stage_seconds"]
        print(f"{run['engine']:<8}{run['wall_s']:>9.1f}{s['tokenize_wall_s']:>17.1f}{run['per_unit_s']:>12.2f}"
              f"{s['pack_s']:>9.2f}{s['write_s']:>9.2f}{run['tokens_per_s']:>12,.0f}  {run['manifest_sha256'][:12]}")
    print(f"byte-identical: {result['identical']}; ray/local wall: {ray['wall_s'] / local['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
