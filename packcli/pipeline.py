"""The local ``pack`` engine: read -> render -> tokenize -> spill, then plan packs, write shards.

Streaming: records are processed in batches and their tokens appended to a spill file on disk, so
memory holds only a per-example index (a few dozen bytes an example), never the corpus. Packing
needs every length before it decides (global BFD), which the index provides; shards are then
gathered from the memory-mapped spill.

Atomic: everything is written into a temporary directory beside ``--out`` and renamed into place
only after the manifest is written; an interrupted run leaves a ``.packcli-tmp-*`` directory that
has no manifest and that ``verify`` refuses.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli import manifest as mf
from packcli.chat import Renderer, load_template, require_markers
from packcli.config import Overlong, OnError, PackConfig
from packcli.console import NO_PROGRESS, Progress
from packcli.errors import BudgetError, InputError, RecordError
from packcli.ingest import InputFile, describe_input, expand_inputs, read_lines
from packcli.pack import check_budgets, pack_lengths
from packcli.prepare import Preparer, example_id
from packcli.shards import ShardInfo, build_table, file_sha256, shard_name, write_shard
from packcli.tokenization import IGNORE_INDEX, LoadedTokenizer, load_tokenizer, token_hash

STATUSES = ("packed", "truncated", "dropped", "rejected")
PACKED, TRUNCATED, DROPPED, REJECTED = range(4)
SEAM_TABLE_SCHEMA = pa.schema([
    ("example_id", pa.int64()), ("source", pa.string()), ("line", pa.int32()), ("status", pa.string()),
    ("reason", pa.string()), ("shard", pa.string()), ("row", pa.int32()), ("offset", pa.int32()),
    ("length", pa.int32()), ("original_length", pa.int32()), ("supervised", pa.int32()),
    ("supervised_lost", pa.int32()), ("token_hash", pa.string()),
])


@dataclass
class ExampleIndex:
    """Per-example facts in input order; token ids and labels live in the spill files."""

    ids: list[int] = field(default_factory=list)
    file_index: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    reason: list[str] = field(default_factory=list)
    spill_offset: list[int] = field(default_factory=list)
    length: list[int] = field(default_factory=list)
    supervised: list[int] = field(default_factory=list)
    records_per_file: list[int] = field(default_factory=list)

    def add(self, eid: int, fi: int, line: int, status: int, reason: str, offset: int, length: int,
            supervised: int) -> None:
        self.ids.append(eid)
        self.file_index.append(fi)
        self.line.append(line)
        self.status.append(status)
        self.reason.append(reason)
        self.spill_offset.append(offset)
        self.length.append(length)
        self.supervised.append(supervised)
        self.records_per_file[fi] += 1


@dataclass(frozen=True)
class PackSummary:
    """What a run produced, for the CLI summary and ``--json``."""

    out: Path
    manifest: dict
    stage_seconds: dict[str, float]


def pack_corpus(config: PackConfig, progress: Progress = NO_PROGRESS) -> PackSummary:
    """Run the whole ``pack`` job. See the module docstring for the streaming and atomicity design.

    Raises:
        PackcliError: bad configuration, inputs, tokenizer or template; a record under
            ``--on-error fail``; an unmet budget. Nothing is left at ``config.out`` in every case.
    """
    timings: dict[str, float] = {}
    tokenizer = load_tokenizer(config.tokenizer)
    template = load_template(config.template, tokenizer.config)
    require_markers(template, config.loss)
    renderer = Renderer(template, config.loss, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token)
    files = [describe_input(p) for p in expand_inputs(config.inputs)]
    out = Path(config.out)
    _check_out(out, config.force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".packcli-tmp-{out.name}-", dir=out.parent))
    try:
        with progress.running():
            index, spill_ids, spill_labels = _tokenize_all(files, renderer, tokenizer, config, tmp, progress, timings)
            manifest = _plan_and_write(index, spill_ids, spill_labels, files, tokenizer, template, config, tmp,
                                       progress, timings)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PackSummary(out=out, manifest=manifest, stage_seconds=timings)


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise InputError(f"{out}: exists and is not empty", "choose another --out, or pass --force to replace it")


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished artifact into place; an old one is removed only after the new one is whole."""
    if out.exists():
        trash = out.with_name(f".packcli-old-{out.name}-{tmp.name[-8:]}")
        out.rename(trash)
        tmp.rename(out)
        shutil.rmtree(trash) if trash.is_dir() else trash.unlink()
    else:
        tmp.rename(out)


