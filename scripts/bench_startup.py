"""What a small job costs before any work: ``packcli --help``, ``verify`` of the committed fixture artifact,
and ``pack`` of a small corpus with the default workers and with one, each a fresh process.

Each row is the median of ``--repeat`` runs (interleaved, so a slow spell falls on all of them), wall
and CPU from ``wait4`` on the process alone. For ``pack`` the stages packcli reports (``--json``) are
beside it, so the fixed cost (wall minus the stages' own wall) shows; the in-process breakdown of that
fixed cost (imports, the tokenizer load) is measured once in a child that times each step itself.

    python scripts/make_long_corpus.py --n 2000 --out bench-out/long2k.jsonl
    python scripts/bench_startup.py --corpus bench-out/long2k.jsonl --repeat 5 --out bench-out/startup.json

Prints a table last and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import load_summary, markdown_table, run_environment, run_measured, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / ".cache" / "assets"

# The fixed cost, step by step, in one fresh interpreter: what `pack` pays before its first record.
BREAKDOWN = r"""
import json, sys, time
t = time.perf_counter(); marks = {}
def mark(name):
    global t
    now = time.perf_counter(); marks[name] = now - t; t = now
import packcli.cli; mark("import packcli.cli (typer, rich)")
import packcli.job.run, packcli.engine.local; mark("import the pack job (numpy, pyarrow, jinja2)")
from packcli.tokenizer.load import load_tokenizer
tok = load_tokenizer(sys.argv[1], backend="tokenizers"); mark("load the tokenizer: tokenizers")
tok = load_tokenizer(sys.argv[1], backend="auto"); mark("load the tokenizer: auto (+ fastokens, numba)")
from packcli.chat import Renderer, load_template
from packcli.choices import LossPolicy
Renderer(load_template(sys.argv[2], tok), LossPolicy.assistant, bos_token=tok.bos_token, eos_token=tok.eos_token)
mark("load and compile the template")
from packcli.pack import pack_lengths
import numpy as np
pack_lengths(np.array([5, 3, 2], np.int64), 8, strategy="bfd"); mark("first packing call (a small one runs as Python)")
print(json.dumps(marks))
"""


def pack_row(args: argparse.Namespace, workers: int | None, out: Path) -> dict:
    cmd = [sys.executable, "-m", "packcli", "pack", str(args.corpus), "-t", args.tokenizer, "--template", args.template,
           "-o", str(out), "--force", "--json"] + ([] if workers is None else ["--workers", str(workers)])
    child = run_measured(cmd, stdout=subprocess.PIPE)
    if child.returncode:
        raise SystemExit(f"error: exit {child.returncode} from {' '.join(cmd)}")
    stages = json.loads(child.stdout)["stage_seconds"]
    busy = stages["tokenize_wall_s"] + stages["pack_s"] + stages["write_s"]
    return {"wall_s": child.wall_s, "cpu_s": child.cpu_s, "stages": stages, "stages_wall_s": busy,
            "fixed_s": child.wall_s - busy, "units": json.loads(child.stdout)["units"]}


def plain_row(cmd: list[str]) -> dict:
    child = run_measured(cmd, stdout=subprocess.DEVNULL)
    if child.returncode:
        raise SystemExit(f"error: exit {child.returncode} from {' '.join(cmd)}")
    return {"wall_s": child.wall_s, "cpu_s": child.cpu_s}


def median_row(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    return {**ordered[len(ordered) // 2], "wall_s_runs": [round(r["wall_s"], 2) for r in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="the small corpus pack runs on")
    parser.add_argument("-t", "--tokenizer", default=str(ASSETS / "qwen3"))
    parser.add_argument("--template", default=str(ASSETS / "templates" / "qwen3_training.jinja"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    commands = {
        "packcli --help": lambda: plain_row([sys.executable, "-m", "packcli", "--help"]),
        "packcli verify fixtures/packed": lambda: plain_row([sys.executable, "-m", "packcli", "verify",
                                                             str(ROOT / "fixtures" / "packed")]),
    }
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        commands[f"packcli pack {args.corpus.name} (default workers)"] = lambda: pack_row(args, None, Path(tmp) / "a")
        commands[f"packcli pack {args.corpus.name} --workers 1"] = lambda: pack_row(args, 1, Path(tmp) / "b")
        runs: dict[str, list[dict]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, run in commands.items():
                runs[name].append(run())
    rows = {name: median_row(r) for name, r in runs.items()}
    breakdown = subprocess.run([sys.executable, "-c", BREAKDOWN, args.tokenizer, args.template], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    steps = json.loads(breakdown.stdout.strip().splitlines()[-1])
    data = {"corpus": str(args.corpus), "tokenizer": args.tokenizer, "template": args.template, "rows": rows,
            "fixed_cost_steps_s": steps, "environment": {**run_environment(ROOT), "loadavg_end": os.getloadavg()}}
    if args.out:
        write_json(args.out, data)
    print(load_summary(load_start))
    print("\nfixed cost, step by step (one fresh interpreter):")
    for name, seconds in steps.items():
        print(f"  {seconds:6.2f} s  {name}")
    table = []
    for name, r in rows.items():
        stages = r.get("stages")
        detail = (f"stages {r['stages_wall_s']:.2f} s (units {stages['tokenize_wall_s']:.2f}, pack "
                  f"{stages['pack_s']:.2f}, write {stages['write_s']:.2f}); {r['units']} units" if stages else "")
        table.append((name, f"{r['wall_s']:.2f}", f"{statistics.fmean(r['wall_s_runs']):.2f}",
                      ", ".join(f"{w:.2f}" for w in r["wall_s_runs"]), f"{r['cpu_s']:.2f}",
                      f"{r['fixed_s']:.2f}" if stages else "", detail))
    print("\n" + markdown_table(("command", "wall s (median)", "mean", "all runs", "CPU s", "wall - stages s",
                                 "packcli's stages"), table, align="lrrlrrl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
