"""Reconstruction: re-derive every example from its source line and compare it with its pack span.

Re-reads every source file the manifest pins, runs every non-blank line through the same
`Preparer` as ``pack`` (always the reference tokenizer, ``tokenizers``), and demands that each line
has exactly one seam-table row whose fate it reproduces: the same tokens and labels in the pack,
the same over-long length when dropped, the same reason when rejected.

Parallel: the sources are split into units of lines (`packcli.job.units.plan_units`), and with
``workers > 1`` each unit is re-tokenized in a worker process that sends back, per line, only the
outcome's digest (`Outcome`), never the tokens; this process digests the pack spans and compares.
Parsing and rendering are single-threaded Python, so processes are what spreads them over cores
(the tokenizer alone already uses every core). Lines whose digests differ are re-tokenized here,
one pass over their unit, to report the first differing token (up to the violation limit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa

from packcli.artifact.shards import FlatShard
from packcli.chat import DEFAULT_TEMPLATE_DATE, ChatTemplate, Renderer
from packcli.choices import BackendChoice, Format, LossPolicy
from packcli.contract import token_hash
from packcli.engine.pool import SharedPool, usable_cpus
from packcli.errors import InputError
from packcli.ingest import describe_input
from packcli.job.units import UnitSpec, iter_unit_lines, plan_units
from packcli.prepare import Preparer, preparer_for, share_preparer
from packcli.progress import NO_PROGRESS, Progress
from packcli.tokenizer.load import LoadedTokenizer, cached_tokenizer
from packcli.verify.locate import find_source
from packcli.verify.report import CheckResult, Violation

BATCH = 2048  # lines per Preparer call
UNIT_LINES = 8192  # lines per unit of parallel work
PARALLEL_MIN_RECORDS = 2 * UNIT_LINES  # below this, starting worker processes costs more than it saves
# A line's outcome: the rejection reason, or (tokens, digest of the kept ids, digest of the kept labels); and
# the format the line was read as ("" when it was not recognised).
Outcome = tuple[str, str | tuple[int, str, str]]


@dataclass(frozen=True)
class ReconstructJob:
    """What a worker needs to rebuild the preparer (picklable): the pinned tokenizer, template, policy."""

    tokenizer: str
    tokenizer_sha256: str
    template_text: str
    template_source: str
    template_date: str
    loss: str
    input_format: str
    bos_token: str | None
    eos_token: str | None
    capacity: int

    def build_preparer(self, tokenizer: LoadedTokenizer | None = None) -> Preparer:
        """The reference tokenizer (always: a fast-path fault cannot verify itself), template, renderer."""
        tok = tokenizer or cached_tokenizer(self.tokenizer, backend=BackendChoice.tokenizers)
        if tok.sha256 != self.tokenizer_sha256:
            raise InputError(f"tokenizer {self.tokenizer} changed while verify ran", "run verify again")
        renderer = Renderer(ChatTemplate(self.template_text, self.template_source), LossPolicy(self.loss),
                            bos_token=self.bos_token, eos_token=self.eos_token,
                            template_date=date.fromisoformat(self.template_date))
        return Preparer(renderer, tok, Format(self.input_format))


def check_reconstruction(manifest: dict, seam: pa.Table, shards: dict[str, FlatShard], tokenizer: LoadedTokenizer,
                         template_text: str, result: CheckResult, *, source_root: Path | None,
                         progress: Progress = NO_PROGRESS, workers: int | None = None) -> None:
    """Compare every source line's fresh tokenization with the artifact; record violations in ``result``.

    Args:
        workers: processes that re-tokenize (None: one per CPU, for artifacts of at least
            `PARALLEL_MIN_RECORDS` records in more than one unit of work; else this process alone).
    """
    config = manifest["config"]
    job = ReconstructJob(tokenizer=tokenizer.source, tokenizer_sha256=tokenizer.sha256, template_text=template_text,
                         template_source=manifest["template"]["origin"], loss=manifest["loss_policy"],
                         template_date=config.get("template_date", DEFAULT_TEMPLATE_DATE.isoformat()),
                         input_format=config["input_format"], bos_token=manifest["tokenizer"]["bos_token"],
                         eos_token=manifest["tokenizer"]["eos_token"], capacity=config["capacity"])
    preparer = job.build_preparer(tokenizer)
    rows = seam.to_pydict()
    by_line = {(rows["input"][i], rows["line"][i]): i for i in range(len(rows["example_id"]))}
    files, kept = [], []  # the sources found unchanged, and their index in the manifest's inputs
    for k, pinned in enumerate(manifest["inputs"]):
        path = find_source(manifest, k, source_root)
        if path is None or not path.is_file():
            raise InputError(f"source {path or pinned['name']}: no such file (input {k} of the manifest, "
                             f"{pinned['name']}, sha256 {pinned['sha256'][:16]})",
                             "run verify from the directory pack ran in, or pass --source-root (searched by name)")
        described = describe_input(path)
        if described.sha256 != pinned["sha256"]:
            result.fail(Violation(f"source file changed since packing (sha256 differs): {path}", source=pinned["name"]))
            continue
        files.append(described)
        kept.append(k)
    specs = plan_units(files, UNIT_LINES)
    progress.start("reconstruct", "reconstructing", total=manifest["counts"]["records"])
    compare = _Comparer(preparer, rows, shards, config["capacity"], result)
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    if workers is None and manifest["counts"]["records"] < PARALLEL_MIN_RECORDS:
        workers = 1
    def advance(spec: UnitSpec, outcomes: list) -> None:
        progress.advance("reconstruct", len(outcomes))

    for spec, outcomes in zip(specs, _outcomes(job, preparer, specs, workers, advance)):
        k = kept[spec.file_index]
        source = manifest["inputs"][k]["name"]
        differing: dict[int, tuple] = {}
        for line, outcome in outcomes:
            result.checked += 1
            i = by_line.pop((k, line), None)
            if i is None:
                result.fail(Violation("record has no seam-table row (dropped without a record)", source=source,
                                      line=line))
            elif (span := compare(i, outcome, source, line)) is not None:
                differing[line] = span
        if differing:
            compare.explain(spec, differing)
    names = [pinned["name"] for pinned in manifest["inputs"]]
    for (k, line) in by_line:
        source = names[k] if 0 <= k < len(names) else f"input {k}"
        result.fail(Violation("seam table names a line that is not a record in the source", source=source, line=line))


def _outcomes(job: ReconstructJob, preparer: Preparer, specs: list[UnitSpec], workers: int | None,
              on_done: Callable[[UnitSpec, list[tuple[int, Outcome]]], None]) -> list[list[tuple[int, Outcome]]]:
    """Each unit's outcomes, in unit order: here, or here and in worker processes (`SharedPool`)."""
    count = max(1, min(workers or usable_cpus(), len(specs)))
    share_preparer(job, preparer)  # this process is a worker too, with the tokenizer it has loaded
    try:
        with SharedPool(count) as pool:
            return pool.map(unit_outcomes, job, specs, on_done)
    finally:
        share_preparer(job, None)


