"""Benchmark the pack pipeline stage by stage against the raw-tokenizer ceiling.

Three modes, each printing a markdown table last and writing JSON with ``--out``:

    tokenize  Preparer.prepare (parse + render + tokenize + mask, batches as in packcli.pipeline)
              vs the ceiling: tokenizer.encode_batch on the SAME texts, rendered beforehand (untimed),
              same tokenizer object, same batch size, the two interleaved batch by batch. Run per
              tokenizer/template setup.
    pack      pack_corpus end to end in a fresh subprocess per corpus (so peak RSS is per run), and
              the raw ceiling on the same corpus in another fresh subprocess (render untimed, then
              encode_batch timed).
    verify    verify_artifact on an artifact from `pack`, in a fresh subprocess, with per-check
              times taken by wrapping the check functions (packcli itself is not modified).

Trade-off: the machine is shared, so every measurement also records process CPU seconds (all
threads) and the 1-minute load average before and after; wall time alone would hide contention.
The ceiling counts tokens with ``len(encoding)``, not ``encoding.ids``: building the Python list of
ids is part of what packcli pays, not part of what the tokenizer must do.

Usage:
    python scripts/make_bench_corpus.py --n 200000 --out bench-out/bench200k.jsonl
    python scripts/make_bench_corpus.py --n 100000 --out bench-out/bench100k.jsonl
    python scripts/bench_pipeline.py tokenize --corpus bench-out/bench200k.jsonl --n 50000 --out bench-out/tok.json
    python scripts/bench_pipeline.py pack --corpus bench-out/bench200k.jsonl --corpus bench-out/bench100k.jsonl \\
        --backend tokenizers --backend auto --workdir bench-out/packs --out bench-out/pack.json
    python scripts/bench_pipeline.py verify --artifact bench-out/packs/bench200k-tokenizers \\
        --pack-json bench-out/pack.json --out bench-out/verify.json
    python scripts/bench_pipeline.py tokenize --quick      # a few hundred conversations, seconds
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import (  # noqa: E402
    Span,
    Timer,
    load_summary,
    markdown_table,
    peak_rss_mib,
    rss_mib,
    run_environment,
    run_measured,
    write_json,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS = REPO_ROOT / ".cache" / "assets"
FIXTURE_TOKENIZER = REPO_ROOT / "fixtures" / "tokenizer"
BATCH = 4096  # packcli.config.PackConfig.batch_records default
SETUPS = {  # name -> (tokenizer, template)
    "qwen3": (ASSETS / "qwen3", ASSETS / "templates" / "qwen3_training.jinja"),
    "fixture": (FIXTURE_TOKENIZER, "chatml"),
}
DEFAULT_CORPORA = ("/tmp/bench200k.jsonl", "/tmp/bench100k.jsonl")
QUICK_DIR = Path(tempfile.gettempdir()) / "packcli-bench-quick"
QUICK_SIZES = (400, 200)


# ----------------------------------------------------------------------------------- environment

def _tree_hash(root: Path) -> str:
    """sha256 over every packcli source file: the tree is edited while benchmarks run."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def environment() -> dict:
    """What produced the numbers: machine, versions, and the packcli tree (others edit it)."""
    import numpy
    import pyarrow
    import tokenizers

    return {**run_environment(REPO_ROOT), "affinity": len(os.sched_getaffinity(0)),
            "tokenizers": tokenizers.__version__, "numpy": numpy.__version__, "pyarrow": pyarrow.__version__,
            "packcli_tree_sha256": _tree_hash(REPO_ROOT / "packcli")}


# ---------------------------------------------------------------------------- shared render helpers

def make_renderer(tokenizer_path: str | Path, template: str | Path, backend: str = "tokenizers"):
    """Tokenizer and renderer exactly as pack_corpus builds them (loss auto)."""
    from packcli.chat import LossPolicy, Renderer, load_template, require_markers
    from packcli.tokenizer.load import load_tokenizer

    tok = load_tokenizer(tokenizer_path, backend=backend)
    tpl = load_template(str(template), tok)
    require_markers(tpl, LossPolicy.auto)
    return tok, Renderer(tpl, LossPolicy.auto, bos_token=tok.bos_token, eos_token=tok.eos_token)