def _batches(files: list[InputFile], size: int) -> Iterator[list[tuple[int, int, bytes]]]:
    batch: list[tuple[int, int, bytes]] = []
    for fi, f in enumerate(files):
        for line, raw in read_lines(f.path, fi):
            batch.append((fi, line, raw))
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def _tokenize_all(files, renderer: Renderer, tokenizer: LoadedTokenizer, config: PackConfig, tmp: Path,
                  progress: Progress, timings: dict[str, float]):
    """Stream every record through parse -> render -> tokenize, appending tokens to spill files."""
    index = ExampleIndex(records_per_file=[0] * len(files))
    preparer = Preparer(renderer, tokenizer, config.input_format)
    spill_dir = tmp / ".spill"
    spill_dir.mkdir()
    offset = 0
    progress.start("read", "tokenizing", total=None)
    with open(spill_dir / "ids.bin", "wb") as ids_out, open(spill_dir / "labels.bin", "wb") as labels_out:
        for batch in _batches(files, config.batch_records):
            for (fi, line, _), outcome in zip(batch, preparer.prepare(batch)):
                eid = example_id(files[fi].sha256, line)
                if isinstance(outcome, str):
                    if config.on_error is OnError.fail:
                        raise RecordError(str(files[fi].path), line, outcome)
                    index.add(eid, fi, line, REJECTED, outcome, -1, 0, 0)
                    continue
                ids_out.write(outcome.input_ids.tobytes())
                labels_out.write(outcome.labels.tobytes())
                index.add(eid, fi, line, PACKED, "", offset, len(outcome.input_ids), outcome.supervised)
                offset += len(outcome.input_ids)
            progress.advance("read", len(batch))
    timings.update(preparer.seconds)
    if not index.ids:
        raise InputError("no records found in the inputs (all files empty?)", "check the input paths")
    spill_ids = np.memmap(spill_dir / "ids.bin", dtype=np.int32, mode="r") if offset else np.zeros(0, np.int32)
    spill_labels = np.memmap(spill_dir / "labels.bin", dtype=np.int32, mode="r") if offset else np.zeros(0, np.int32)
    return index, spill_ids, spill_labels


