"""Reconstruction: re-derive every example from its source record and compare it with its pack span.

Re-reads every source the manifest pins (JSONL, Parquet, ``datasets`` tables: their name, size and
sha256, and as many records as ``inputs[].records`` says), runs every record through the same `Preparer` as
``pack`` (always the reference tokenizer, ``tokenizers``; the pinned column mapping), and demands
that each record has seam-table rows (one per copy a mixture made of it) that it reproduces: its
``format``, ``original_length``, the tokens and labels in its pack span (the whole example, or its
first ``capacity`` tokens when truncated), a dropped, duplicate or unsampled example's
``token_hash``, a rejected record's reason. Under ``--dedupe exact`` it recomputes every record's
content key and checks that exactly the records whose content an earlier record has are marked
``duplicate``, each naming that first record. What it re-derives per record (length, supervised
tokens, supervised tokens in the first ``capacity``) is returned as `Reconstructed`, from which the
plan check re-decides every fate and re-runs the planner (`packcli.verify.replan`).

Parallel: the sources are split into units of lines (`packcli.job.units.plan_units`), and with
``workers > 1`` each unit is re-tokenized in a worker process that sends back, per record, only the
outcome's digest (`Outcome`), never the tokens; this process digests the pack spans and compares.
Parsing and rendering are single-threaded Python, so processes are what spreads them over cores
(the tokenizer alone already uses every core). Records whose digests differ are re-tokenized here,
one pass over their unit, to report the first differing token (up to the violation limit).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from packcli.artifact.manifest import Manifest
from packcli.checks import raise_all
from packcli.choices import AddToken, DroppableField, Format, LossPolicy, Overlong
from packcli.contract import IGNORE_INDEX, token_hash
from packcli.engine import Engine, worker_problems
from packcli.engine.local import LocalEngine
from packcli.engine.pool import auto_processes, usable_cpus
from packcli.errors import InputError
from packcli.ingest import FieldMap, describe_input
from packcli.job.chunks import Cut, SplitRule, chunk_labels, cut_example, pinned_rule
from packcli.job.pause import pause_at
from packcli.job.scratch import IN_MEMORY, Scratch, blocks
from packcli.job.select import duplicate_reason
from packcli.job.units import UnitSpec, iter_unit_lines, plan_units, unit_batches
from packcli.prepare import Preparer, PrepareSpec, TokenizerRef, preparer_for, share_preparer
from packcli.progress import NO_PROGRESS, Progress
from packcli.tokenizer.load import LoadedTokenizer
from packcli.verify.locate import locate_input
from packcli.verify.packs import PackIndex
from packcli.verify.report import CheckResult, Violation
from packcli.verify.seen import KEY, FirstSeen

BATCH = 2048  # lines per Preparer call
UNIT_LINES = 8192  # lines per unit of parallel work


class Fresh(NamedTuple):
    """A record's fresh tokenization, small enough to send between processes: counts and digests
    (`packcli.contract.token_hash`) of the whole example and, when it is over-long under ``truncate`` or
    ``split``, its cut (`packcli.job.chunks.Cut`) and the digests of each chunk's tokens and labels as a
    pack holds them (truncation keeps chunk 0)."""

    length: int
    supervised: int
    ids: str
    labels: str
    cut: Cut | None = None
    chunks: tuple[tuple[str, str], ...] = ()
    dropped: tuple[str, ...] = ()  # the fields the template dropped, as --allow-dropped-fields allows


# A line's outcome: the format it was read as ("" when not recognised), and its rejection reason or its
# fresh tokenization.
Outcome = tuple[str, str | Fresh]


@dataclass(frozen=True)
class Reconstructed:
    """Per seam-table row, what a fresh tokenization of its line gives (-1 where no line gave one):
    its tokens, supervised tokens, and (``cuts``, by row) the cut of an over-long one under ``truncate``
    or ``split``; ``rejection`` is the reason re-parsing rejects it, or None (`Rejections`: kept for the
    rejected rows alone, as ``cuts`` for the over-long ones)."""

    length: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    cuts: dict[int, Cut]
    rejection: Rejections


class Rejections(dict):
    """Per row, the reason re-parsing rejects it: held for the rejected rows, None for every other (a list a row
    would hold a pointer an example, most of them to None)."""

    def __missing__(self, row: int) -> None:
        return None


@dataclass(frozen=True)
class ReconstructJob:
    """What a worker needs to rebuild the preparer (picklable): the pinned tokenizer, template, policy."""

    spec: PrepareSpec  # the reference tokenizer (always: a fast-path fault cannot verify itself), template, policies
    rule: SplitRule  # how over-long examples are cut (`packcli.job.chunks.pinned_rule`)
    overlong: str  # the pinned policy: under truncate or split each over-long fresh example's cut is sent back

    @classmethod
    def of(cls, manifest: Manifest, tokenizer: str, template_text: str) -> ReconstructJob:
        """The job a manifest pins, with the tokenizer found at ``tokenizer``."""
        config, pinned = manifest.config, manifest.tokenizer
        spec = PrepareSpec(TokenizerRef.reference(tokenizer, pinned.sha256), template_text=template_text,
                           template_source=manifest.template.origin, template_date=config.template_date,
                           loss=manifest.loss_policy, input_format=config.input_format,
                           fields=tuple(sorted(config.fields.items())), keys=config.dedupe == "exact",
                           text_bos=config.text_bos, text_eos=config.text_eos,
                           allow_dropped=tuple(config.allow_dropped_fields or ()),
                           ends=(pinned.bos_token, pinned.eos_token))
        return cls(spec, rule=pinned_rule(config), overlong=config.overlong)

    def build_preparer(self, tokenizer: LoadedTokenizer | None = None) -> Preparer:
        """The preparer the spec describes (``tokenizer``: this process's, already loaded)."""
        return self.spec.build_preparer("verify", tokenizer)


def check_reconstruction(manifest: Manifest, rows: dict[str, list], packs: PackIndex,
                         tokenizer: LoadedTokenizer, template_text: str, result: CheckResult, *,
                         source_root: Path | None, progress: Progress = NO_PROGRESS,
                         workers: int | None = None, engine: Engine | None = None,
                         scratch: Scratch = IN_MEMORY) -> Reconstructed:
    """Compare every source record's fresh tokenization with the artifact; record violations in ``result``.

    Args:
        rows: the seam table's columns (`packcli.verify.columns.SeamColumns`; each reads as a list).
        packs: the packs' segments and digests, as integrity read them.
        workers: processes that re-tokenize (None: one per CPU, at most one per unit of work and per
            `packcli.engine.pool.MIN_BYTES_PER_PROCESS` of sources: a small artifact is checked here alone).
        engine: re-tokenize the units on this engine's workers instead (`packcli.engine.ray.RayEngine`:
            a cluster); the comparison stays here, so the report is the same.
        scratch: where the per-row facts and the record index live (`packcli.job.scratch`).

    Returns:
        What each seam-table row's record reproduces, for the plan check.
    """
    raise_all(worker_problems(workers), error=InputError)
    config = manifest.config
    n = len(rows["example_id"])
    facts = Reconstructed(scratch.full(n, -1, np.int64), scratch.full(n, -1, np.int64), {}, Rejections())
    problems = []
    if config.input_format not in {f.value for f in Format}:
        problems.append(("config.input_format", f"config.input_format {config.input_format!r} is not a format"))
    if manifest.loss_policy not in {p.value for p in LossPolicy}:
        problems.append(("loss_policy", f"loss_policy {manifest.loss_policy!r} is not a loss policy"))
    for key in ("text_bos", "text_eos"):
        if getattr(config, key) not in {a.value for a in AddToken}:
            problems.append((f"config.{key}", f"config.{key} {getattr(config, key)!r} is not one of auto, yes, no"))
    if config.dedupe not in ("none", "exact"):
        problems.append(("config.dedupe", f"config.dedupe {config.dedupe!r} is not none or exact"))
    problems += _dropped_problems(manifest)
    try:
        date.fromisoformat(config.template_date)
    except ValueError:
        problems.append(("config.template_date", f"config.template_date {config.template_date!r} is not a date"))
    try:
        mapping = FieldMap.of(config.fields).problems()
    except TypeError:
        mapping = [f"names a part packcli does not have ({', '.join(sorted(config.fields))})"]
    problems += [("config.fields", f"config.fields {problem}") for problem in mapping]
    for field, message in problems:
        result.fail(Violation(message + ": nothing can be read and rendered as pack did", field=field))
    if problems:
        return facts
    job = ReconstructJob.of(manifest, tokenizer.source, template_text)
    preparer = job.build_preparer(tokenizer)
    by_record = RecordRows(rows, scratch)  # a record's rows: one per copy (and chunk)
    files, pinned = [], []  # the sources found unchanged, with their index in the manifest's inputs
    for k, entry in enumerate(manifest.inputs):
        source = locate_input(manifest, k, source_root)
        if source.name != entry.name:  # the name orders the inputs and names every record: proved, not trusted
            result.fail(Violation(f"inputs[{k}].name is {entry.name!r}, but the source is {source.name} "
                                  f"({source.path})", source=entry.name, field=f"inputs[{k}].name"))
        described = describe_input(source)
        if described.kind.value != entry.kind:
            result.fail(Violation(f"{source.path} reads as a {described.kind.value} source, inputs[{k}].kind says "
                                  f"{entry.kind}", source=entry.name, field=f"inputs[{k}].kind"))
        if described.size != entry.size:
            result.fail(Violation(f"{source.path} has {described.size} bytes, inputs[{k}].size says {entry.size}",
                                  source=entry.name, field=f"inputs[{k}].size"))
        if described.sha256 != entry.sha256:
            result.fail(Violation(f"source changed since packing: {source.path} does not hash to inputs[{k}].sha256",
                                  source=entry.name, field=f"inputs[{k}].sha256"))
            continue
        files.append(described)
        pinned.append((k, entry))
    specs = plan_units(files, UNIT_LINES)
    progress.start("reconstruct", "reconstructing", total=manifest.counts["records"])
    compare = _Comparer(preparer, rows, packs, job.rule, result, facts)
    if workers is None:
        workers = auto_processes(usable_cpus(), units=len(specs), input_bytes=sum(f.size for f in files))

    read = [0] * len(pinned)
    seen = FirstSeen() if job.spec.keys else None  # each content key's first record, as a duplicate's reason names it
    dropped: Counter[str] = Counter()  # records made into examples whose template dropped an allowed field

    def compare_unit(spec: UnitSpec, outcomes: list) -> None:
        k, entry = pinned[spec.file_index]
        read[spec.file_index] += len(outcomes)
        differing: dict[int, list[tuple]] = {}
        rows_of = [by_record.pop((k, line)) for line, _, _ in outcomes]
        duplicate_of = _first_records(seen, outcomes, rows_of, k, manifest)
        for (line, _, outcome), found, earlier in zip(outcomes, rows_of, duplicate_of):
            result.checked += 1
            if not isinstance(outcome[1], str):
                dropped.update(outcome[1].dropped)
            if found is None:
                result.fail(Violation("record has no seam-table row (dropped without a record)", source=entry.name,
                                      line=line))
                continue
            _check_duplicate(rows, found, earlier, job.spec.keys, result, entry.name)
            chunked = _chunked_rows(rows, found)
            for i in found:
                if (span := compare(i, outcome, entry.name, line, i in chunked)) is not None:
                    differing.setdefault(line, []).append(span)
        if differing:
            unexplained.append((spec, differing))
        scratch.release()  # the unit's rows, facts and digests: the next unit reads its own

    # Units are compared in unit order as they come back (the report is the same however many workers
    # ran them) and let go: only the few finished ahead of their turn wait here, never every outcome.
    # The rare differences are explained at the end, here: explaining re-renders, and the template
    # renders one record at a time in this process, where this process's own units may be rendering.
    unexplained: list[tuple[UnitSpec, dict[int, list[tuple]]]] = []
    waiting: dict[int, tuple[UnitSpec, list]] = {}
    turn, lock = [0], threading.Lock()

    def done(spec: UnitSpec, outcomes: list) -> None:
        progress.advance("reconstruct", len(outcomes))
        with lock:
            waiting[spec.index] = (spec, outcomes)
            while turn[0] in waiting:
                compare_unit(*waiting.pop(turn[0]))
                turn[0] += 1

    _outcomes(job, preparer, specs, workers, done, engine)
    for spec, differing in unexplained:
        compare.explain(spec, differing)
    for (k, entry), count in zip(pinned, read):
        if count != entry.records:
            result.fail(Violation(f"{count} records read from the source, inputs[{k}].records says {entry.records}",
                                  source=entry.name, field=f"inputs[{k}].records"))
    if len(pinned) == len(manifest.inputs):  # every source read: the count is whole
        _check_dropped(manifest, dropped, result)
    read_inputs = {k for k, _ in pinned}
    for (k, line) in by_record.left():
        if k in read_inputs:
            result.fail(Violation("seam table names a line that is not a record in the source",
                                  source=manifest.inputs[k].name, line=line, field="line"))
    return facts


class RecordRows:
    """Each record's seam-table rows, by (input, line), as two sorted arrays (not a Python list a record):
    `pop` hands a record's rows over once, `left` names the records never handed over."""

    def __init__(self, rows: Mapping[str, Sequence], scratch: Scratch = IN_MEMORY) -> None:
        index, line = np.asarray(rows["input"]), np.asarray(rows["line"])
        n = len(index)
        keys = scratch.empty(n, np.int64)
        ordered, last = True, None
        for block in blocks(n, scratch):  # a block's casts, not the table's
            part = keys[block]
            part[...] = _record_keys(index[block].astype(np.int64), line[block].astype(np.int64))
            if len(part):
                ordered &= bool((last is None or last <= part[0]) and (part[1:] >= part[:-1]).all())
                last = int(part[-1])
        if ordered:  # as pack writes the table (by input, then line): the order is the rows' own
            self.order, self.keys = scratch.arange(n), keys
        else:  # another order (a forged table): sorted in memory, then kept
            self.order = scratch.keep(np.argsort(keys, kind="stable"))  # a record's rows in table order
            self.keys = scratch.take(keys, self.order)
        self.taken = scratch.zeros(n, bool)

    def pop(self, key: tuple[int, int]) -> list[int] | None:
        """The rows of record ``key`` (input, line), in table order; None when it has none or was popped."""
        probe = _record_keys(np.array([key[0]], np.int64), np.array([key[1]], np.int64))[0]
        lo, hi = int(np.searchsorted(self.keys, probe, "left")), int(np.searchsorted(self.keys, probe, "right"))
        if lo == hi or self.taken[lo]:
            return None
        self.taken[lo:hi] = True
        return self.order[lo:hi].tolist()

    def left(self) -> list[tuple[int, int]]:
        """The records not popped, as (input, line), in the order of their first row in the table."""
        starts = np.flatnonzero(_starts(self.keys) & ~self.taken)
        starts = starts[np.argsort(self.order[starts], kind="stable")]
        keys = self.keys[starts]
        return list(zip((keys >> 32).tolist(), ((keys & 0xFFFFFFFF) - (1 << 31)).tolist()))


def _record_keys(index: np.ndarray, line: np.ndarray) -> np.ndarray:
    """(input, line) as one int64 that sorts as the pair does (both are int32 columns)."""
    return (index << 32) + (line + (1 << 31))


def _starts(keys: np.ndarray) -> np.ndarray:
    new = np.zeros(len(keys), dtype=bool)
    if len(keys):
        new[0] = True
        new[1:] = keys[1:] != keys[:-1]
    return new


def _dropped_problems(manifest: Manifest) -> list[tuple[str, str]]:
    """What makes ``config.allow_dropped_fields`` and ``counts.dropped_fields`` other than pack writes them:
    both absent, or the sorted fields --allow-dropped-fields names and a count for each."""
    allowed = None if manifest.config.allow_dropped_fields is None else list(manifest.config.allow_dropped_fields)
    counts = manifest.counts.get("dropped_fields")
    names = [f.value for f in DroppableField]
    if allowed is None:
        return [] if counts is None else [("counts.dropped_fields", "counts.dropped_fields without "
                                                                    "config.allow_dropped_fields")]
    if not allowed or allowed != sorted(set(allowed)) or not set(allowed) <= set(names):
        return [("config.allow_dropped_fields", f"config.allow_dropped_fields {allowed!r} is not a sorted list of "
                                                f"{', '.join(names)}")]
    if not isinstance(counts, dict) or sorted(counts) != allowed:
        return [("counts.dropped_fields", f"counts.dropped_fields {counts!r} does not count each of "
                                          f"config.allow_dropped_fields {allowed}")]
    return []


def _check_dropped(manifest: Manifest, dropped: Counter[str], result: CheckResult) -> None:
    """``counts.dropped_fields``: the records whose re-rendering dropped each allowed field."""
    for name, count in sorted((manifest.counts.get("dropped_fields") or {}).items()):
        if dropped.get(name, 0) != count:
            result.fail(Violation(f"counts.dropped_fields.{name} is {count}, but re-rendering drops {name} from "
                                  f"{dropped.get(name, 0)} records (config.allow_dropped_fields lets it)",
                                  field=f"counts.dropped_fields.{name}"))


def _first_records(seen: FirstSeen | None, outcomes: list, rows_of: list[list[int] | None], k: int,
                   manifest: Manifest) -> list[str | None]:
    """Per record of a unit (input ``k``), the reason a duplicate of an earlier record carries (`duplicate_reason`,
    naming that record), or None: no earlier record with a row has its content key, or the run did not deduplicate
    (``seen`` None). Records without a row or a key are not seen."""
    if seen is None:
        return [None] * len(outcomes)
    mine = [j for j, ((_, key, _), found) in enumerate(zip(outcomes, rows_of)) if key is not None and found is not None]
    earlier: list[str | None] = [None] * len(outcomes)
    if not mine:
        return earlier
    keys = np.frombuffer(b"".join(outcomes[j][1] for j in mine), KEY)
    lines = np.array([outcomes[j][0] for j in mine], np.int32)
    first_input, first_line = seen.add(keys, np.full(len(mine), k, np.int32), lines)
    for j, line, a, b in zip(mine, lines.tolist(), first_input.tolist(), first_line.tolist()):
        if (a, b) != (k, line):
            earlier[j] = duplicate_reason(manifest.inputs[a].name, b, a)
    return earlier


def _check_duplicate(rows: dict, found: list[int], expected: str | None, dedupe: bool, result: CheckResult,
                     source: str) -> None:
    """A record is ``duplicate`` exactly when the run deduplicated and an earlier record has its content
    key; then it has one row, whose reason names that earlier record (``expected``: that reason, or None)."""
    statuses = [rows["status"][i] for i in found]
    loc = dict(example_id=rows["example_id"][found[0]], source=source, line=rows["line"][found[0]])
    if expected is None and "duplicate" in statuses:
        why = "no earlier record has its content" if dedupe else "the run did not deduplicate (config.dedupe none)"
        result.fail(Violation(f"marked duplicate, but {why}", field="status", **loc))
    elif expected is not None and (statuses != ["duplicate"] or rows["reason"][found[0]] != expected):
        result.fail(Violation(f"{expected}, but the seam table says {statuses} {rows['reason'][found[0]]!r}",
                              field="status", **loc))


def _outcomes(job: ReconstructJob, preparer: Preparer, specs: list[UnitSpec], workers: int | None,
              on_done: Callable[[UnitSpec, list], None], engine: Engine | None = None) -> None:
    """Each unit's outcomes, handed to ``on_done`` as the unit finishes (not kept): here and in local
    worker processes, or on ``engine``'s workers (a Ray cluster), which find the sources and the
    tokenizer by absolute path."""
    if engine is None:
        engine = LocalEngine(max(1, min(workers or usable_cpus(), len(specs))))
    if not engine.shares_paths:
        job, specs = replace(job, spec=job.spec.absolute()), [spec.absolute() for spec in specs]
    share_preparer(job, preparer)  # this process is a worker too, with the tokenizer it has loaded
    try:
        with engine.session():
            engine.map(unit_outcomes, job, specs, on_done, keep=False)
    finally:
        share_preparer(job, None)


def unit_outcomes(job: ReconstructJob, spec: UnitSpec) -> list[tuple[int, bytes | None, Outcome]]:
    """Re-tokenize one unit's records; per record its number, content key (None unless the job
    deduplicates or where it did not parse) and `Outcome` (small: digests, not tokens)."""
    pause_at("verify-unit")
    preparer = preparer_for(job)
    out: list[tuple[int, bytes | None, Outcome]] = []
    for batch in unit_batches(spec, BATCH):
        prepared = preparer.prepare(batch, source=spec.path)
        keys = prepared.keys or [None] * len(batch)
        for (_, line, _), key, enc, fmt, dropped in zip(batch, keys, prepared, prepared.formats, prepared.dropped):
            fresh = enc if isinstance(enc, str) else fresh_of(enc.input_ids, enc.labels, job.rule, job.overlong)
            if dropped:
                fresh = fresh._replace(dropped=tuple(sorted(dropped)))
            out.append((line, key, (fmt, fresh)))
    return out


def fresh_of(ids: np.ndarray, labels: np.ndarray, rule: SplitRule, overlong: str) -> Fresh:
    """Counts and digests of an example, and when it is longer than ``rule.capacity`` and ``overlong`` cuts it
    (``truncate``: its first chunk, as pack reads only that; ``split``: every chunk) the cut and the
    digests of each chunk."""
    fresh = Fresh(len(ids), int(np.count_nonzero(labels != IGNORE_INDEX)), token_hash(ids), token_hash(labels))
    if overlong not in (Overlong.truncate.value, Overlong.split.value) or len(ids) <= rule.capacity:
        return fresh
    cut = cut_example(labels[:rule.capacity] if overlong == Overlong.truncate.value else labels, rule)
    chunks = tuple((token_hash(ids[a:a + n]), token_hash(chunk_labels(labels, k, a, n, rule)))
                   for k, (a, n) in enumerate(zip(cut.start.tolist(), cut.length.tolist())))
    return fresh._replace(cut=cut, chunks=chunks)


def _chunked_rows(rows: dict, found: list[int]) -> set[int]:
    """The rows of one record that are chunks of a split example: those whose copy has more than one row
    (an over-long example splits into two chunks or more)."""
    per_copy: dict[int, list[int]] = {}
    for i in found:
        per_copy.setdefault(rows["copy"][i], []).append(i)
    return {i for mine in per_copy.values() if len(mine) > 1 for i in mine}


NOT_IN_PACKS = ("dropped", "duplicate", "unsampled")  # tokenized, in no pack: the seam table pins their tokens


class _Comparer:
    """Checks each record's outcome against its seam-table rows and pack spans; explains digest mismatches.

    Whether a row's status and lengths are the right fate is the plan check's question: here a pack
    span is compared with the first ``length`` tokens of the fresh example, whatever the length.
    """

    def __init__(self, preparer: Preparer, rows: dict, packs: PackIndex, rule: SplitRule,
                 result: CheckResult, facts: Reconstructed) -> None:
        self.preparer, self.rows, self.packs, self.rule = preparer, rows, packs, rule
        self.result, self.facts = result, facts

    def __call__(self, i: int, outcome: Outcome, source: str, line: int, chunk: bool) -> tuple | None:
        """Record what is wrong with row ``i`` (``chunk``: one of a split example's rows); return its pack span
        when the digests cannot vouch for it."""
        rows, result = self.rows, self.result
        status = rows["status"][i]
        loc = dict(example_id=rows["example_id"][i], source=source, line=line)
        fmt, outcome = outcome
        if (rows["format"][i] or "") != fmt:
            result.fail(Violation(f"read as format {fmt or 'none'!r} now; the seam table's format says "
                                  f"{rows['format'][i]!r}", field="format", **loc))
        if isinstance(outcome, str):
            self.facts.rejection[i] = outcome
            self.facts.length[i] = self.facts.supervised[i] = 0
            if status == "duplicate":
                return None  # its first record fails the same way; the duplicate itself is checked by its key
            if status != "rejected" or rows["reason"][i] != outcome:
                result.fail(Violation(f"re-running gives rejection {outcome!r}; the seam table says {status} "
                                      f"{rows['reason'][i]!r}", field="reason", **loc))
            return None
        self.facts.length[i], self.facts.supervised[i] = outcome.length, outcome.supervised
        if outcome.cut is not None:
            self.facts.cuts[i] = outcome.cut
        if status == "rejected":
            result.fail(Violation("record tokenizes now but the seam table says rejected", field="status", **loc))
            return None
        if rows["original_length"][i] != outcome.length:
            result.fail(Violation(f"original_length is {rows['original_length'][i]}, the record has {outcome.length} "
                                  "tokens", field="original_length", **loc))
        k, start = rows["chunk"][i], rows["chunk_start"][i]
        if status in NOT_IN_PACKS:
            digests = _chunk_digests(outcome, k, start) if chunk else (outcome.ids, outcome.labels)
            if digests is None or rows["token_hash"][i] != digests[0]:
                what = f"chunk {k} of the split example" if chunk else f"{status} example"
                result.fail(Violation(f"token_hash of the {what} differs from a fresh tokenization",
                                      field="token_hash", **loc))
            return None
        where = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
        if start == 0 and where[3] == outcome.length:
            digests = outcome.ids, outcome.labels
        else:
            digests = _chunk_digests(outcome, k, start, where[3])  # None: no such chunk, compare tokens here
        got = self._digests(rows["example_id"][i], where)
        if got is None:
            return None  # not a span of a readable pack: global reports where it should be
        if digests is None:
            return where, loc, False, i
        if got != digests:
            return where, loc, True, i
        return None

    def _digests(self, eid: int, where: tuple[str, int, int, int]) -> tuple[str, str] | None:
        """The digests of the tokens and labels at ``where``: the packs' own when that is the example's
        segment, else hashed from the shard read again; None if no readable pack holds that span."""
        kept = self.packs.digests_at(eid, where)
        if kept is not None:
            return kept
        tokens = self.packs.tokens(*where)
        return None if tokens is None else (token_hash(tokens[0]), token_hash(tokens[1]))

    def explain(self, spec: UnitSpec, differing: dict[int, list[tuple]]) -> None:
        """Re-tokenize the unit's differing records here (one pass over it) and name the first differing
        token of each of their rows (copies); past the violation limit only count them."""
        room = max(0, self.result.limit - len(self.result.violations))
        undecided = {line: spans for line, spans in differing.items() if not any(s[2] for s in spans)}
        mismatched = [(line, spans) for line, spans in differing.items() if line not in undecided]
        wanted = dict(list(undecided.items()) + mismatched[:room])
        batch = [(spec.file_index, line, raw) for line, raw in iter_unit_lines(spec) if line in wanted]
        for (_, line, _), fresh in zip(batch, self.preparer.prepare(batch, source=spec.path) if batch else []):
            for where, loc, digest_differed, row in wanted[line]:
                if isinstance(fresh, str):
                    self.result.fail(Violation(f"tokenizes in a worker process, rejected here ({fresh!r})", **loc))
                    continue
                ids, labels = self.packs.tokens(*where)  # read again: verify keeps digests, not the packs
                k, start = self.rows["chunk"][row], self.rows["chunk_start"][row]
                want_labels = chunk_labels(fresh.labels, k, start, len(ids), self.rule)
                before = self.result.count
                _diff(ids, fresh.input_ids[start:start + len(ids)], "input_ids", where[0], where[1], loc, self.result)
                _diff(labels, want_labels, "labels", where[0], where[1], loc, self.result)
                if digest_differed and self.result.count == before:
                    self.result.fail(Violation("the digest of a fresh tokenization differs from this process's: the "
                                               "tokenizer is not deterministic across processes", **loc))
        for _, found in mismatched[room:]:
            for where, loc, _, _ in found:
                self.result.fail(Violation("tokens or labels differ from a fresh tokenization", shard=where[0],
                                           row=where[1], **loc))


def _chunk_digests(fresh: Fresh, chunk: int, start: int, length: int | None = None) -> tuple[str, str] | None:
    """The digests of chunk ``chunk`` of a fresh example when its cut has that chunk at ``start`` (and of
    ``length`` tokens, when given); None otherwise."""
    cut = fresh.cut
    if cut is None or not 0 <= chunk < cut.count or cut.start[chunk] != start:
        return None
    return fresh.chunks[chunk] if length is None or cut.length[chunk] == length else None


def _diff(got: np.ndarray, want: np.ndarray, what: str, shard: str, row: int, loc: dict,
          result: CheckResult) -> None:
    if len(got) == len(want) and np.array_equal(got, want):
        return
    differ = np.flatnonzero(got[:min(len(got), len(want))] != want[:min(len(got), len(want))])
    at = int(differ[0]) if len(differ) else min(len(got), len(want))
    result.fail(Violation(f"{what} differ from a fresh tokenization at position {at} "
                          f"(pack {got[at:at + 3].tolist()}, fresh {want[at:at + 3].tolist()}; "
                          f"lengths {len(got)} vs {len(want)})", shard=shard, row=row, field=what, **loc))
