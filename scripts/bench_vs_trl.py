"""End-to-end pipeline comparison: TRL's SFT preprocessing vs ``packcli pack``, same corpus and tokenizer.

    TRL     datasets.load_dataset("json")  ->  SFTTrainer._prepare_dataset (apply the chat template,
            tokenize with assistant masks, build labels, trl.data_utils.pack_dataset(ds, C, "bfd"))
            ->  Dataset.to_parquet
    packcli packcli pack CORPUS -t TOKENIZER --template TEMPLATE -c C --strategy bfd --overlong truncate
            --tokenizer-backend auto (or as given; the artifacts are identical whichever backend runs)

Each side runs in a fresh process (TRL in its own venv, ``--trl-python``; never a packcli dependency)
whose wall and CPU come from ``wait4`` on that process alone and whose peak RSS is its own VmHWM.
Inside, each side reports its own stage seconds: TRL's by timing the calls (imports included; the
pack stage by wrapping ``pack_dataset`` as SFTTrainer calls it; TRL is not modified), packcli's
from ``--json`` (packcli's own definitions: its stages overlap, they do not sum to the wall).
``_prepare_dataset`` is TRL's real method, called with a stand-in ``self`` that holds the three
attributes it reads (tokenizer, completion_only_loss, chat_template), so no model is built.

Settings matched on purpose: the same tokenizer files and training template; loss on assistant
tokens only (TRL ``assistant_only_loss=True`` through the template's ``{% generation %}`` tags,
packcli ``--loss auto``); BFD with overlong conversations truncated to C on both sides (TRL's
"bfd" truncates, so packcli gets ``--overlong truncate``). TRL keeps its defaults otherwise:
``dataset_num_proc=None`` (one process) and ``pack_dataset``'s map batches of 1000 rows, inside
which it packs. Each run gets a fresh ``HF_DATASETS_CACHE`` so nothing is reused between runs.

Usage:
    python scripts/make_bench_corpus.py --n 100000 --source chatterbot --out bench-out/chatterbot-100k.jsonl
    python -m venv bench-out/trl-venv && bench-out/trl-venv/bin/pip install trl==1.16.0 datasets "torch==2.13.0"
    python scripts/bench_vs_trl.py --corpus bench-out/chatterbot-100k.jsonl --repeat 3 \\
        --trl-python bench-out/trl-venv/bin/python --out bench-out/vs-trl.json
    python scripts/bench_vs_trl.py --quick --trl-python bench-out/trl-venv/bin/python    # 300 conversations
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import PACKCLI_WITH_HWM, load_summary, markdown_table, peak_rss_mib, run_measured, write_json  # noqa: E402  (standard library only: the TRL venv imports it too)

REPO_ROOT = Path(__file__).resolve().parents[1]
ASSETS = REPO_ROOT / ".cache" / "assets"
WORKDIR = Path(tempfile.gettempdir()) / "packcli-bench-trl"


# ------------------------------------------------------------------- TRL side (runs in the TRL venv)

def trl_child(spec: dict) -> dict:
    """TRL's SFT preprocessing on spec["corpus"], written to Parquet; stage seconds and counts."""
    t0 = time.perf_counter()
    import types

    import datasets
    import trl
    from transformers import AutoTokenizer
    from trl import SFTConfig
    from trl.trainer import sft_trainer

    datasets.disable_progress_bars()
    seconds = {"import_s": time.perf_counter() - t0}
    pack_calls: list[dict] = []
    real_pack = sft_trainer.pack_dataset

    def timed_pack(dataset, seq_length, strategy="bfd", map_kwargs=None):
        # Input token count is taken outside the timed call (it reads the whole column).
        tokens_in = sum(len(x) for x in dataset["input_ids"])
        start = time.perf_counter()
        out = real_pack(dataset, seq_length, strategy, map_kwargs)
        pack_calls.append({"seconds": time.perf_counter() - start, "tokens_in": tokens_in, "rows_in": len(dataset),
                           "map_kwargs": {k: v for k, v in (map_kwargs or {}).items() if k != "desc"}})
        return out

    sft_trainer.pack_dataset = timed_pack
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    template = Path(spec["template"]).read_text()
    config = SFTConfig(output_dir=spec["scratch"], max_length=spec["capacity"], packing=True, packing_strategy="bfd",
                       assistant_only_loss=True, dataset_num_proc=spec["num_proc"], report_to=[], use_cpu=True,
                       bf16=False)
    seconds["setup_s"] = time.perf_counter() - start
    start = time.perf_counter()
    dataset = datasets.load_dataset("json", data_files=spec["corpus"], split="train")
    seconds["load_json_s"] = time.perf_counter() - start
    start = time.perf_counter()
    stand_in = types.SimpleNamespace(_tokenizer=tokenizer, completion_only_loss=config.completion_only_loss,
                                     chat_template=template)
    packed = sft_trainer.SFTTrainer._prepare_dataset(stand_in, dataset, tokenizer, config, True, None, "train")
    prepare = time.perf_counter() - start
    pack_s = sum(c["seconds"] for c in pack_calls)
    seconds.update(tokenize_labels_s=prepare - pack_s, pack_s=pack_s)
    start = time.perf_counter()
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    packed.to_parquet(str(out / "train.parquet"))
    seconds["write_s"] = time.perf_counter() - start

    lengths = [len(x) for x in packed["input_ids"]]
    supervised = sum(sum(1 for y in row if y != -100) for row in packed["labels"])
    tokens = sum(lengths)
    return {"seconds": seconds, "rows_in": len(dataset), "tokens_in": sum(c["tokens_in"] for c in pack_calls),
            "packs": len(lengths), "tokens": tokens, "supervised_tokens": supervised,
            "density": tokens / (len(lengths) * spec["capacity"]), "pack_calls": pack_calls,
            "bytes": sum(p.stat().st_size for p in out.iterdir()), "peak_rss_mib": peak_rss_mib(),
            "versions": {"trl": trl.__version__, "datasets": datasets.__version__,
                         "transformers": __import__("transformers").__version__,
                         "torch": __import__("torch").__version__}}