def _plan_and_write(index: ExampleIndex, spill_ids, spill_labels, files, tokenizer, template, config: PackConfig,
                    tmp: Path, progress: Progress, timings: dict[str, float]) -> dict:
    t0 = time.perf_counter()
    n = len(index.ids)
    status = np.asarray(index.status, dtype=np.int8)
    full_len = np.asarray(index.length, dtype=np.int64)
    offsets = np.asarray(index.spill_offset, dtype=np.int64)
    supervised = np.asarray(index.supervised, dtype=np.int64)
    used_len = full_len.copy()
    used_sup = supervised.copy()
    reasons = list(index.reason)
    over = np.flatnonzero((status == PACKED) & (full_len > config.capacity))
    for i in over:
        reason = f"{full_len[i]} tokens > capacity {config.capacity}"
        if config.overlong is Overlong.truncate:
            kept = int(np.count_nonzero(spill_labels[offsets[i]:offsets[i] + config.capacity] != IGNORE_INDEX))
            if kept:
                status[i], used_len[i], used_sup[i] = TRUNCATED, config.capacity, kept
                reasons[i] = reason + f"; truncated to {config.capacity}"
                continue
            reason += "; truncation would keep no supervised tokens"
        status[i], used_len[i], used_sup[i] = DROPPED, 0, 0
        reasons[i] = reason
    packable = np.flatnonzero((status == PACKED) | (status == TRUNCATED))
    plan = pack_lengths(used_len[packable], config.capacity, strategy=config.strategy, window=config.window,
                        seed=config.seed, shuffle=config.shuffle, shuffle_packs=config.shuffle_packs)
    problems = check_budgets(plan, min_density=config.min_density, max_displacement=config.max_displacement)
    if problems:
        raise BudgetError("budget not met, nothing written: " + "; ".join(problems),
                          "choose the strategy named above, or relax the budget")
    timings["pack_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ordered = packable[plan.order]  # example rows in packed order
    ex_per_pack = np.diff(plan.pack_offsets).astype(np.int64)
    ids_arr = np.asarray(index.ids, dtype=np.int64)
    shard_col = [None] * n
    row_col = np.full(n, -1, dtype=np.int32)
    off_col = np.full(n, -1, dtype=np.int32)
    thash = [""] * n
    shards: list[ShardInfo] = []
    num_shards = -(-plan.num_packs // config.packs_per_shard)
    progress.start("write", "writing shards", total=num_shards)
    for s in range(num_shards):
        p0, p1 = s * config.packs_per_shard, min((s + 1) * config.packs_per_shard, plan.num_packs)
        rows = ordered[plan.pack_offsets[p0]:plan.pack_offsets[p1]]
        lens = used_len[rows]
        starts = offsets[rows]
        gather = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
        ids, labels = np.asarray(spill_ids[gather]), np.asarray(spill_labels[gather])
        table = build_table(ids, labels, lens, ex_per_pack[p0:p1], ids_arr[rows])
        shards.append(write_shard(table, tmp / shard_name(s)))
        name = shard_name(s)
        local = np.concatenate([[0], np.cumsum(lens)])
        pack_rows = np.repeat(np.arange(p1 - p0), ex_per_pack[p0:p1])
        row_start = local[plan.pack_offsets[p0:p1 + 1] - plan.pack_offsets[p0]]
        for j, r in enumerate(rows):
            shard_col[r] = name
            row_col[r] = pack_rows[j]
            off_col[r] = local[j] - row_start[pack_rows[j]]
            thash[r] = token_hash(ids[local[j]:local[j + 1]])
        progress.advance("write")
    for i in np.flatnonzero(status == DROPPED):
        thash[i] = token_hash(np.asarray(spill_ids[offsets[i]:offsets[i] + full_len[i]]))
    _write_seam_table(tmp, index, files, status, reasons, shard_col, row_col, off_col, used_len, full_len,
                      used_sup, supervised, thash)
    rejects = _write_rejects(tmp, index, files, status)
    shutil.rmtree(tmp / ".spill")
    timings["write_s"] = time.perf_counter() - t0

    counts = {name: int(np.count_nonzero(status == code)) for code, name in enumerate(STATUSES)}
    tokens, sup_tokens = int(used_len[packable].sum()), int(used_sup[packable].sum())
    counts.update(records=n, packs=plan.num_packs, tokens=tokens, supervised_tokens=sup_tokens,
                  supervised_tokens_lost=int((supervised - used_sup)[status != REJECTED].sum()),
                  tokens_lost=int((full_len - used_len)[status != REJECTED].sum()))
    metrics = plan.metrics.to_dict()
    metrics["supervised_density"] = sup_tokens / (plan.num_packs * config.capacity) if plan.num_packs else 0.0
    seam_table = tmp / mf.SEAM_TABLE_NAME
    manifest = {
        "tokenizer": {"source": tokenizer.source, "sha256": tokenizer.sha256, "bos_token": tokenizer.bos_token,
                      "eos_token": tokenizer.eos_token},
        "template": {"source": template.source, "sha256": template.sha256, "text": template.text},
        "loss_policy": config.loss.value,
        "conventions": mf.CONVENTIONS,
        "config": {**config.seam_settings(), "window": plan.window},
        "inputs": [{"path": str(f.path), "size": f.size, "sha256": f.sha256, "records": index.records_per_file[i]}
                   for i, f in enumerate(files)],
        "counts": counts,
        "metrics": metrics,
        "shards": [vars(s) for s in shards],
        "seam_table": {"name": seam_table.name, "rows": n, "bytes": seam_table.stat().st_size,
                       "sha256": file_sha256(seam_table)},
        "rejects": {"name": mf.REJECTS_NAME, "rows": rejects},
        "versions": mf.versions(),
    }
    manifest = mf.finalize(manifest)
    mf.write_manifest(manifest, tmp)
    return manifest


def _write_seam_table(tmp, index, files, status, reasons, shard_col, row_col, off_col, used_len, full_len,
                      used_sup, supervised, thash) -> None:
    sources = [str(f.path) for f in files]
    table = pa.table({
        "example_id": pa.array(index.ids, pa.int64()),
        "source": pa.array([sources[fi] for fi in index.file_index], pa.string()),
        "line": pa.array(index.line, pa.int32()),
        "status": pa.array([STATUSES[s] for s in status], pa.string()),
        "reason": pa.array(reasons, pa.string()),
        "shard": pa.array(shard_col, pa.string()),
        "row": pa.array(row_col, pa.int32()),
        "offset": pa.array(off_col, pa.int32()),
        "length": pa.array(used_len, pa.int32()),
        "original_length": pa.array(full_len, pa.int32()),
        "supervised": pa.array(used_sup, pa.int32()),
        "supervised_lost": pa.array(supervised - used_sup, pa.int32()),
        "token_hash": pa.array(thash, pa.string()),
    }, schema=SEAM_TABLE_SCHEMA)
    pq.write_table(table, tmp / mf.SEAM_TABLE_NAME, compression="zstd", write_statistics=False)


def _write_rejects(tmp: Path, index: ExampleIndex, files, status) -> int:
    count = 0
    with open(tmp / mf.REJECTS_NAME, "w", encoding="utf-8") as handle:
        for i in np.flatnonzero(status == REJECTED):
            record = {"source": str(files[index.file_index[i]].path), "line": index.line[i], "reason": index.reason[i]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
