"""Reconstruction: re-derive every example from its source record and compare it with its pack span.

Re-reads every source the manifest pins (JSONL, Parquet, ``datasets`` tables), runs every record
through the same `Preparer` as ``pack`` (always the reference tokenizer, ``tokenizers``; the pinned
column mapping), and demands that each record has seam-table rows (one per copy) whose fate it
reproduces: the same tokens and labels in the pack, the same over-long length when dropped, the
same reason when rejected. Under ``--dedupe exact`` it recomputes every record's content key and
checks that exactly the records whose content an earlier record has are marked ``duplicate``, each
naming that first record.

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
from packcli.ingest import HUB_PREFIX, FieldMap, Source, describe_input, source_of
from packcli.job.select import duplicate_reason
from packcli.job.units import UnitSpec, iter_unit_lines, plan_units
from packcli.prepare import Preparer, preparer_for, share_preparer
from packcli.progress import NO_PROGRESS, Progress
from packcli.tokenizer.load import LoadedTokenizer, cached_tokenizer
from packcli.verify.locate import find_source
from packcli.verify.report import CheckResult, Violation

BATCH = 2048  # lines per Preparer call
UNIT_LINES = 8192  # lines per unit of parallel work
PARALLEL_MIN_RECORDS = 2 * UNIT_LINES  # below this, starting worker processes costs more than it saves
# A record's outcome: the rejection reason, or (tokens, digest of the kept ids, digest of the kept labels); and
# the format the record was read as ("" when it was not recognised).
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
    fields: tuple[tuple[str, str], ...]  # the pinned column mapping (`FieldMap.renames` items)
    keys: bool  # compute content keys (the artifact was deduplicated)
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
        return Preparer(renderer, tok, Format(self.input_format), FieldMap.of(dict(self.fields)), keys=self.keys)


def locate_input(manifest: dict, k: int, source_root: Path | None) -> Source:
    """Input ``k`` of a manifest, found where verify runs (`packcli.verify.locate.find_source`; a
    ``hf:`` name from the local cache).

    Raises:
        InputError: it is not there (or, for ``hf:``, not in the local cache).
    """
    pinned = manifest["inputs"][k]
    if pinned["name"].startswith(HUB_PREFIX):
        from packcli.ingest.hf import hub_source

        return hub_source(pinned["name"])
    path = find_source(manifest, k, source_root)
    if path is None or not path.exists():
        raise InputError(f"source {path or pinned['name']}: no such file (input {k} of the manifest, "
                         f"{pinned['name']}, sha256 {pinned['sha256'][:16]})",
                         "run verify from the directory pack ran in, or pass --source-root (searched by name)")
    return source_of(path)


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
                         input_format=config["input_format"], fields=tuple(sorted(config["fields"].items())),
                         keys=config["dedupe"] == "exact", bos_token=manifest["tokenizer"]["bos_token"],
                         eos_token=manifest["tokenizer"]["eos_token"], capacity=config["capacity"])
    preparer = job.build_preparer(tokenizer)
    rows = seam.to_pydict()
    by_line: dict[tuple[int, int], list[int]] = {}  # a record's rows: one per copy
    for i, key in enumerate(zip(rows["input"], rows["line"])):
        by_line.setdefault(key, []).append(i)
    files, kept = [], []  # the sources found unchanged, and their index in the manifest's inputs
    for k, pinned in enumerate(manifest["inputs"]):
        source = locate_input(manifest, k, source_root)
        described = describe_input(source)
        if described.sha256 != pinned["sha256"]:
            result.fail(Violation(f"source file changed since packing (sha256 differs): {source.path}",
                                  source=pinned["name"]))
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

    first: dict[bytes, str] = {}  # each content key's first record, as a duplicate's reason names it
    for spec, outcomes in zip(specs, _outcomes(job, preparer, specs, workers, advance)):
        k = kept[spec.file_index]
        source = manifest["inputs"][k]["name"]
        differing: dict[int, list[tuple]] = {}
        for line, key, outcome in outcomes:
            result.checked += 1
            found = by_line.pop((k, line), None)
            if found is None:
                result.fail(Violation("record has no seam-table row (dropped without a record)", source=source,
                                      line=line))
                continue
            _check_duplicate(rows, found, key, first, duplicate_reason(source, line, k), job.keys, result, source)
            for i in found:
                if (span := compare(i, outcome, source, line)) is not None:
                    differing.setdefault(line, []).append(span)
        if differing:
            compare.explain(spec, differing)
    names = [pinned["name"] for pinned in manifest["inputs"]]
    for (k, line) in by_line:
        source = names[k] if 0 <= k < len(names) else f"input {k}"
        result.fail(Violation("seam table names a line that is not a record in the source", source=source, line=line))


def _check_duplicate(rows: dict, found: list[int], key: bytes | None, first: dict[bytes, str], reason: str,
                     dedupe: bool, result: CheckResult, source: str) -> None:
    """A record is ``duplicate`` exactly when the run deduplicated and an earlier record has its content
    key; then it has one row, whose reason names that earlier record (``reason``: how a later duplicate
    of this record would name it)."""
    expected = first.get(key) if dedupe and key is not None else None
    if dedupe and key is not None and expected is None:
        first[key] = reason
    statuses = [rows["status"][i] for i in found]
    loc = dict(example_id=rows["example_id"][found[0]], source=source, line=rows["line"][found[0]])
    if expected is None and "duplicate" in statuses:
        why = "no earlier record has its content" if dedupe else "the run did not deduplicate (--dedupe none)"
        result.fail(Violation(f"marked duplicate, but {why}", **loc))
    elif expected is not None and (statuses != ["duplicate"] or rows["reason"][found[0]] != expected):
        result.fail(Violation(f"{expected}, but the seam table says {statuses} {rows['reason'][found[0]]!r}", **loc))


def _outcomes(job: ReconstructJob, preparer: Preparer, specs: list[UnitSpec], workers: int | None,
              on_done: Callable[[UnitSpec, list], None]) -> list[list[tuple[int, bytes | None, Outcome]]]:
    """Each unit's outcomes, in unit order: here, or here and in worker processes (`SharedPool`)."""
    count = max(1, min(workers or usable_cpus(), len(specs)))
    share_preparer(job, preparer)  # this process is a worker too, with the tokenizer it has loaded
    try:
        with SharedPool(count) as pool:
            return pool.map(unit_outcomes, job, specs, on_done)
    finally:
        share_preparer(job, None)