def unit_outcomes(job: ReconstructJob, spec: UnitSpec) -> list[tuple[int, Outcome]]:
    """Re-tokenize one unit's lines; per line its `Outcome` (small: digests, not tokens)."""
    preparer = preparer_for(job)
    out: list[tuple[int, Outcome]] = []
    batch: list[tuple[int, int, bytes]] = []
    lines = iter_unit_lines(spec)
    while True:
        for line, raw in lines:
            batch.append((spec.file_index, line, raw))
            if len(batch) == BATCH:
                break
        if not batch:
            return out
        prepared = preparer.prepare(batch, source=spec.path)
        for (_, line, _), enc, fmt in zip(batch, prepared, prepared.formats):
            if isinstance(enc, str):
                out.append((line, (fmt, enc)))
            else:
                keep = min(len(enc.input_ids), job.capacity)
                digests = token_hash(enc.input_ids[:keep]), token_hash(enc.labels[:keep])
                out.append((line, (fmt, (len(enc.input_ids), *digests))))
        batch = []


class _Comparer:
    """Checks each line's outcome against its seam-table row and pack span; explains digest mismatches."""

    def __init__(self, preparer: Preparer, rows: dict, shards: dict[str, FlatShard], capacity: int,
                 result: CheckResult) -> None:
        self.preparer, self.rows, self.shards, self.capacity, self.result = preparer, rows, shards, capacity, result

    def __call__(self, i: int, outcome: Outcome, source: str, line: int) -> tuple | None:
        """Record what is wrong with row ``i``; return its pack span when only the digests differ."""
        rows, result = self.rows, self.result
        status = rows["status"][i]
        loc = dict(example_id=rows["example_id"][i], source=source, line=line)
        fmt, outcome = outcome
        if (rows["format"][i] or "") != fmt:
            result.fail(Violation(f"read as format {fmt or 'none'!r} now; the seam table says "
                                  f"{rows['format'][i]!r}", **loc))
        if isinstance(outcome, str):
            if status != "rejected" or rows["reason"][i] != outcome:
                result.fail(Violation(f"re-running gives rejection {outcome!r}; the seam table says {status} "
                                      f"{rows['reason'][i]!r}", **loc))
            return None
        n, ids_digest, labels_digest = outcome
        if status == "rejected":
            result.fail(Violation("record tokenizes now but the seam table says rejected", **loc))
        elif status == "dropped":
            if n <= self.capacity or rows["original_length"][i] != n:
                result.fail(Violation(f"dropped as over-long, but it has {n} tokens (capacity {self.capacity})", **loc))
        elif status == "truncated" and (n <= self.capacity or rows["length"][i] != self.capacity):
            result.fail(Violation(f"truncated to {rows['length'][i]} tokens, but it has {n} (capacity "
                                  f"{self.capacity})", **loc))
        elif status == "packed" and rows["length"][i] != n:
            result.fail(Violation(f"packed with {rows['length'][i]} tokens, but it has {n}", **loc))
        elif (shard := self.shards.get(rows["shard"][i])) is None:
            result.fail(Violation(f"its shard {rows['shard'][i]} is unreadable", **loc))
        else:
            a = shard.row_offsets[rows["row"][i]] + rows["offset"][i]
            ids, labels = shard.ids[a:a + rows["length"][i]], shard.labels[a:a + rows["length"][i]]
            if token_hash(ids) != ids_digest or token_hash(labels) != labels_digest:
                return ids, labels, shard, rows["row"][i], loc
        return None

    def explain(self, spec: UnitSpec, differing: dict[int, tuple]) -> None:
        """Re-tokenize the unit's differing lines here (one pass over it) and name the first differing
        token of each; past the violation limit only count them."""
        room = max(0, self.result.limit - len(self.result.violations))
        wanted = dict(list(differing.items())[:room])
        batch = [(spec.file_index, line, raw) for line, raw in iter_unit_lines(spec) if line in wanted]
        for (_, line, _), fresh in zip(batch, self.preparer.prepare(batch, source=spec.path) if batch else []):
            ids, labels, shard, row, loc = wanted[line]
            if isinstance(fresh, str):
                self.result.fail(Violation(f"tokenizes in a worker process, rejected here ({fresh!r})", **loc))
                continue
            keep = len(ids)
            before = self.result.count
            _diff(ids, fresh.input_ids[:keep], "tokens", shard, row, loc, self.result)
            _diff(labels, fresh.labels[:keep], "labels", shard, row, loc, self.result)
            if self.result.count == before:  # the worker's digest and this process disagree
                self.result.fail(Violation("a worker process tokenized it differently from this one", **loc))
        for line, (_, _, shard, row, loc) in list(differing.items())[room:]:
            self.result.fail(Violation("tokens or labels differ from a fresh tokenization", shard=shard.name,
                                       row=row, **loc))


def _diff(got: np.ndarray, want: np.ndarray, what: str, shard: FlatShard, row: int, loc: dict,
          result: CheckResult) -> None:
    if len(got) == len(want) and np.array_equal(got, want):
        return
    differ = np.flatnonzero(got[:min(len(got), len(want))] != want[:min(len(got), len(want))])
    at = int(differ[0]) if len(differ) else min(len(got), len(want))
    result.fail(Violation(f"{what} differ from a fresh tokenization at position {at} "
                          f"(pack {got[at:at + 3].tolist()}, fresh {want[at:at + 3].tolist()}; "
                          f"lengths {len(got)} vs {len(want)})", shard=shard.name, row=row, **loc))