# ------------------------------------------------------------------------------------- the driver

def run_json(cmd: list[str], *, env: dict | None = None, stdout_path: Path) -> dict:
    """Wall and CPU of one child process alone (``wait4``), and its stdout (JSON) kept in a file."""
    with stdout_path.open("w") as handle:
        child = run_measured(cmd, stdout=handle, env=env)
    if child.returncode:
        raise SystemExit(f"error: exit {child.returncode} from: {' '.join(cmd)}")
    return {"wall_s": child.wall_s, "cpu_s": child.cpu_s, "report": json.loads(stdout_path.read_text())}


def run_packcli(corpus: Path, args: argparse.Namespace, strategy: str, backend: str) -> dict:
    name = f"packcli-{strategy}-{backend}"
    out, hwm = args.workdir / name, args.workdir / f"{name}.hwm"
    cmd = [sys.executable, "-c", PACKCLI_WITH_HWM, str(hwm), "pack", str(corpus), "-t", str(args.tokenizer),
           "--template", str(args.template), "-c", str(args.capacity), "--strategy", strategy, "--overlong", "truncate",
           "--tokenizer-backend", backend, "-o", str(out), "--force", "--json"]
    run = run_json(cmd, stdout_path=args.workdir / f"{name}.json")
    rep = run.pop("report")
    counts, stages = rep["counts"], rep["stage_seconds"]
    return {**run, "side": f"packcli ({strategy}, {rep['tokenization']['backend']})",
            "command": " ".join(["packcli", *cmd[4:]]), "manifest_sha256": rep["manifest_sha256"],
            "peak_rss_mib": int(hwm.read_text()) / 1024,
            "records": counts["records"], "examples": counts["packed"], "truncated": counts["truncated"],
            "dropped": counts["dropped"], "packs": counts["packs"], "tokens": counts["tokens"],
            "supervised_tokens": counts["supervised_tokens"], "density": rep["metrics"]["density"],
            "stage_seconds": stages, "bytes": sum(p.stat().st_size for p in out.iterdir() if p.is_file())}


def repeated(run, times: int) -> dict:
    """``run()`` ``times`` times: the row of the median wall time, with every run's wall in ``wall_s_runs``.

    A 30-second run on a shared 2-core machine varies by several seconds between identical runs, so
    one sample of the short side would decide a ratio against a 5-minute run."""
    rows = sorted((run() for _ in range(times)), key=lambda r: r["wall_s"])
    return {**rows[len(rows) // 2], "wall_s_runs": [r["wall_s"] for r in rows]}


def run_trl(corpus: Path, args: argparse.Namespace) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="hf-datasets-", dir=args.workdir))  # fresh: no cached map results
    spec = {"corpus": str(corpus), "tokenizer": str(args.tokenizer), "template": str(args.template),
            "capacity": args.capacity, "num_proc": args.trl_num_proc, "out": str(args.workdir / "trl"),
            "scratch": str(args.workdir / "trl-scratch")}
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    cmd = [str(args.trl_python), str(Path(__file__).resolve()), "_trl", json.dumps(spec)]
    run = run_json(cmd, env=env, stdout_path=args.workdir / "trl.json")
    rep = run.pop("report")
    return {**run, **rep, "side": f"TRL {rep['versions']['trl']} SFT prep + pack_dataset(bfd)"
            + (f", num_proc {args.trl_num_proc}" if args.trl_num_proc else ""),
            "command": f"{args.trl_python} scripts/bench_vs_trl.py _trl '<spec>'", "records": rep["rows_in"],
            "stage_seconds": rep["seconds"]}


