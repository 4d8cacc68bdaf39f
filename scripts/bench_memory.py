"""Peak memory and wall of `pack`, `verify` and `stats OUT` as the corpus grows, and what that projects to.

For each size: short synthetic conversations (`make_bench_corpus.py --short`; the smaller sizes are
the first lines of the largest), packed with the fixture tokenizer, ChatML, capacity 4,096, default
backend and workers; then `verify` (default: with reconstruction; ``--no-reconstruct`` measures the
bookkeeping alone), `verify --no-reconstruct` (the driver's own checks, the part that does not spread
over workers), `stats OUT`, and `packcli.data.PackDataset` iterating every pack. Each command runs in a fresh process sampled every 0.2 s from
/proc/PID/status: VmHWM is the exact peak; the sample of the highest VmRSS says when it was reached; the
highest RssAnon sample is the anonymous part (VmHWM also counts the pages of mapped files, such as
`pack`'s file-backed columns, `packcli.job.scratch`, which the kernel writes back and drops under pressure).

Per-example bytes are the slope of the peak between the two largest sizes (0 where it did not grow),
the fixed base the intercept: measure sizes past the point where a fixed part (one shard read or
written at a time) stops being the peak, or the slope says too little. The projection to 100M and
1B conversations extends that line. Wall on N
nodes: the measured time per conversation of the largest size, its spreadable part (pack: reading,
rendering, tokenizing; verify: reconstruction) divided by N, the driver's part (pack: planning and
writing; verify: the checks ``--no-reconstruct`` runs) not.

    python scripts/bench_memory.py --sizes 250000,1000000,4000000 --out bench-out/memory.json
    python scripts/bench_memory.py --sizes 100000,250000,1000000 --out bench-out/memory.json   # what fits a small box
    python scripts/bench_memory.py --sizes 250000,1000000,4000000 --pack-only --out bench-out/memory-pack.json
    python scripts/bench_memory.py --sizes 250000,1000000,4000000 --verify-only --no-reconstruct   # on those artifacts
    python scripts/bench_memory.py --loader-only bench-out/packs-100k bench-out/packs-1m   # the loader alone
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
from _common import load_summary, proc_status_mib, run_environment, write_json

ROOT = Path(__file__).resolve().parents[1]
PROJECT = (100_000_000, 1_000_000_000)
NODES = (1, 16, 64)


def watch(cmd: list[str]) -> dict:
    """Run ``cmd`` and sample its memory; its peak (VmHWM), when the highest sample came, the highest sample
    of its anonymous memory (RssAnon: what the kernel cannot drop; VmHWM also counts mapped files' pages,
    e.g. `pack`'s file-backed columns, which it can), wall, stdout."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # pipes could fill
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=ROOT)
        hwm, top, top_at, anon = 0.0, 0.0, 0.0, 0.0
        while proc.poll() is None:
            try:
                values = proc_status_mib(proc.pid, ("VmRSS", "VmHWM", "RssAnon"))
            except FileNotFoundError:
                break
            if values:
                hwm = max(hwm, values.get("VmHWM", 0.0))
                anon = max(anon, values.get("RssAnon", 0.0))
                if values.get("VmRSS", 0.0) > top:
                    top, top_at = values["VmRSS"], time.time() - t0
            time.sleep(0.2)
        proc.wait()
        wall = time.time() - t0
        stdout, stderr = (f.seek(0) or f.read() for f in (out, err))
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {stderr[-2000:]}")
    return {"cmd": cmd, "wall_s": round(wall, 1), "peak_mib": round(max(hwm, top), 1),
            "peak_at": round(top_at / wall, 2) if wall else 0.0, "anon_peak_mib": round(anon, 1), "stdout": stdout}


def corpus(n: int, largest: int, folder: Path) -> Path:
    """The first ``n`` conversations of the largest corpus (written once)."""
    big = folder / f"short-{largest}.jsonl"
    if not big.exists():
        subprocess.run([sys.executable, "scripts/make_bench_corpus.py", "--n", str(largest), "--short", "--out",
                        str(big)], check=True, cwd=ROOT)
    if n == largest:
        return big
    path = folder / f"short-{n}.jsonl"
    if not path.exists():
        with big.open("rb") as src, path.open("wb") as dst:
            for _, line in zip(range(n), src):
                dst.write(line)
    return path


def measure(n: int, largest: int, folder: Path, reconstruct: bool, pack_only: bool = False,
            verify_only: bool = False) -> dict:
    art = folder / f"mem-art-{n}"
    py = [sys.executable, "-m", "packcli"]
    row: dict = {"conversations": n}
    if verify_only:  # the artifact an earlier run of this script packed
        if not (art / "manifest.json").is_file():
            raise SystemExit(f"{art}: no artifact to verify (run with --pack-only first)")
    else:
        source = corpus(n, largest, folder)
        pack = watch([*py, "pack", str(source), "-t", "fixtures/tokenizer", "--template", "chatml", "-c", "4096",
                      "-o", str(art), "--force", "--json"])
        stages = json.loads(pack.pop("stdout")).get("stage_seconds", {})
        pack["driver_s"] = round(stages.get("pack_s", 0.0) + stages.get("write_s", 0.0), 1)
        row["pack"] = pack
    manifest = json.loads((art / "manifest.json").read_text())
    row.update(examples=manifest["counts"]["records"], manifest_sha256=manifest["manifest_sha256"])
    if pack_only:
        return row
    bookkeeping = watch([*py, "verify", str(art), "--no-reconstruct", "--json"])
    bookkeeping.pop("stdout")
    row["verify_bookkeeping"] = bookkeeping
    if reconstruct:
        full = watch([*py, "verify", str(art), "--json"])
        full.pop("stdout")
        full["driver_s"] = bookkeeping["wall_s"]
        row["verify"] = full
    stats = watch([*py, "stats", str(art), "--json"])
    stats.pop("stdout")
    row["stats"] = stats
    row["loader"] = iterate(art)
    return row


