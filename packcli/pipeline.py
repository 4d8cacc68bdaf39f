"""The ``pack`` job: read -> render -> tokenize -> spill (units), plan packs, write shards (tasks).

Streaming: records are processed in batches and their tokens appended to the units' spill files on
disk, so memory holds only a per-example index (a few dozen bytes an example), never the corpus.
Packing needs every length before it decides (global BFD), which the index provides; the plan is
made here, and each shard is then a task (`packcli.writing`) that reads its examples from the spills
with `packcli.units.SpillReader` (``pread``, no memory map, so the shuffled reads do not grow RSS
with the corpus). The engine runs both the units and the shard tasks.

Atomic: everything is written into a temporary directory beside ``--out`` and renamed into place
only after the manifest is written; an interrupted run leaves a ``.packcli-tmp-*`` directory that
has no manifest and that ``verify`` refuses.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packcli import manifest as mf
from packcli.chat import Renderer, load_template, require_markers
from packcli.config import Overlong, OnError, PackConfig
from packcli.console import NO_PROGRESS, Progress
from packcli.errors import BudgetError, InputError
from packcli.engine import Engine
from packcli.engine.local import LocalEngine
from packcli.ingest import describe_input, expand_inputs
from packcli.pack import check_budgets, pack_lengths
from packcli.prepare import Preparer
from packcli.shards import file_sha256, shard_name
from packcli.tokenization import IGNORE_INDEX, LoadedTokenizer, load_tokenizer, token_hash
from packcli.units import (DROPPED, PACKED, REJECTED, STATUSES, TRUNCATED, SpillLayout, SpillReader, UnitIndex,
                           UnitJob, UnitSpec, backend_choice, plan_units,
                           register_preparer, warm_tokenizer)
from packcli.writing import ShardTask

SEAM_TABLE_SCHEMA = pa.schema([
    ("example_id", pa.int64()), ("source", pa.string()), ("line", pa.int32()), ("status", pa.string()),
    ("reason", pa.string()), ("shard", pa.string()), ("row", pa.int32()), ("offset", pa.int32()),
    ("length", pa.int32()), ("original_length", pa.int32()), ("supervised", pa.int32()),
    ("supervised_lost", pa.int32()), ("token_hash", pa.string()),
])


@dataclass(frozen=True)
class ExampleIndex:
    """Per-example facts in input order; token ids and labels live in the merged spill."""

    ids: np.ndarray
    file_index: np.ndarray
    line: np.ndarray
    status: np.ndarray
    reason: list[str]
    spill_offset: np.ndarray
    length: np.ndarray
    supervised: np.ndarray
    records_per_file: list[int]

    @classmethod
    def merge(cls, specs: list[UnitSpec], units: list[UnitIndex], num_files: int) -> ExampleIndex:
        """Concatenate the units' indexes; ``spill_offset`` counts tokens over the units in order,
        as `SpillReader` reads them (-1 for a rejected record, which has none)."""
        lengths = np.concatenate([u.lengths for u in units]) if units else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
        file_index = np.concatenate([np.full(len(u.lines), s.file_index, np.int32) for s, u in zip(specs, units)])
        status = np.concatenate([u.status for u in units])
        return cls(
            ids=np.concatenate([u.example_ids for u in units]), file_index=file_index,
            line=np.concatenate([u.lines for u in units]), status=status,
            reason=[r for u in units for r in u.reasons],
            spill_offset=np.where(status == REJECTED, -1, offsets),
            length=lengths, supervised=np.concatenate([u.supervised for u in units]),
            records_per_file=np.bincount(file_index, minlength=num_files).tolist(),
        )


@dataclass(frozen=True)
class PackSummary:
    """What a run produced, for the CLI summary and ``--json``."""

    out: Path
    manifest: dict
    stage_seconds: dict[str, float]
    units: int


def pack_corpus(config: PackConfig, progress: Progress = NO_PROGRESS, engine: Engine | None = None) -> PackSummary:
    """Run the whole ``pack`` job. See the module docstring for the streaming and atomicity design.

    Args:
        config: the validated configuration.
        progress: where to report progress (silent by default).
        engine: runs the tokenization units and the shard writing; the local engine by default.

    Raises:
        PackcliError: bad configuration, inputs, tokenizer or template; a record under
            ``--on-error fail``; an unmet budget. Nothing is left at ``config.out`` in every case.
    """
    engine = engine or LocalEngine()
    # The engine's workers (if any) load the tokenizer while this process does.
    with engine.session(warm=partial(warm_tokenizer, config.tokenizer, config.tokenizer_backend,
                                     config.paranoid_tokenizer)):
        return _pack(config, progress, engine)


def _pack(config: PackConfig, progress: Progress, engine: Engine) -> PackSummary:
    timings: dict[str, float] = {}
    tokenizer = load_tokenizer(config.tokenizer, backend=config.tokenizer_backend, paranoid=config.paranoid_tokenizer)
    template = load_template(config.template, tokenizer.config)
    require_markers(template, config.loss)
    renderer = Renderer(template, config.loss, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token)
    files = [describe_input(p) for p in expand_inputs(config.inputs)]
    out = Path(config.out)
    _check_out(out, config.force)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".packcli-work-{out.name}"  # unit spills; kept after a failure so a re-run resumes
    work.mkdir(exist_ok=True)
    job = UnitJob(tokenizer=config.tokenizer, template=config.template, paranoid_tokenizer=config.paranoid_tokenizer,
                  tokenizer_backend=backend_choice(tokenizer),
                  tokenizer_backend_version=tokenizer.backend_version, loss=config.loss.value,
                  input_format=config.input_format.value, batch_records=config.batch_records,
                  fail_fast=config.on_error is OnError.fail, work_dir=str(work),
                  config_hash=_tokenization_hash(tokenizer, template, config))
    register_preparer(job, Preparer(renderer, tokenizer, config.input_format))
    tmp = Path(tempfile.mkdtemp(prefix=f".packcli-tmp-{out.name}-", dir=out.parent))
    try:
        with progress.running():
            specs = plan_units(files, config.lines_per_unit)
            progress.start("units", "tokenizing", total=len(specs))
            t0 = time.perf_counter()
            units = engine.run(job, specs, lambda spec: progress.advance("units"))
            timings["tokenize_wall_s"] = time.perf_counter() - t0
            for key in ("read_render_s", "tokenize_s"):
                timings[key] = sum(u.seconds.get(key, 0.0) for u in units)
            index = ExampleIndex.merge(specs, units, len(files))
            if not len(index.ids):
                raise InputError("no records found in the inputs (all files empty?)", "check the input paths")
            run_facts = {"tokenization": _tokenization_facts(tokenizer, units)}
            layout = SpillLayout.of(work, specs, [int(u.lengths.sum()) for u in units])
            with SpillReader(layout) as spill:  # here: over-long examples; the shards: the engine's tasks
                manifest = _plan_and_write(index, spill, layout, engine, files, tokenizer, template, config, tmp,
                                           progress, timings, run_facts)
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return PackSummary(out=out, manifest=manifest, stage_seconds=timings, units=len(specs))


def _tokenization_hash(tokenizer: LoadedTokenizer, template, config: PackConfig) -> str:  # noqa: ANN001
    """Everything that decides a unit's tokens: a re-run may reuse units only when this matches.

    The backend is in it although both backends must give the same tokens: after a mismatch the
    advice is to re-run with the reference, and that re-run must not reuse the fast backend's units.
    """
    from packcli import __version__

    key = [__version__, tokenizer.sha256, template.sha256, config.loss.value, config.input_format.value,
           config.on_error.value, config.lines_per_unit, tokenizer.backend_name, tokenizer.backend_version]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def _tokenization_facts(tokenizer: LoadedTokenizer, units: list[UnitIndex]) -> dict:
    """Which backend encoded the run and what its exactness guard checked (summed over units).

    This goes to the manifest's unhashed part: the backend is a fact about the run, not the data
    (both backends give identical bytes, and the hash stays the same across them).
    """
    guard = {key: sum(u.guard.get(key, 0) for u in units) for key in tokenizer.guard_counts()}
    facts = {"backend": tokenizer.backend_name, "version": tokenizer.backend_version,
             "reason": tokenizer.backend_reason, "paranoid": tokenizer.paranoid, "guard": guard}
    if guard["offset_mismatches"]:
        facts["note"] = ("offsets differed from tokenizers on a checked example, so tokenizers encoded the rest "
                         "of that unit (and of its process)")
    return facts


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


def _plan_and_write(index: ExampleIndex, spill: SpillReader, layout: SpillLayout, engine: Engine, files, tokenizer,
                    template, config: PackConfig, tmp: Path, progress: Progress, timings: dict[str, float],
                    run_facts: dict) -> dict:
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
            kept = int(np.count_nonzero(spill.read(offsets[i], config.capacity)[1] != IGNORE_INDEX))
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
    shard_of = np.full(n, -1, dtype=np.int32)
    row_col = np.full(n, -1, dtype=np.int32)
    off_col = np.full(n, -1, dtype=np.int32)
    thash = [""] * n
    num_shards = -(-plan.num_packs // config.packs_per_shard)
    tasks, task_rows = [], []
    for k in range(num_shards):
        p0, p1 = k * config.packs_per_shard, min((k + 1) * config.packs_per_shard, plan.num_packs)
        rows = ordered[plan.pack_offsets[p0]:plan.pack_offsets[p1]]
        lens = used_len[rows]
        tasks.append(ShardTask(k, str(tmp / shard_name(k)), offsets[rows], lens, ex_per_pack[p0:p1], ids_arr[rows]))
        task_rows.append(rows)
        local = np.concatenate([[0], np.cumsum(lens)])
        pack_rows = np.repeat(np.arange(p1 - p0, dtype=np.int32), ex_per_pack[p0:p1])
        shard_of[rows] = k
        row_col[rows] = pack_rows
        off_col[rows] = local[:-1] - local[plan.pack_offsets[p0:p1] - plan.pack_offsets[p0]][pack_rows]
    progress.start("write", "writing shards", total=num_shards)
    results = engine.write_shards(layout, tasks, lambda task: progress.advance("write"))
    for rows, result in zip(task_rows, results):
        for r, h in zip(rows.tolist(), result.token_hashes):
            thash[r] = h
    shards = [result.info for result in results]
    for i in np.flatnonzero(status == DROPPED).tolist():
        thash[i] = token_hash(spill.read(offsets[i], full_len[i])[0])
    shard_col = [shard_name(k) if k >= 0 else None for k in shard_of.tolist()]
    _write_seam_table(tmp, index, files, status, reasons, shard_col, row_col, off_col, used_len, full_len,
                      used_sup, supervised, thash)
    rejects = _write_rejects(tmp, index, files, status)
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
    manifest = mf.finalize(manifest, run_facts)
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
            record = {"source": str(files[index.file_index[i]].path), "line": int(index.line[i]), "reason": index.reason[i]}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
