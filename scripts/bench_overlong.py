"""Documents longer than the capacity: packcli's --overlong drop, truncate and split against TRL's
pack_dataset strategies bfd, bfd_split and wrapped, on the same tokens, and whether each leaks.

    python scripts/make_books_corpus.py --excerpts 1000 --out bench-out/books.jsonl
    python scripts/bench_overlong.py --corpus bench-out/books.jsonl --out bench-out/overlong.json
    python scripts/bench_overlong.py --quick

Every document is the text and the tokenizer's EOS (Qwen3: ``<|im_end|>``), all of it a target, as
``packcli pack`` makes a text record under ``--loss auto``. TRL packs the same ids, tokenized here by
``tokenizers`` (the totals are checked to match packcli's), as a ``datasets.Dataset`` of
``input_ids`` plus a ``doc`` column that TRL packs alongside them, so every packed token says which
document it came from.

Per method: tokens kept (in packs), targets (tokens a loss is taken on: every token of a segment but
its first, since nothing before it in the segment predicts it), segments, rows, density (tokens /
rows x capacity), and time in two parts: planning (packcli's ``pack_s``: over-long examples read back
and cut, the plan; TRL's ``pack_dataset`` on tokens already in memory) and writing the packs to Parquet
(packcli's ``write_s``: shards, token hashes, seam table; TRL's ``Dataset.to_parquet`` of its result).
Tokenization is timed once, apart; packcli's whole run is in the JSON.

Leaks are counted on the output, not taken from the packer: an attention unit is what a trainer
restricts attention to (a cu_seqlens segment for packcli; a seq_lengths entry for TRL's bfd
strategies, which its padding-free collator turns into position_ids; the whole row for wrapped,
which has none). A unit leaks when it holds tokens of two documents; a leaking token is one that
can attend to another document's token before it. packcli's segments are also compared token for
token with the documents (at their chunk_start) and their position_ids checked to restart at 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import Timer, load_summary, markdown_table, run_environment, write_json  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("drop", "truncate", "split")
TRL_STRATEGIES = ("bfd", "bfd_split", "wrapped")


def read_docs(corpus: Path) -> list[str]:
    return [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]


def tokenize(docs: list[str], tokenizer: Path) -> tuple[list[np.ndarray], dict]:
    """Each document's ids as packcli's text path makes them (text + eos_token, the tokenizer's own
    special tokens), by ``tokenizers`` directly."""
    from packcli.tokenizer.load import load_tokenizer

    tok = load_tokenizer(tokenizer)
    with Timer() as t:
        encoded = tok.tokenizer.encode_batch([d + (tok.eos_token or "") for d in docs], add_special_tokens=True)
    return [np.asarray(e.ids, np.int32) for e in encoded], {"wall_s": t.span.wall_s, "cpu_s": t.span.cpu_s}


def units_report(units: list[np.ndarray]) -> dict:
    """Leak counts over attention units, each given as the document of every token in it."""
    leaking_units = leaking_tokens = 0
    for docs in units:
        if len(docs) and (docs != docs[0]).any():
            leaking_units += 1
            first_change = int(np.flatnonzero(docs != docs[0])[0])
            leaking_tokens += len(docs) - first_change  # from the first foreign token on, context crosses
    return {"units": len(units), "leaking_units": leaking_units, "leaking_tokens": leaking_tokens}


def run_packcli(corpus: Path, tokenizer: Path, capacity: int, policy: str, work: Path, docs: list[np.ndarray],
                workers: int | None) -> dict:
    import pyarrow.parquet as pq

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = work / f"packcli-{policy}"
    with Timer() as t:
        summary = pack_corpus(PackConfig(inputs=(str(corpus),), tokenizer=str(tokenizer), out=out, capacity=capacity,
                                         overlong=policy, max_reject_fraction=1.0, force=True),
                              engine=_engine(workers))
    counts, stages = summary.manifest["counts"], summary.stage_seconds
    seam = pq.read_table(out / "examples.parquet", columns=["example_id", "line", "chunk_start", "shard"]).to_pydict()
    where = {(eid, start): line - 1 for eid, line, start, shard in
             zip(seam["example_id"], seam["line"], seam["chunk_start"], seam["shard"]) if shard is not None}
    by_id: dict[int, list[tuple[int, int]]] = {}
    for (eid, start), doc in where.items():
        by_id.setdefault(eid, []).append((start, doc))
    units, mismatched, positions_ok = [], 0, True
    for info in summary.manifest["shards"]:
        table = pq.read_table(out / info["name"], columns=["input_ids", "position_ids", "cu_seqlens", "example_ids"])
        for ids, pos, cu, eids in zip(*(table[c].to_pylist() for c in table.column_names)):
            ids, pos = np.asarray(ids, np.int32), np.asarray(pos)
            for a, b, eid in zip(cu[:-1], cu[1:], eids):
                segment = ids[a:b]
                start, doc = next(((s, d) for s, d in by_id[eid] if np.array_equal(docs[d][s:s + b - a], segment)),
                                  (None, by_id[eid][0][1]))
                mismatched += start is None
                positions_ok &= bool(np.array_equal(pos[a:b], np.arange(b - a)))
                units.append(np.full(b - a, doc))
    shutil.rmtree(out)
    tokens, segments = counts["tokens"], counts["packed"] + counts["truncated"] + counts["split"]
    return {"method": f"packcli --overlong {policy}", "tokens": tokens, "targets": counts["supervised_tokens"],
            "segments": segments, "rows": counts["packs"], "density": tokens / (counts["packs"] * capacity),
            "tokens_lost": counts["tokens_lost"], "seconds": stages["pack_s"], "write_seconds": stages["write_s"],
            "run_seconds": t.span.wall_s, "stage_seconds": stages, "segments_not_a_document_span": mismatched,
            "positions_restart": positions_ok, **units_report(units)}


def _engine(workers: int | None):  # noqa: ANN202 - a LocalEngine
    from packcli.engine.local import LocalEngine

    return LocalEngine(workers=workers) if workers else LocalEngine()


def run_trl(docs: list[np.ndarray], capacity: int, strategy: str) -> dict:
    import datasets
    import pyarrow as pa
    from trl import pack_dataset

    lengths = np.array([len(d) for d in docs], np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    values = np.concatenate(docs)
    owner = np.repeat(np.arange(len(docs), dtype=np.int32), lengths)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(offsets, pa.array(values)),
                      "doc": pa.ListArray.from_arrays(offsets, pa.array(owner))})
    dataset = datasets.Dataset(datasets.table.InMemoryTable(table))
    with Timer() as t:
        packed = pack_dataset(dataset, seq_length=capacity, strategy=strategy)
    with tempfile.TemporaryDirectory(prefix="packcli-trl-") as tmp, Timer() as written:
        packed.to_parquet(str(Path(tmp) / "packed.parquet"))
    data = packed.data.table
    rows_docs = data["doc"].to_pylist()
    seq_lengths = data["seq_lengths"].to_pylist() if "seq_lengths" in data.column_names else None
    units = []
    for r, row in enumerate(rows_docs):
        row = np.asarray(row)
        bounds = np.cumsum([0] + (seq_lengths[r] if seq_lengths else [len(row)]))
        units += [row[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    tokens = int(sum(len(u) for u in units))
    return {"method": f"trl pack_dataset {strategy}", "tokens": tokens, "targets": tokens - len(units),
            "segments": len(units), "rows": len(rows_docs), "density": tokens / (len(rows_docs) * capacity),
            "tokens_lost": int(lengths.sum()) - tokens, "seconds": t.span.wall_s, "write_seconds": written.span.wall_s,
            "run_seconds": t.span.wall_s + written.span.wall_s,
            **units_report(units)}


def best_of(run, repeat: int) -> dict:  # noqa: ANN001 - a callable giving one result
    """``run`` ``repeat`` times (the first pays the imports and warm-ups): the last result, with the fastest
    time of all and every time kept."""
    results = [run() for _ in range(repeat)]
    best = dict(results[-1], seconds=min(r["seconds"] for r in results),
                write_seconds=min(r["write_seconds"] for r in results))
    best["all_seconds"] = [[r["seconds"], r["write_seconds"]] for r in results]
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, help="a {\"text\"} JSONL (scripts/make_books_corpus.py)")
    parser.add_argument("--tokenizer", type=Path, default=REPO_ROOT / ".cache" / "assets" / "qwen3")
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=None, help="packcli's processes (default: its own choice)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each method; the fastest counts")
    parser.add_argument("--quick", action="store_true", help="a few documents of the fixture corpus, capacity 256")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    env = run_environment(REPO_ROOT)
    work = Path(tempfile.mkdtemp(prefix="packcli-overlong-"))
    try:
        if args.quick:
            from make_books_corpus import documents  # noqa: PLC0415 - the quick corpus: the fixture texts, excerpted

            texts = read_docs(REPO_ROOT / "fixtures" / "corpus" / "text.jsonl")
            corpus, args.capacity = work / "quick.jsonl", 256
            args.tokenizer = REPO_ROOT / "fixtures" / "tokenizer"
            corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents(
                [(str(k), t) for k, t in enumerate(texts)], 40, 0)), encoding="utf-8")
        elif args.corpus is None:
            parser.error("--corpus is required (or --quick)")
        else:
            corpus = args.corpus
        docs, tokenize_time = tokenize(read_docs(corpus), args.tokenizer)
        total = int(sum(len(d) for d in docs))
        import datasets

        datasets.disable_progress_bars()
        runs = [lambda p=p: run_packcli(corpus, args.tokenizer, args.capacity, p, work, docs, args.workers)
                for p in POLICIES] + [lambda s=s: run_trl(docs, args.capacity, s) for s in TRL_STRATEGIES]
        results = [best_of(run, args.repeat) for run in runs]
        if results[len(POLICIES) - 1]["tokens"] != total:
            raise SystemExit(f"packcli --overlong split packed {results[len(POLICIES) - 1]['tokens']:,} tokens, "
                             f"tokenizers gives {total:,}: not the same tokens")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lengths = np.array([len(d) for d in docs])
    data = {"environment": env, "capacity": args.capacity, "corpus": str(corpus), "documents": len(docs),
            "tokens": total, "over_capacity": int((lengths > args.capacity).sum()),
            "tokens_in_over_capacity": int(lengths[lengths > args.capacity].sum()), "tokenize": tokenize_time,
            "results": results}
    if args.out:
        write_json(args.out, data)
    print(f"{len(docs):,} documents, {total:,} tokens; {data['over_capacity']:,} documents over capacity "
          f"{args.capacity:,} hold {data['tokens_in_over_capacity'] / total:.1%} of the tokens; tokenize "
          f"{tokenize_time['wall_s']:.1f} s")
    print(load_summary(env["loadavg_start"]))
    header = ["method", "tokens kept", "of corpus", "targets", "segments", "rows", "density", "plan s", "write s",
              "leaking units", "leaking tokens"]
    rows = [[r["method"], f"{r['tokens']:,}", f"{r['tokens'] / total:.2%}", f"{r['targets']:,}", f"{r['segments']:,}",
             f"{r['rows']:,}", f"{r['density']:.4f}", f"{r['seconds']:.2f}", f"{r['write_seconds']:.2f}",
             f"{r['leaking_units']:,}", f"{r['leaking_tokens']:,}"] for r in results]
    print(markdown_table(header, rows, align="lrrrrrrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
