"""Reconstruction: re-derive every example from its source line and compare it with its pack span.

Re-reads every source file the manifest pins (its size and sha256, and as many records as
``inputs[].records`` says), runs every non-blank line through the same `Preparer` as ``pack``
(always the reference tokenizer, ``tokenizers``), and demands that each line has exactly one
seam-table row that it reproduces: its ``original_length``, the tokens and labels in its pack span
(the whole example, or its first ``capacity`` tokens when truncated), a dropped example's
``token_hash``, a rejected record's reason. What it re-derives per record (length, supervised
tokens, supervised tokens in the first ``capacity``) is returned as `Reconstructed`, from which the
plan check re-decides every fate and re-runs the planner (`packcli.verify.plan`).

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
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from packcli.artifact.shards import FlatShard
from packcli.chat import ChatTemplate, Renderer
from packcli.choices import BackendChoice, Format, LossPolicy
from packcli.contract import IGNORE_INDEX, token_hash
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


class Fresh(NamedTuple):
    """A record's fresh tokenization, small enough to send between processes: counts and digests
    (`packcli.contract.token_hash`) of the whole example and of its first ``capacity`` tokens."""

    length: int
    supervised: int
    ids: str
    labels: str
    kept_supervised: int
    kept_ids: str
    kept_labels: str


# A line's outcome: the format it was read as ("" when not recognised), and its rejection reason or its
# fresh tokenization.
Outcome = tuple[str, str | Fresh]


@dataclass(frozen=True)
class Reconstructed:
    """Per seam-table row, what a fresh tokenization of its line gives (-1 where no line gave one):
    its tokens, supervised tokens, supervised tokens in its first ``capacity``; ``rejection`` is
    the reason re-parsing rejects it, or None."""

    length: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    kept_supervised: npt.NDArray[np.int64]
    rejection: list[str | None]


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


def check_reconstruction(manifest: dict, rows: dict[str, list], shards: dict[str, FlatShard],
                         tokenizer: LoadedTokenizer, template_text: str, result: CheckResult, *,
                         source_root: Path | None, progress: Progress = NO_PROGRESS,
                         workers: int | None = None) -> Reconstructed:
    """Compare every source line's fresh tokenization with the artifact; record violations in ``result``.

    Args:
        rows: the seam table's columns as lists.
        workers: processes that re-tokenize (None: one per CPU, for artifacts of at least
            `PARALLEL_MIN_RECORDS` records in more than one unit of work; else this process alone).

    Returns:
        What each seam-table row's line reproduces, for the plan check.
    """
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    config = manifest["config"]
    n = len(rows["example_id"])
    facts = Reconstructed(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), [None] * n)
    problems = []
    if config["input_format"] not in {f.value for f in Format}:
        problems.append(("config.input_format", f"config.input_format {config['input_format']!r} is not a format"))
    if manifest["loss_policy"] not in {p.value for p in LossPolicy}:
        problems.append(("loss_policy", f"loss_policy {manifest['loss_policy']!r} is not a loss policy"))
    try:
        date.fromisoformat(config["template_date"])
    except ValueError:
        problems.append(("config.template_date", f"config.template_date {config['template_date']!r} is not a date"))
    for field, message in problems:
        result.fail(Violation(message + ": nothing can be rendered as pack did", field=field))
    if problems:
        return facts
    job = ReconstructJob(tokenizer=tokenizer.source, tokenizer_sha256=tokenizer.sha256, template_text=template_text,
                         template_source=manifest["template"]["origin"], loss=manifest["loss_policy"],
                         template_date=config["template_date"], input_format=config["input_format"],
                         bos_token=manifest["tokenizer"]["bos_token"], eos_token=manifest["tokenizer"]["eos_token"],
                         capacity=config["capacity"])
    preparer = job.build_preparer(tokenizer)
    by_line: dict[tuple[int, int], int] = {}
    for i in range(n):
        by_line.setdefault((rows["input"][i], rows["line"][i]), i)  # a second row for a line: global's
    files, pinned = [], []  # the sources found unchanged, with their index in the manifest's inputs
    for k, entry in enumerate(manifest["inputs"]):
        path = find_source(manifest, k, source_root)
        if path is None or not path.is_file():
            raise InputError(f"source {path or entry['name']}: no such file (input {k} of the manifest, "
                             f"{entry['name']}, sha256 {entry['sha256'][:16]})",
                             "run verify from the directory pack ran in, or pass --source-root (searched by name)")
        described = describe_input(path)
        if described.size != entry["size"]:
            result.fail(Violation(f"source {path} has {described.size} bytes, inputs[{k}].size says {entry['size']}",
                                  source=entry["name"], field=f"inputs[{k}].size"))
        if described.sha256 != entry["sha256"]:
            result.fail(Violation(f"source file changed since packing: {path} does not hash to inputs[{k}].sha256",
                                  source=entry["name"], field=f"inputs[{k}].sha256"))
            continue
        files.append(described)
        pinned.append((k, entry))
    specs = plan_units(files, UNIT_LINES)
    progress.start("reconstruct", "reconstructing", total=manifest["counts"]["records"])
    compare = _Comparer(preparer, rows, shards, config["capacity"], result, facts)
    if workers is None and manifest["counts"]["records"] < PARALLEL_MIN_RECORDS:
        workers = 1

    def advance(spec: UnitSpec, outcomes: list) -> None:
        progress.advance("reconstruct", len(outcomes))

    read = [0] * len(pinned)
    for spec, outcomes in zip(specs, _outcomes(job, preparer, specs, workers, advance)):
        k, entry = pinned[spec.file_index]
        read[spec.file_index] += len(outcomes)
        differing: dict[int, tuple] = {}
        for line, outcome in outcomes:
            result.checked += 1
            i = by_line.pop((k, line), None)
            if i is None:
                result.fail(Violation("record has no seam-table row (dropped without a record)", source=entry["name"],
                                      line=line))
            elif (span := compare(i, outcome, entry["name"], line)) is not None:
                differing[line] = span
        if differing:
            compare.explain(spec, differing)
    for (k, entry), count in zip(pinned, read):
        if count != entry["records"]:
            result.fail(Violation(f"{count} records read from the source, inputs[{k}].records says {entry['records']}",
                                  source=entry["name"], field=f"inputs[{k}].records"))
    read_inputs = {k for k, _ in pinned}
    for (k, line) in by_line:
        if k in read_inputs:
            result.fail(Violation("seam table names a line that is not a record in the source",
                                  source=manifest["inputs"][k]["name"], line=line, field="line"))
    return facts


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
            fresh = enc if isinstance(enc, str) else fresh_of(enc.input_ids, enc.labels, job.capacity)
            out.append((line, (fmt, fresh)))
        batch = []


def fresh_of(ids: np.ndarray, labels: np.ndarray, capacity: int) -> Fresh:
    """Counts and digests of an example and of its first ``capacity`` tokens."""
    whole = token_hash(ids), token_hash(labels)
    supervised = int(np.count_nonzero(labels != IGNORE_INDEX))
    if len(ids) <= capacity:
        return Fresh(len(ids), supervised, *whole, supervised, *whole)
    kept = labels[:capacity]
    return Fresh(len(ids), supervised, *whole, int(np.count_nonzero(kept != IGNORE_INDEX)),
                 token_hash(ids[:capacity]), token_hash(kept))


class _Comparer:
    """Checks each line's outcome against its seam-table row and pack span; explains digest mismatches.

    Whether the row's status and lengths are the right fate is the plan check's question: here the
    pack span is compared with the first ``length`` tokens of the fresh example, whatever the length.
    """

    def __init__(self, preparer: Preparer, rows: dict, shards: dict[str, FlatShard], capacity: int,
                 result: CheckResult, facts: Reconstructed) -> None:
        self.preparer, self.rows, self.shards, self.capacity = preparer, rows, shards, capacity
        self.result, self.facts = result, facts

    def __call__(self, i: int, outcome: Outcome, source: str, line: int) -> tuple | None:
        """Record what is wrong with row ``i``; return its pack span when the digests cannot vouch for it."""
        rows, result = self.rows, self.result
        status = rows["status"][i]
        loc = dict(example_id=rows["example_id"][i], source=source, line=line)
        fmt, outcome = outcome
        if (rows["format"][i] or "") != fmt:
            result.fail(Violation(f"read as format {fmt or 'none'!r} now; the seam table's format says "
                                  f"{rows['format'][i]!r}", field="format", **loc))
        if isinstance(outcome, str):
            self.facts.rejection[i] = outcome
            self.facts.length[i] = self.facts.supervised[i] = self.facts.kept_supervised[i] = 0
            if status != "rejected" or rows["reason"][i] != outcome:
                result.fail(Violation(f"re-running gives rejection {outcome!r}; the seam table says {status} "
                                      f"{rows['reason'][i]!r}", field="reason", **loc))
            return None
        self.facts.length[i], self.facts.supervised[i] = outcome.length, outcome.supervised
        self.facts.kept_supervised[i] = outcome.kept_supervised
        if status == "rejected":
            result.fail(Violation("record tokenizes now but the seam table says rejected", field="status", **loc))
            return None
        if rows["original_length"][i] != outcome.length:
            result.fail(Violation(f"original_length is {rows['original_length'][i]}, the record has {outcome.length} "
                                  "tokens", field="original_length", **loc))
        if status == "dropped":
            if rows["token_hash"][i] != outcome.ids:
                result.fail(Violation("token_hash of the dropped example differs from a fresh tokenization",
                                      field="token_hash", **loc))
            return None
        span = self._span(i)
        if span is None:
            return None  # not a span of a readable pack: global reports where it should be
        ids, labels, shard, row = span
        length = len(ids)
        if length == outcome.length:
            digests = outcome.ids, outcome.labels
        elif length == self.capacity < outcome.length:
            digests = outcome.kept_ids, outcome.kept_labels
        else:
            return ids, labels, shard, row, loc, False  # no digest of this prefix: compare tokens here
        if (token_hash(ids), token_hash(labels)) != digests:
            return ids, labels, shard, row, loc, True
        return None

    def _span(self, i: int) -> tuple | None:
        rows = self.rows
        shard = self.shards.get(rows["shard"][i])
        r, offset, length = rows["row"][i], rows["offset"][i], rows["length"][i]
        if shard is None or not 0 <= r < shard.rows or offset < 0 or length < 1:
            return None
        a, end = shard.row_offsets[r] + offset, shard.row_offsets[r + 1]
        if a + length > end:
            return None
        return shard.ids[a:a + length], shard.labels[a:a + length], shard, r

    def explain(self, spec: UnitSpec, differing: dict[int, tuple]) -> None:
        """Re-tokenize the unit's differing lines here (one pass over it) and name the first differing
        token of each; past the violation limit only count them."""
        room = max(0, self.result.limit - len(self.result.violations))
        checked = [(line, span) for line, span in differing.items() if not span[5]]  # no digest: all of them
        mismatched = [(line, span) for line, span in differing.items() if span[5]]
        wanted = dict(checked + mismatched[:room])
        batch = [(spec.file_index, line, raw) for line, raw in iter_unit_lines(spec) if line in wanted]
        for (_, line, _), fresh in zip(batch, self.preparer.prepare(batch, source=spec.path) if batch else []):
            ids, labels, shard, row, loc, digest_differed = wanted[line]
            if isinstance(fresh, str):
                self.result.fail(Violation(f"tokenizes in a worker process, rejected here ({fresh!r})", **loc))
                continue
            keep = len(ids)
            before = self.result.count
            _diff(ids, fresh.input_ids[:keep], "input_ids", shard, row, loc, self.result)
            _diff(labels, fresh.labels[:keep], "labels", shard, row, loc, self.result)
            if digest_differed and self.result.count == before:
                self.result.fail(Violation("the digest of a fresh tokenization differs from this process's: the "
                                           "tokenizer is not deterministic across processes", **loc))
        for line, (_, _, shard, row, loc, _) in mismatched[room:]:
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
                          f"lengths {len(got)} vs {len(want)})", shard=shard.name, row=row, field=what, **loc))