def unit_outcomes(job: ReconstructJob, spec: UnitSpec) -> list[tuple[int, bytes | None, Outcome]]:
    """Re-tokenize one unit's records; per record its number, content key (None unless the job
    deduplicates or where it did not parse) and `Outcome` (small: digests, not tokens)."""
    preparer = preparer_for(job)
    out: list[tuple[int, bytes | None, Outcome]] = []
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
        keys = prepared.keys or [None] * len(batch)
        for (_, line, _), key, enc, fmt in zip(batch, keys, prepared, prepared.formats):
            if isinstance(enc, str):
                out.append((line, key, (fmt, enc)))
            else:
                keep = min(len(enc.input_ids), job.capacity)
                digests = token_hash(enc.input_ids[:keep]), token_hash(enc.labels[:keep])
                out.append((line, key, (fmt, (len(enc.input_ids), *digests))))
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
        if status == "duplicate" and isinstance(outcome, str):
            return None  # its first record fails the same way; the duplicate itself is checked by its key
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
        elif status in ("duplicate", "unsampled"):
            if rows["original_length"][i] != n or rows["length"][i] != 0:
                result.fail(Violation(f"{status} with {rows['original_length'][i]} tokens and {rows['length'][i]} "
                                      f"in a pack, but it has {n} and is in none", **loc))
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

    def explain(self, spec: UnitSpec, differing: dict[int, list[tuple]]) -> None:
        """Re-tokenize the unit's differing records here (one pass over it) and name the first differing
        token of each of their rows (copies); past the violation limit only count them."""
        room = max(0, self.result.limit - len(self.result.violations))
        wanted = dict(list(differing.items())[:room])
        batch = [(spec.file_index, line, raw) for line, raw in iter_unit_lines(spec) if line in wanted]
        for (_, line, _), fresh in zip(batch, self.preparer.prepare(batch, source=spec.path) if batch else []):
            for ids, labels, shard, row, loc in wanted[line]:
                if isinstance(fresh, str):
                    self.result.fail(Violation(f"tokenizes in a worker process, rejected here ({fresh!r})", **loc))
                    continue
                keep = len(ids)
                before = self.result.count
                _diff(ids, fresh.input_ids[:keep], "tokens", shard, row, loc, self.result)
                _diff(labels, fresh.labels[:keep], "labels", shard, row, loc, self.result)
                if self.result.count == before:  # the worker's digest and this process disagree
                    self.result.fail(Violation("a worker process tokenized it differently from this one", **loc))
        for spans in list(differing.values())[room:]:
            for _, _, shard, row, loc in spans:
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