def render_texts(renderer, batch) -> tuple[list[str], list[bool]]:
    """The texts Preparer would hand to encode_batch, and their add_special_tokens flags."""
    from packcli.chat import RenderError
    from packcli.ingest import Record, parse_record

    texts, flags = [], []
    for fi, line, raw in batch:
        record = parse_record(raw, file_index=fi, line=line)
        if isinstance(record, Record):
            try:
                rendered = renderer.render(record)
            except RenderError:
                continue
            texts.append(rendered.text)
            flags.append(rendered.add_special_tokens)
    return texts, flags


def encode_raw(hf_tokenizer, texts: list[str], flags: list[bool]) -> int:
    """The ceiling: encode_batch alone, tokens counted without materialising ids."""
    tokens = 0
    for flag in (False, True):
        sub = [t for t, f in zip(texts, flags) if f is flag]
        if sub:
            tokens += sum(len(e) for e in hf_tokenizer.encode_batch(sub, add_special_tokens=flag))
    return tokens


# --------------------------------------------------------------------------------------- tokenize

def bench_tokenize(corpus: Path, n: int, setups: list[str], repeat: int, backends: list[str]) -> dict:
    from packcli.ingest import read_lines
    from packcli.prepare import Preparer

    lines = [(0, line, raw) for line, raw in itertools.islice(read_lines(corpus, 0), n)]
    if len(lines) < n:
        raise SystemExit(f"error: {corpus} has {len(lines)} records, fewer than --n {n}")
    batches = [lines[i:i + BATCH] for i in range(0, len(lines), BATCH)]
    results = []
    for name, backend in itertools.product(setups, backends):
        tokenizer_path, template = SETUPS[name]
        if not Path(tokenizer_path).exists():
            raise SystemExit(f"error: {tokenizer_path} missing; run python scripts/fetch_real_assets.py")
        tok, renderer = make_renderer(tokenizer_path, template, backend)
        rendered = [render_texts(renderer, b) for b in batches]  # untimed: the ceiling's input
        chars = sum(len(t) for texts, _ in rendered for t in texts)
        Preparer(renderer, tok).prepare(lines[:256])  # warm-up: thread pool, jinja, caches
        encode_raw(tok.tokenizer, *rendered[0])
        runs = []
        for rep in range(repeat):
            run = _interleaved_run(Preparer(renderer, tok), tok.tokenizer, batches, rendered, first=rep % 2)
            if run["prepare"]["tokens"] != run["raw"]["tokens"]:
                raise SystemExit(f"error: {name}: Preparer made {run['prepare']['tokens']} tokens, "
                                 f"raw encode_batch {run['raw']['tokens']}: not the same texts")
            runs.append(run)
        med = lambda what, key: statistics.median(r[what][key] for r in runs)  # noqa: E731
        tokens = runs[0]["raw"]["tokens"]
        prep_wall, raw_wall = med("prepare", "wall_s"), med("raw", "wall_s")
        results.append({
            "setup": name, "backend": f"{tok.backend_name} {tok.backend_version}", "tokenizer": str(tokenizer_path),
            "template": str(template), "guard": tok.guard_counts(),
            "conversations": len(lines), "rejected": runs[0]["prepare"]["rejected"], "chars": chars, "tokens": tokens,
            "batch": BATCH, "repeat": repeat, "runs": runs,
            "prepare_wall_s": prep_wall, "prepare_cpu_s": med("prepare", "cpu_s"),
            "parse_render_s": med("prepare", "parse_render_s"), "tokenize_mask_s": med("prepare", "tokenize_mask_s"),
            "raw_wall_s": raw_wall, "raw_cpu_s": med("raw", "cpu_s"),
            "prepare_tokens_per_s": tokens / prep_wall, "raw_tokens_per_s": tokens / raw_wall,
            "ratio": raw_wall / prep_wall,
            "ratio_cpu": med("raw", "cpu_s") / med("prepare", "cpu_s"),
            "ratio_tokenize_mask_only": raw_wall / med("prepare", "tokenize_mask_s"),
        })
    return {"mode": "tokenize", "corpus": str(corpus), "results": results}