def table(rows: list[dict]) -> str:
    header = ("pipeline", "wall s (all runs)", "CPU s", "tokens", "tokens/s (wall)", "supervised", "packs", "density",
              "peak RSS MiB (driver)", "output MB", "stage seconds (each side's own)")
    out = []
    for r in rows:
        s = r["stage_seconds"]
        if "load_json_s" in s:
            stages = (f"import {s['import_s']:.1f}, load json {s['load_json_s']:.1f}, template+tokenize+labels "
                      f"{s['tokenize_labels_s']:.1f}, pack {s['pack_s']:.1f}, write {s['write_s']:.1f}")
        else:
            stages = (f"read+render {s['read_render_s']:.1f}, tokenize {s['tokenize_s']:.1f} (wall "
                      f"{s.get('tokenize_wall_s', float('nan')):.1f}), pack {s['pack_s']:.1f}, "
                      f"write {s['write_s']:.1f}")
        runs = r.get("wall_s_runs", [])
        wall = f"{r['wall_s']:.1f}" + (f" ({', '.join(f'{w:.1f}' for w in runs)})" if len(runs) > 1 else "")
        out.append((r["side"], wall, f"{r['cpu_s']:.1f}", f"{r['tokens']:,}", f"{r['tokens'] / r['wall_s']:,.0f}",
                    f"{r['supervised_tokens']:,}", f"{r['packs']:,}", f"{r['density']:.4f}",
                    f"{r['peak_rss_mib']:,.0f}", f"{r['bytes'] / 1e6:.1f}", stages))
    return markdown_table(header, out, align="l" + "r" * 9 + "l")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_trl":
        print(json.dumps(trl_child(json.loads(argv[1]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, help="JSONL corpus (default: generate --n conversations under --workdir)")
    p.add_argument("--n", type=int, default=18_000, help="conversations to generate (default %(default)s; --quick 300)")
    p.add_argument("-t", "--tokenizer", type=Path, default=ASSETS / "qwen3")
    p.add_argument("--template", type=Path, default=ASSETS / "templates" / "qwen3_training.jinja")
    p.add_argument("-c", "--capacity", type=int, default=4096)
    p.add_argument("--packcli-strategy", action="append", choices=("bfd", "window", "ffd", "sequential"),
                   help="repeatable (default: bfd, the strategy TRL uses)")
    p.add_argument("--packcli-backend", action="append", choices=("auto", "tokenizers", "fastokens"),
                   help="packcli's --tokenizer-backend, repeatable (default: auto)")
    p.add_argument("--trl-python", type=Path, default=Path("/tmp/trl-venv/bin/python"),
                   help="python of a venv with trl==1.16.0 and datasets (default: %(default)s)")
    p.add_argument("--trl-num-proc", type=int, help="SFTConfig.dataset_num_proc (default: TRL's, None)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each packcli configuration; the median's row is "
                   "reported, with every wall time (default %(default)s; TRL runs once)")
    p.add_argument("--skip-trl", action="store_true", help="packcli side only")
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        args.n = min(args.n, 300)
    problems = [f"{path} is missing: run python scripts/fetch_real_assets.py"
                for path in (args.tokenizer, args.template) if not path.exists()]
    if not args.skip_trl and not args.trl_python.exists():
        problems.append(f"--trl-python {args.trl_python} does not exist; create the venv (see the docstring) "
                        "or pass --skip-trl")
    if problems:
        raise SystemExit("error: " + "; ".join(problems))
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        sys.path.insert(0, str(REPO_ROOT / "scripts"))
        from make_bench_corpus import ensure_bench

        corpus = ensure_bench(args.workdir / f"corpus-{args.n}.jsonl", args.n)
    load_start = os.getloadavg()
    rows = [repeated(lambda: run_packcli(corpus, args, s, b), args.repeat) for s in (args.packcli_strategy or ["bfd"])
            for b in (args.packcli_backend or ["auto"])]
    if not args.skip_trl:
        rows.append(run_trl(corpus, args))
    data = {"corpus": str(corpus), "capacity": args.capacity, "tokenizer": str(args.tokenizer),
            "template": str(args.template), "results": rows,
            "environment": {"cpus": os.cpu_count(), "python": platform.python_version(), "argv": sys.argv,
                            "loadavg_start": load_start, "loadavg_end": os.getloadavg()}}
    if args.out:
        write_json(args.out, data)
    print(f"\ncorpus {corpus} ({rows[0]['records']:,} conversations), capacity {args.capacity}, "
          f"tokenizer {args.tokenizer}, template {args.template.name}")
    print(load_summary(load_start))
    trl_row = next((r for r in rows if r["side"].startswith("TRL")), None)
    if trl_row:
        for r in rows:
            if r is not trl_row:
                print(f"{r['side']} vs TRL: {trl_row['wall_s'] / r['wall_s']:.1f}x faster wall, "
                      f"{trl_row['cpu_s'] / r['cpu_s']:.1f}x less CPU; tokens {r['tokens']:,} vs "
                      f"{trl_row['tokens']:,}; supervised {r['supervised_tokens']:,} vs "
                      f"{trl_row['supervised_tokens']:,}")
    print(f"\n{table(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
