"""Benchmark the tokenization stage with each tokenizer backend, and prove the outputs identical.

For each setup (tokenizer + template) and backend (``tokenizers``, the reference;
``fastokens``, with the always-on guard), cold worker processes (their own interpreters, nothing cached)
load the tokenizer (timed apart), read and render every record (untimed; the collector is then told
to leave those objects alone, as `pack`, which holds one unit at a time, never walks 100k of them),
then run `packcli.tokenizer.guard.encode_batch` over batches of ``--batch`` records, as
`packcli.prepare.Preparer` does. Off the clock each worker hashes every batch's ids and labels and
lets the batch go (holding every batch instead would fault in fresh memory all the way, 0.3-0.4 s of
the fast backend's 100k Llama 3.2 conversations, which `pack`, freeing each unit, does not); the
parent requires the hashes of the two backends to be equal, so each row is also an exactness check
over the whole corpus.

Both backends get the same cores (``--threads``: affinity, RAYON_NUM_THREADS for tokenizers,
FASTOKENS_BPE_THREADS for fastokens). ``--procs 1`` (the default): one worker with ``--threads``
tokenizer threads. ``--procs N``: N workers share the batches (every N-th) and the cores, each with
``--threads // N`` tokenizer threads, as `pack --workers N` runs them; they start together once all
have rendered, and the stage's time runs to the last one's end, less its hashing (``hash_s``; the
other workers may have had its core meanwhile, so the bias is at most that, per worker). The machine
may be shared, so every row records CPU seconds (all threads and workers) and the load average around
the run as well as wall time. ``--repeat N`` runs each backend N times, alternating between backends
so that a slow spell of the machine falls on both, and reports the run of median wall time (every
run's times are in the JSON, ``runs``); the outputs of all N runs must hash the same.

Usage:
    python scripts/make_bench_corpus.py --n 100000 --source chatterbot --out bench-out/chatterbot-100k.jsonl
    python scripts/bench_tokenizers.py --corpus bench-out/chatterbot-100k.jsonl \\
        --setup qwen3 --setup llama3_2 --out bench-out/tokenizers.json
    python scripts/bench_tokenizers.py --corpus ... --setup qwen3 --procs 2   # two workers, as pack runs
    python scripts/bench_tokenizers.py --corpus ... --repeat 3   # median of 3 cold runs of each backend
    python scripts/bench_tokenizers.py --quick      # fixture tokenizer, 2,000 records, seconds
    python scripts/bench_tokenizers.py --show bench-out/tokenizers.json   # the table again
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import Timer, cpu_seconds, markdown_table, peak_rss_mib, write_json  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS = REPO_ROOT / ".cache" / "assets"
SETUPS = {  # name -> (tokenizer, template)
    "qwen3": (ASSETS / "qwen3", ASSETS / "templates" / "qwen3_training.jinja"),
    "llama3_2": (ASSETS / "llama3_2", ASSETS / "templates" / "llama3_training.jinja"),
    "fixture": (REPO_ROOT / "fixtures" / "tokenizer", "chatml"),
}
BACKENDS = ("tokenizers", "fastokens")
BATCH = 4096  # packcli.config.PackConfig.batch_records default
QUICK_N = 2000


def worker(args: argparse.Namespace) -> dict:
    """One cold run: load, render, tokenize this worker's batches (every ``--parts``-th from ``--part``);
    returns the measurements (printed as JSON by main)."""
    import numpy as np

    from packcli.chat import LossPolicy, Renderer, RenderError, load_template
    from packcli.contract import IGNORE_INDEX
    from packcli.ingest import Record, parse_record, read_lines
    from packcli.tokenizer.guard import encode_batch
    from packcli.tokenizer.load import load_tokenizer

    tokenizer_path, template = SETUPS[args.setup]
    with Timer() as timed:
        tok = load_tokenizer(tokenizer_path, backend=args.backend)
    load_s, load_cpu_s = timed.span.wall_s, timed.span.cpu_s

    t0 = time.perf_counter()
    tpl = load_template(str(template), tok)
    renderer = Renderer(tpl, LossPolicy.auto, bos_token=tok.bos_token, eos_token=tok.eos_token)
    rendered = []
    for line, raw in read_lines(args.corpus, 0):
        if line > args.n:
            break
        record = parse_record(raw, file_index=0, line=line)
        if isinstance(record, Record):
            try:
                rendered.append(renderer.render(record))
            except RenderError:
                pass
    render_s = time.perf_counter() - t0
    # `pack` holds one unit of records at a time, this holds the corpus: without the freeze the
    # collector walks all of it again and again while the batches are tokenized (10-15% of the fast
    # backend's time on 100k conversations), which `pack` never pays.
    gc.freeze()
    if args.go:  # one of several workers: start together
        Path(f"{args.go}.ready{args.part}").touch()
        while not os.path.exists(args.go):
            time.sleep(0.002)

    digests, tokens, supervised, hash_s = {}, 0, 0, 0.0
    load0, wall, cpu, start = os.getloadavg()[0], 0.0, 0.0, time.time()
    for k in range(args.part * args.batch, len(rendered), args.batch * args.parts):
        batch = rendered[k:k + args.batch]
        t0, c0 = time.perf_counter(), cpu_seconds()
        out = encode_batch(tok, [r.text for r in batch], [r.spans for r in batch],
                           [r.add_special_tokens for r in batch])
        t1 = time.perf_counter()
        wall, cpu = wall + t1 - t0, cpu + cpu_seconds() - c0
        # Off the clock: the proof that both backends wrote the same thing. Over the batch's flat arrays
        # with SHA-256 (CPU instructions for it here: 2.5x blake2b), because it is not off the other
        # workers' clocks: it shares the cores with them (0.2 s a worker per example with blake2b).
        digest = hashlib.sha256(out.lengths)
        digest.update(np.ascontiguousarray(out.ids, dtype=np.int32))
        digest.update(np.ascontiguousarray(out.labels, dtype=np.int32))
        tokens += len(out.ids)
        supervised += int(np.count_nonzero(out.labels != IGNORE_INDEX))
        digests[k // args.batch] = digest.hexdigest()
        hash_s += time.perf_counter() - t1
    finished = time.time() - hash_s  # when it would have ended without hashing
    backend = tok.backend
    return {
        "setup": args.setup, "backend": args.backend, "backend_name": tok.backend_name,
        "backend_version": tok.backend_version, "backend_reason": tok.backend_reason,
        "records": args.n, "examples": len(rendered), "chars": sum(len(r.text) for r in rendered),
        "tokens": tokens, "supervised_tokens": supervised, "batch_digests": digests,
        "render_s": render_s, "load_s": load_s, "load_cpu_s": load_cpu_s, "tokenize_s": wall,
        "tokenize_cpu_s": cpu, "started": start, "finished": finished, "hash_s": hash_s,
        "loadavg_before": load0, "loadavg_after": os.getloadavg()[0],
        "guard_examples": tok.guard.examples, "guard_checked": tok.guard.checked,
        "guard_offset_mismatches": tok.guard.offset_mismatches, "guard_disabled": tok.guard.disabled_reason,
        "reference_fallbacks": getattr(backend, "reference_fallbacks", 0),
        "peak_rss_mib": peak_rss_mib(),
    }


def run_cold(args: argparse.Namespace, setup: str, backend: str) -> dict:
    """``--procs`` workers, each a fresh interpreter on the first ``--threads`` cores with
    ``--threads // --procs`` tokenizer threads, as `pack --workers` caps them; several start
    tokenizing together, once all have rendered, and the stage's wall time runs from then to the last
    one's end, less that worker's hashing. The output hash is over every batch's, in order."""
    procs = args.procs
    threads = str(max(1, args.threads // procs))
    env = dict(os.environ, RAYON_NUM_THREADS=threads, FASTOKENS_BPE_THREADS=threads, TOKENIZERS_PARALLELISM="true")
    with tempfile.TemporaryDirectory(prefix="packcli-tokbench-") as tmp:
        go = Path(tmp) / "go"
        cmd = [sys.executable, __file__, "--worker", "--setup", setup, "--backend", backend, "--corpus",
               str(args.corpus), "--n", str(args.n), "--batch", str(args.batch), "--threads", str(args.threads),
               "--parts", str(procs)] + (["--go", str(go)] if procs > 1 else [])
        running = [subprocess.Popen([*cmd, "--part", str(k)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for k in range(procs)]
        go_time = None
        if procs > 1:
            while not all(Path(f"{go}.ready{k}").exists() for k in range(procs)):
                if any(p.poll() for p in running):  # one failed: let the others go, and report it below
                    break
                time.sleep(0.01)
            go_time = time.time()
            go.touch()
        parts = []
        for proc in running:
            stdout, stderr = proc.communicate()
            if proc.returncode:
                raise SystemExit(f"error: worker {setup}/{backend} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
            parts.append(json.loads(stdout.strip().splitlines()[-1]))
    row = dict(parts[0])
    for key in ("tokens", "supervised_tokens", "tokenize_cpu_s", "guard_examples", "guard_checked",
                "guard_offset_mismatches", "reference_fallbacks"):
        row[key] = sum(p[key] for p in parts)
    for key in ("load_s", "load_cpu_s", "render_s", "hash_s", "peak_rss_mib", "loadavg_after"):
        row[key] = max(p[key] for p in parts)
    if go_time is not None:
        row["tokenize_s"] = max(p["finished"] for p in parts) - go_time
    digests = {int(b): d for p in parts for b, d in p.pop("batch_digests").items()}
    row.pop("batch_digests")
    row["output_blake2b"] = hashlib.blake2b("".join(digests[b] for b in sorted(digests)).encode(),
                                            digest_size=16).hexdigest()
    row["procs"], row["tokens_per_s"] = procs, row["tokens"] / row["tokenize_s"] if row["tokenize_s"] else 0.0
    return row


def median_run(runs: list[dict]) -> dict:
    """The run of median tokenize time (the lower middle one of an even count), with every run's wall
    and CPU seconds under ``runs``.

    Raises:
        SystemExit: the runs' outputs differ (a backend that is not deterministic).
    """
    if len({r["output_blake2b"] for r in runs}) != 1:
        raise SystemExit(f"error: {runs[0]['setup']}/{runs[0]['backend']} gave different outputs on repeated runs")
    row = dict(sorted(runs, key=lambda r: r["tokenize_s"])[(len(runs) - 1) // 2])
    row["runs"] = [{"tokenize_s": r["tokenize_s"], "tokenize_cpu_s": r["tokenize_cpu_s"]} for r in runs]
    return row


def table(rows: list[dict]) -> str:
    """Markdown: one row per run; speedups against the same setup's ``tokenizers`` row, by wall time and by CPU."""
    header = ("setup", "backend", "examples", "tokens", "load s", "tokenize s", "runs (s)", "CPU s", "tokens/s",
              "speedup (wall)", "speedup (CPU)", "guard checked", "ref. fallbacks", "output = reference")
    lines = []
    ref = {r["setup"]: r for r in rows if r["backend"] == "tokenizers"}
    for r in rows:
        base = ref.get(r["setup"])
        wall = r["tokens_per_s"] / base["tokens_per_s"] if base and base["tokens_per_s"] else float("nan")
        cpu = base["tokenize_cpu_s"] / r["tokenize_cpu_s"] if base and r["tokenize_cpu_s"] else float("nan")
        same = "-" if r["backend"] == "tokenizers" or not base else (
            "yes" if r["output_blake2b"] == base["output_blake2b"] else "**NO**")
        lines.append((r["setup"], f"{r['backend_name']} {r['backend_version']}", f"{r['examples']:,}",
                      f"{r['tokens']:,}", f"{r['load_s']:.1f}", f"{r['tokenize_s']:.1f}",
                      ", ".join(format(x["tokenize_s"], ".1f") for x in r.get("runs", [r])),
                      f"{r['tokenize_cpu_s']:.1f}", f"{r['tokens_per_s']:,.0f}", f"{wall:.1f}x", f"{cpu:.1f}x",
                      f"{r['guard_checked']:,}", f"{r['reference_fallbacks']:,}", same))
    return markdown_table(header, lines)


def _title(result: dict) -> str:
    procs = result.get("procs", 1)
    return (f"{result['corpus']} ({result['records']:,} records, {result['threads']} cores, "
            f"{procs} worker process{'es' if procs > 1 else ''})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, help="JSONL corpus (scripts/make_bench_corpus.py)")
    parser.add_argument("--n", type=int, default=100_000, help="records to read (default: %(default)s)")
    parser.add_argument("--setup", action="append", choices=sorted(SETUPS), help="repeatable (default: qwen3)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: both)")
    parser.add_argument("--batch", type=int, default=BATCH, help="records per encode_batch (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="cores for the run (default: %(default)s)")
    parser.add_argument("--procs", type=int, default=1,
                        help="worker processes sharing the batches and the cores, as pack --workers "
                             "(default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="cold runs of each backend, alternating; the median is reported (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help=f"fixture tokenizer, {QUICK_N:,} records, seconds")
    parser.add_argument("--show", type=Path, nargs="+", metavar="JSON", help="print the table of earlier --out files")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.procs < 1 or args.repeat < 1:
        parser.error("--procs and --repeat must be at least 1")
    if args.show:
        for path in args.show:
            result = json.loads(path.read_text(encoding="utf-8"))
            print(f"{_title(result)}\n{table(result['rows'])}\n")
        return 0
    if args.worker:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
        args.setup, args.backend = args.setup[0], args.backend[0]
        print(json.dumps(worker(args)))
        return 0
    if args.quick:
        args.setup, args.n = args.setup or ["fixture"], min(args.n, QUICK_N)
        if args.corpus is None:
            args.corpus = Path(tempfile.gettempdir()) / "packcli-tokbench-quick.jsonl"
            subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_bench_corpus.py"), "--n", str(args.n),
                            "--out", str(args.corpus)], check=True, capture_output=True)
    if args.corpus is None or not args.corpus.is_file():
        parser.error(f"--corpus {args.corpus}: no such file (make one with scripts/make_bench_corpus.py)")
    setups, backends = args.setup or ["qwen3"], args.backend or list(BACKENDS)
    for name in setups:
        if not Path(SETUPS[name][0]).exists():
            parser.error(f"{SETUPS[name][0]} missing: run python scripts/fetch_real_assets.py")
    rows = []
    for name in setups:
        runs: dict[str, list[dict]] = {backend: [] for backend in backends}
        for k in range(args.repeat):
            for backend in backends:
                print(f"bench_tokenizers: {name} / {backend} (run {k + 1} of {args.repeat}) ...", file=sys.stderr,
                      flush=True)
                runs[backend].append(run_cold(args, name, backend))
        rows += [median_run(runs[backend]) for backend in backends]
    result = {"corpus": str(args.corpus), "records": args.n, "batch": args.batch, "threads": args.threads,
              "procs": args.procs, "repeat": args.repeat, "cpus": os.cpu_count(), "python": platform.python_version(),
              "argv": sys.argv, "rows": rows}
    if args.out:
        write_json(args.out, result)
    print(f"{_title(result)}\n{table(rows)}")
    mismatched = [r for r in rows if r["backend"] != "tokenizers" and any(
        b["setup"] == r["setup"] and b["backend"] == "tokenizers" and b["output_blake2b"] != r["output_blake2b"] for b in rows)]
    return 1 if mismatched else 0


if __name__ == "__main__":
    raise SystemExit(main())