def _interleaved_run(preparer, hf_tokenizer, batches, rendered, *, first: int) -> dict:
    """Time Preparer and raw encode_batch batch by batch, alternating which goes first, so that
    a neighbour's load on a shared machine falls on both sides alike."""
    spans: dict[str, list[Span]] = {"prepare": [], "raw": []}
    tokens = {"prepare": 0, "raw": 0}
    rejected = 0
    for i, (b, (texts, flags)) in enumerate(zip(batches, rendered)):
        for what in (("prepare", "raw") if (i + first) % 2 == 0 else ("raw", "prepare")):
            with Timer() as t:
                if what == "prepare":
                    outcomes = preparer.prepare(b)
                else:
                    n = encode_raw(hf_tokenizer, texts, flags)
            spans[what].append(t.span)
            if what == "prepare":  # counted outside the timed region, like the raw side's len()
                rejected += sum(isinstance(o, str) for o in outcomes)
                tokens["prepare"] += sum(len(o.input_ids) for o in outcomes if not isinstance(o, str))
                del outcomes
            else:
                tokens["raw"] += n
    run = {what: {"wall_s": sum(s.wall_s for s in spans[what]), "cpu_s": sum(s.cpu_s for s in spans[what]),
                  "load_before": spans[what][0].load_before, "load_after": spans[what][-1].load_after,
                  "tokens": tokens[what]} for what in spans}
    run["prepare"].update(rejected=rejected, parse_render_s=preparer.seconds["read_render_s"],
                          tokenize_mask_s=preparer.seconds["tokenize_s"])
    return run


def table_tokenize(data: dict) -> str:
    header = ("setup", "Preparer backend", "conv.", "tokens", "Preparer tok/s", "raw tokenizers encode_batch tok/s",
              "ratio (target >= 0.8)", "ratio, CPU s", "parse+render s", "tokenize+mask s", "raw s",
              "tokenize+mask vs raw")
    rows = [(r["setup"], r.get("backend", "tokenizers"), f"{r['conversations']:,}", f"{r['tokens']:,}",
             f"{r['prepare_tokens_per_s']:,.0f}", f"{r['raw_tokens_per_s']:,.0f}", f"{r['ratio']:.2f}x",
             f"{r['ratio_cpu']:.2f}x", f"{r['parse_render_s']:.1f}", f"{r['tokenize_mask_s']:.1f}",
             f"{r['raw_wall_s']:.1f}", f"{r['ratio_tokenize_mask_only']:.2f}x") for r in data["results"]]
    return markdown_table(header, rows, align="ll" + "r" * 10)


# ------------------------------------------------------------------------------------------- pack

def child_pack(spec: dict) -> dict:
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    rss_imports = rss_mib()
    config = PackConfig(inputs=(spec["corpus"],), tokenizer=spec["tokenizer"], template=str(spec["template"]),
                        out=Path(spec["out"]), capacity=spec["capacity"], force=True,
                        tokenizer_backend=spec["backend"])
    with Timer() as t:
        summary = pack_corpus(config)
    counts, metrics = summary.manifest["counts"], summary.manifest["metrics"]
    return {"span": asdict(t.span), "stage_seconds": summary.stage_seconds, "counts": counts,
            "tokenization": summary.manifest["unhashed"]["tokenization"],
            "density": metrics["density"], "supervised_density": metrics["supervised_density"],
            "rss_after_imports_mib": rss_imports, "peak_rss_mib": peak_rss_mib(),
            "shards": len(summary.manifest["shards"]),
            "artifact_bytes": sum(p.stat().st_size for p in Path(spec["out"]).iterdir())}


def child_ceiling(spec: dict) -> dict:
    from packcli.ingest import read_lines

    tok, renderer = make_renderer(spec["tokenizer"], spec["template"])
    lines = ((0, line, raw) for line, raw in read_lines(spec["corpus"], 0))
    tokens = conversations = 0
    wall = cpu = 0.0
    load0 = os.getloadavg()[0]
    while batch := list(itertools.islice(lines, BATCH)):
        conversations += len(batch)
        texts, flags = render_texts(renderer, batch)  # untimed
        with Timer() as t:
            tokens += encode_raw(tok.tokenizer, texts, flags)
        wall += t.span.wall_s
        cpu += t.span.cpu_s
    return {"span": asdict(Span(wall, cpu, load0, os.getloadavg()[0])), "tokens": tokens,
            "conversations": conversations, "peak_rss_mib": peak_rss_mib()}