LOADER = ("import sys; from packcli.data import PackDataset; "
          "print(sum(PackDataset(sys.argv[1], collate=len, batch_packs=8)))")


def iterate(artifact: Path) -> dict:
    """`PackDataset` over ``artifact``, every pack once (a collate that keeps nothing): the loader's memory."""
    run = watch([sys.executable, "-c", LOADER, str(artifact)])
    run["packs"] = int(run.pop("stdout").strip())
    return run


def slopes(rows: list[dict], key: str, peak: str = "peak_mib") -> tuple[float, float] | None:
    """(bytes an example, base MiB) of ``peak`` between the two largest sizes."""
    if len(rows) < 2 or key not in rows[-1] or key not in rows[-2]:
        return None
    a, b = rows[-2], rows[-1]
    per = (b[key][peak] - a[key][peak]) * 2**20 / (b["conversations"] - a["conversations"])
    per = max(per, 0.0)  # a peak that did not grow (sampling noise can make it shrink) is flat, not negative
    return per, b[key][peak] - per * b["conversations"] / 2**20


def loader_only(artifacts: list[str]) -> int:
    """``--loader-only``: the loader over artifacts of any size (e.g. one pack a record, for a million packs)."""
    print("| artifact | packs | wall s | peak RSS MiB |\n|---|---:|---:|---:|")
    for artifact in artifacts:
        run = iterate(Path(artifact).resolve())
        print(f"| {artifact} | {run['packs']:,} | {run['wall_s']} | {run['peak_mib']:,.0f} |")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--loader-only"]:
        return loader_only(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="250000,1000000,4000000")
    parser.add_argument("--out", default="bench-out/memory.json")
    parser.add_argument("--folder", default="bench-out")
    parser.add_argument("--no-reconstruct", action="store_true", help="verify's bookkeeping alone (faster)")
    parser.add_argument("--pack-only", action="store_true", help="`pack` alone (no verify, stats or loader)")
    parser.add_argument("--verify-only", action="store_true",
                        help="verify, stats and the loader on the artifacts a --pack-only run left in --folder")
    args = parser.parse_args()
    if args.pack_only and args.verify_only:
        parser.error("--pack-only and --verify-only exclude each other")
    environment = run_environment(ROOT)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    folder = ROOT / args.folder
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        rows.append(measure(n, sizes[-1], folder, not args.no_reconstruct, args.pack_only, args.verify_only))
        print(json.dumps({k: (v if not isinstance(v, dict) else {x: v[x] for x in ("wall_s", "peak_mib", "peak_at",
                                                                                   "anon_peak_mib")})
                          for k, v in rows[-1].items()}), flush=True)
    commands = [k for k in ("pack", "verify", "verify_bookkeeping", "stats", "loader") if k in rows[-1]]
    projection = {}
    for key in commands:
        fit = slopes(rows, key)
        if fit is None:
            continue
        per, base = fit
        last = rows[-1]
        per_s = last[key]["wall_s"] / last["conversations"]
        driver_s = last[key].get("driver_s", last[key]["wall_s"]) / last["conversations"]
        anon = slopes(rows, key, "anon_peak_mib")
        projection[key] = {"bytes_per_example": round(per, 1), "base_mib": round(base, 1),
                           "anon_bytes_per_example": None if anon is None else round(anon[0], 1),
                           **{f"{n // 1_000_000}M": {"peak_gib": round((base * 2**20 + per * n) / 2**30, 1),
                                                     **{f"wall_h_{k}_nodes": round(n * ((per_s - driver_s) / k + driver_s)
                                                                                   / 3600, 1) for k in NODES}}
                              for n in PROJECT}}
    write_json(args.out, {"environment": environment, "rows": rows, "projection": projection,
                          "load": load_summary(environment["loadavg_start"])})
    print(load_summary(environment["loadavg_start"]))
    print("\n| conversations | command | wall s | peak RSS MiB | peak reached at (share of wall) | anonymous peak MiB |")
    print("|---:|---|---:|---:|---:|---:|")
    for row in rows:
        for key in commands:
            m = row[key]
            print(f"| {row['conversations']:,} | {key} | {m['wall_s']} | {m['peak_mib']:,.0f} | {m['peak_at']:.0%} | "
                  f"{m['anon_peak_mib']:,.0f} |")
    print("\n| command | bytes an example | anonymous bytes an example | base MiB | 100M: peak GiB | "
          "wall h 1 / 16 / 64 nodes | 1B: peak GiB | wall h 1 / 16 / 64 nodes |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for key, p in projection.items():
        cells = [f"{p[m]['peak_gib']} | {' / '.join(str(p[m][f'wall_h_{k}_nodes']) for k in NODES)}"
                 for m in ("100M", "1000M")]
        print(f"| {key} | {p['bytes_per_example']:,.0f} | {p['anon_bytes_per_example']:,.0f} | {p['base_mib']:,.0f} | "
              f"{' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