def run_child(kind: str, spec: dict) -> dict:
    """Run one measurement in a fresh interpreter; add the parent's view (wall, wait4 rusage)."""
    child = run_measured([sys.executable, str(Path(__file__).resolve()), "_child", kind, json.dumps(spec)],
                         stdout=subprocess.PIPE)
    if child.returncode != 0:
        raise SystemExit(f"error: child {kind} exited {child.returncode}: {child.stdout[-2000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result.update(process_wall_s=child.wall_s, process_cpu_s=child.cpu_s, process_maxrss_mib=child.maxrss_mib)
    return result


def bench_pack(corpora: list[Path], tokenizer: str, template: str, capacity: int, workdir: Path,
               ceiling: bool, backends: list[str]) -> dict:
    results = []
    for corpus in corpora:
        raw = None
        if ceiling:
            print(f"ceiling {corpus}", file=sys.stderr, flush=True)
            raw = run_child("ceiling", {"corpus": str(corpus), "tokenizer": tokenizer, "template": template})
        for backend in backends:
            spec = {"corpus": str(corpus), "tokenizer": tokenizer, "template": template, "capacity": capacity,
                    "out": str(workdir / f"{corpus.stem}-{backend}"), "backend": backend}
            print(f"pack {corpus} ({backend}) -> {spec['out']}", file=sys.stderr, flush=True)
            pack = run_child("pack", spec)
            c = pack["counts"]
            tokenized = c["tokens"] + c["tokens_lost"]
            entry = {"corpus": str(corpus), "backend": backend, "records": c["records"], "tokens_tokenized": tokenized,
                     "tokens_packed": c["tokens"], "pack": pack, "pack_wall_s": pack["span"]["wall_s"],
                     "pack_tokens_per_s": tokenized / pack["span"]["wall_s"]}
            if raw is not None:
                if raw["tokens"] != tokenized:
                    entry["token_count_note"] = f"ceiling counted {raw['tokens']} tokens, pack {tokenized}"
                entry.update(ceiling=raw, raw_tokens_per_s=raw["tokens"] / raw["span"]["wall_s"])
                entry["ratio"] = entry["pack_tokens_per_s"] / entry["raw_tokens_per_s"]
                entry["ratio_cpu"] = (raw["span"]["cpu_s"] / raw["tokens"]) / (pack["span"]["cpu_s"] / tokenized)
            results.append(entry)
    return {"mode": "pack", "tokenizer": tokenizer, "template": template, "capacity": capacity, "results": results}


def table_pack(data: dict) -> str:
    header = ("corpus", "backend", "records", "tokens", "pack wall s", "read+render s", "tokenize s", "pack s",
              "write s", "tok/s", "raw tok/s", "ratio (>= 0.8)", "ratio, CPU s", "peak RSS MiB", "density")
    rows = []
    for r in data["results"]:
        s = r["pack"]["stage_seconds"]
        raw = f"{r['raw_tokens_per_s']:,.0f}" if "ceiling" in r else "-"
        ratio = f"{r['ratio']:.2f}x" if "ceiling" in r else "-"
        ratio_cpu = f"{r['ratio_cpu']:.2f}x" if "ceiling" in r else "-"
        rows.append((Path(r["corpus"]).name, r.get("backend", "hf"), f"{r['records']:,}", f"{r['tokens_tokenized']:,}",
                     f"{r['pack_wall_s']:.1f}", f"{s['read_render_s']:.1f}", f"{s['tokenize_s']:.1f}",
                     f"{s['pack_s']:.1f}", f"{s['write_s']:.1f}", f"{r['pack_tokens_per_s']:,.0f}", raw, ratio,
                     ratio_cpu, f"{r['pack']['peak_rss_mib']:,.0f}", f"{r['pack']['density']:.4f}"))
    return markdown_table(header, rows, align="ll" + "r" * 13)


# ----------------------------------------------------------------------------------------- verify

# verify's checks, by report name: the functions timed. pack_layout runs inside integrity's per-shard task
# (`packcli.verify.integrity.read_shard_task`), so its seconds are integrity's.
CHECKS = {"manifest": "check_manifest", "integrity": "check_integrity", "contract_drift": "check_drift",
          "pack_layout": None, "global": "check_global", "copies": "check_copies",
          "reconstruction": "check_reconstruction", "plan": "check_plan"}
TIMED = [name for name in CHECKS.values() if name is not None]


def child_verify(spec: dict) -> dict:
    """verify_artifact with its check functions (and reconstruction's Preparer) wrapped for timing."""
    import packcli.verify.reconstruct as reconstruct
    import packcli.verify.suite as artifact
    from packcli.prepare import Preparer

    rss_imports = rss_mib()
    seconds: dict[str, float] = {}

    def timed(name: str, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    for name in TIMED:
        setattr(artifact, name, timed(name, getattr(artifact, name)))
    preparers: list[Preparer] = []

    class CountingPreparer(Preparer):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            preparers.append(self)

    reconstruct.Preparer = CountingPreparer
    with Timer() as t:
        report = artifact.verify_artifact(spec["artifact"], workers=spec["workers"])
    # in worker processes the split is not visible here: only this process's preparers count
    split = {k: sum(p.seconds[k] for p in preparers) for k in ("read_render_s", "tokenize_s")}
    checks = [{"name": c.name, "checked": c.checked, "violations": c.count, "ok": c.ok, "skipped": c.skipped}
              for c in report.checks]
    return {"span": asdict(t.span), "ok": report.ok, "checks": checks, "check_seconds": seconds,
            "reconstruction_split": split, "rss_after_imports_mib": rss_imports, "peak_rss_mib": peak_rss_mib()}


def bench_verify(artifact: Path, pack_json: Path | None, workers: int | None,
                 ceiling: tuple[str, str, str] | None = None) -> dict:
    """``ceiling``: (corpus, tokenizer, template) the artifact was packed from: then raw ``encode_batch`` on
    the same rendered texts runs too, in its own fresh process (all threads, as verify has every core)."""
    result = run_child("verify", {"artifact": str(artifact), "workers": workers})
    data = {"mode": "verify", "artifact": str(artifact), "workers": workers, "result": result,
            "verify_wall_s": result["span"]["wall_s"]}
    if ceiling is not None:
        corpus, tokenizer, template = ceiling
        raw = run_child("ceiling", {"corpus": corpus, "tokenizer": tokenizer, "template": template})
        data.update(ceiling=raw, ceiling_wall_s=raw["span"]["wall_s"],
                    verify_over_ceiling=data["verify_wall_s"] / raw["span"]["wall_s"])
    if pack_json is not None:  # every pack of the same corpus (artifact dirs are named <corpus stem>-<backend>)
        packs = json.loads(pack_json.read_text())["results"]
        same = {r.get("backend", "tokenizers"): r["pack_wall_s"] for r in packs
                if artifact.name.startswith(Path(r["corpus"]).stem + "-") or artifact.name == Path(r["corpus"]).stem}
        data["pack_wall_s"] = same
        data["verify_over_pack"] = {b: data["verify_wall_s"] / w for b, w in same.items()}
    return data


def table_verify(data: dict) -> str:
    r = data["result"]
    secs = r["check_seconds"]
    rows = []
    total = data["verify_wall_s"]
    for c in r["checks"]:
        if CHECKS.get(c["name"], "") is None:
            rows.append((c["name"], f"{c['checked']:,}", f"{c['violations']:,}", "in integrity", ""))
            continue
        s = secs.get(CHECKS.get(c["name"], ""), 0.0)
        rows.append((c["name"], f"{c['checked']:,}", f"{c['violations']:,}", f"{s:.1f}", f"{s / total:.0%}"))
    other = total - sum(secs.values())
    rows.append(("other (manifest read, seam-table read)", "", "", f"{other:.1f}", f"{other / total:.0%}"))
    split = r["reconstruction_split"]
    if split["tokenize_s"]:
        rows.append(("of reconstruction: parse+render / tokenize+mask", "", "",
                     f"{split['read_render_s']:.1f} / {split['tokenize_s']:.1f}", ""))
    ratios = data.get("verify_over_pack", {})
    vs = "; ".join(f"{v:.2f}x pack --tokenizer-backend {b} ({data['pack_wall_s'][b]:.1f} s)"
                   for b, v in ratios.items()) or "-"
    rows.append((f"**verify total** (workers {data.get('workers') or 'auto'}; target <= pack)", "", "",
                 f"**{total:.1f}**", vs))
    if "ceiling" in data:
        rows.append((f"raw encode_batch on the same rendered texts ({data['ceiling']['tokens']:,} tokens)", "", "",
                     f"{data['ceiling_wall_s']:.1f}", f"verify / raw: **{data['verify_over_ceiling']:.2f}x**"))
    table = markdown_table(("check", "checked", "violations", "seconds", "share"), rows, align="lrrrr")
    return f"peak RSS {r['peak_rss_mib']:,.0f} MiB; all checks ok: {r['ok']}\n\n{table}"


# ------------------------------------------------------------------------------------------- main

def quick_corpora() -> list[Path]:
    """Small corpora for --quick, generated under the temp dir when missing."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    from make_bench_corpus import ensure_bench

    return [ensure_bench(QUICK_DIR / f"quick{n}.jsonl", n) for n in QUICK_SIZES]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        kind, spec = argv[1], json.loads(argv[2])
        result = {"pack": child_pack, "ceiling": child_ceiling, "verify": child_verify}[kind](spec)
        result.update(spec)
        print(json.dumps(result))
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, help="write the results as JSON here")
    common.add_argument("--quick", action="store_true", help="a tiny run (a few hundred conversations)")
    tok = sub.add_parser("tokenize", parents=[common], help="Preparer.prepare vs raw encode_batch")
    tok.add_argument("--corpus", type=Path, default=Path(DEFAULT_CORPORA[0]))
    tok.add_argument("--n", type=int, default=50_000, help="conversations (default: %(default)s; --quick: 300)")
    tok.add_argument("--setup", action="append", choices=sorted(SETUPS), help="default: qwen3 and fixture")
    tok.add_argument("--repeat", type=int, default=1, help="runs per setup, alternating order; medians reported")
    tok.add_argument("--backend", action="append", choices=("tokenizers", "auto", "fastokens"),
                     help="Preparer's tokenizer backend, repeatable (default: tokenizers); the ceiling is always tokenizers")
    pk = sub.add_parser("pack", parents=[common], help="pack_corpus end to end, one fresh process per corpus")
    pk.add_argument("--corpus", type=Path, action="append", help=f"default: {' '.join(DEFAULT_CORPORA)}")
    pk.add_argument("--tokenizer", default=str(FIXTURE_TOKENIZER))
    pk.add_argument("--template", default="chatml")
    pk.add_argument("--capacity", type=int, default=4096)
    pk.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "packcli-bench",
                    help="artifacts go to WORKDIR/<corpus stem> (default: %(default)s)")
    pk.add_argument("--no-ceiling", action="store_true", help="skip the raw encode_batch ceiling")
    pk.add_argument("--backend", action="append", choices=("tokenizers", "auto", "fastokens"),
                    help="pack's --tokenizer-backend, repeatable (default: tokenizers); the ceiling is always tokenizers")
    vf = sub.add_parser("verify", parents=[common], help="verify_artifact on a pack artifact, per-check times")
    vf.add_argument("--artifact", type=Path, help="default: WORKDIR/<first corpus stem> of `pack`")
    vf.add_argument("--pack-json", type=Path, help="the pack mode's --out, to compare verify time with pack time")
    vf.add_argument("--workers", type=int, help="verify's reconstruction processes (default: packcli's choice)")
    vf.add_argument("--ceiling", nargs=3, metavar=("CORPUS", "TOKENIZER", "TEMPLATE"),
                    help="also time raw encode_batch on CORPUS rendered with TEMPLATE (what the artifact was packed from)")
    args = parser.parse_args(argv)

    env = environment()
    if args.mode == "tokenize":
        corpus, n = args.corpus, args.n
        if args.quick:
            corpus, n = quick_corpora()[0], min(n, 300)
        data = bench_tokenize(corpus, n, args.setup or ["qwen3", "fixture"], args.repeat, args.backend or ["tokenizers"])
        table = table_tokenize(data)
    elif args.mode == "pack":
        corpora = args.corpus or (quick_corpora() if args.quick else [Path(p) for p in DEFAULT_CORPORA])
        workdir = QUICK_DIR / "artifacts" if args.quick and args.workdir == pk.get_default("workdir") else args.workdir
        data = bench_pack(corpora, args.tokenizer, args.template, args.capacity, workdir, not args.no_ceiling,
                          args.backend or ["tokenizers"])
        table = table_pack(data)
    else:
        default = QUICK_DIR / "artifacts" / f"quick{QUICK_SIZES[0]}-tokenizers" if args.quick else \
            Path(tempfile.gettempdir()) / "packcli-bench" / f"{Path(DEFAULT_CORPORA[0]).stem}-tokenizers"
        artifact = args.artifact or default
        data = bench_verify(artifact, args.pack_json, args.workers, args.ceiling)
        table = table_verify(data)
    data["environment"] = {**env, "loadavg_end": os.getloadavg()}
    if args.out:
        write_json(args.out, data)
    print(f"\n{load_summary(env['loadavg_start'])}\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
