"""``packcli stats`` on raw data: tokenize the inputs as ``pack`` would and keep only the lengths.

The lengths, their quantiles, the rejects' reasons and per-input counts, and the what-if sweep over them
(`packcli.stats.whatif`), for choosing capacity and strategy before packing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from packcli.choices import AddToken, BackendChoice, Format
from packcli.contract import IGNORE_INDEX
from packcli.stats.whatif import (
    DEFAULT_CAPACITIES,
    PolicyWhatIf,
    Recommendation,
    WhatIf,
    overlong_sweep,
    recommend,
    sweep,
)

if TYPE_CHECKING:
    from packcli.ingest import FieldMap

QUANTILES = (5, 25, 50, 75, 90, 99, 99.9)


@dataclass(frozen=True)
class Quantiles:
    """Token-length quantiles (``p5`` ... ``p99.9``), max and mean."""

    values: dict[str, float]

    @classmethod
    def of(cls, lengths: npt.NDArray) -> Quantiles:
        if len(lengths) == 0:
            return cls({})
        values = {f"p{q:g}": float(np.percentile(lengths, q)) for q in QUANTILES}
        values.update(max=float(lengths.max()), mean=float(lengths.mean()))
        return cls(values)


@dataclass(frozen=True)
class LengthStats:
    """``packcli stats`` on raw data."""

    records: int
    examples: int
    rejected: int
    rejected_reasons: dict[str, int]
    by_input: list[dict]  # per input: source, records, examples, rejected
    total: Quantiles
    supervised: Quantiles
    what_if: list[WhatIf]
    overlong: list[PolicyWhatIf]  # per capacity, what drop, truncate and split keep (`overlong_sweep`)
    recommendation: Recommendation
    lengths: npt.NDArray[np.int64] = field(repr=False, compare=False)
    # which backend tokenized, why, and what its exactness guard checked (as in pack's manifest)
    tokenization: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("lengths")
        data["total"], data["supervised"] = self.total.values, self.supervised.values
        return data


def length_stats_problems(inputs: Sequence[str], tokenizer: str, *, template: str = "auto",
                          capacities: Sequence[int] = DEFAULT_CAPACITIES, seed: int = 0, min_density: float = 0.95,
                          max_displacement: float | None = None, fields: FieldMap | None = None,
                          workers: int | None = None, split_overlap: int = 0, split_min_last: int = 1) -> list[str]:
    """What is wrong with `length_stats`'s arguments, every problem at once, before any tokenizing
    (messages name the parameters; the CLI prints its flags). Every capacity tried must take the
    split's overlap and last chunk, as pack's would."""
    from packcli.artifact.fieldspec import setting_bounds
    from packcli.checks import float_problems, input_problems, int_problems, template_problems, tokenizer_problems
    from packcli.engine import worker_problems
    from packcli.job.chunks import SplitRule

    # pack's bounds (`setting_bounds`): a capacity stats recommends is one pack takes
    problems = [p for c in capacities for p in int_problems("`capacities`", c, *setting_bounds("capacity"))]
    problems += int_problems("`seed`", seed, *setting_bounds("seed"))
    split = int_problems("`split_overlap`", split_overlap, *setting_bounds("split_overlap")) + int_problems(
        "`split_min_last`", split_min_last, *setting_bounds("split_min_last"))
    if not split and not problems:
        split = SplitRule(min(capacities), split_overlap, split_min_last).problems()
    problems += split
    problems += worker_problems(workers)
    problems += float_problems("`min_density`", min_density, *setting_bounds("min_density"), low_open=True)
    problems += float_problems("`max_displacement`", max_displacement, *setting_bounds("max_displacement"))
    problems += input_problems(inputs) + tokenizer_problems("`tokenizer`", tokenizer)
    problems += template_problems(template, tokenizer)
    return problems + (fields.problems() if fields is not None else [])


def length_stats(inputs, tokenizer: str, *, template: str = "auto", loss=None, capacities=DEFAULT_CAPACITIES,
                 seed: int = 0, min_density: float = 0.95, max_displacement: float | None = None,
                 batch: int = 4096, fields=None, input_format: Format = Format.auto,
                 backend: BackendChoice | str = BackendChoice.auto, workers: int | None = None,
                 unit_lines: int = 10_000, split_overlap: int = 0, split_min_last: int = 1,
                 text_bos: str = "auto", text_eos: str = "auto") -> LengthStats:
    """Tokenize raw inputs (the same stage as ``pack``, any source kind, with the same column mapping
    ``fields``) and compute quantiles, sweep, recommendation, and per-input counts.

    ``backend`` is ``pack``'s ``--tokenizer-backend``, chosen and guarded the same way
    (`packcli.tokenizer.load.load_tokenizer`, `packcli.tokenizer.encode_batch`), and the inputs are cut
    into units of about ``unit_lines`` records tokenized by ``workers`` processes (None: as ``pack``
    sizes them from the input, `packcli.engine.pool.auto_processes`): the lengths are the ones
    ``pack`` will see, at ``pack``'s speed. Lengths keep the inputs' order whatever the workers.
    """
    from packcli.chat import LossPolicy, resolve_template
    from packcli.chat.render import DEFAULT_TEMPLATE_DATE
    from packcli.engine.local import LocalEngine
    from packcli.engine.pool import auto_processes, default_workers
    from packcli.ingest import DEFAULT_FIELDS, check_sources, describe_input, expand_inputs
    from packcli.job.units import UnitJob, plan_units
    from packcli.prepare import PrepareSpec, TokenizerRef, share_preparer
    from packcli.tokenizer.load import auto_backend, cached_tokenizer

    policy = loss or LossPolicy.auto
    fields = fields or DEFAULT_FIELDS
    sources = expand_inputs(inputs)
    check_sources(sources, fields, input_format)
    files = [describe_input(source, content=False) for source in sources]  # in the order given, as by_input
    input_bytes = sum(f.size for f in files)
    tok = cached_tokenizer(tokenizer, backend=backend, input_bytes=input_bytes)  # as pack chooses: small, tokenizers
    tpl = resolve_template(template, tok, policy)
    specs = plan_units(files, unit_lines)
    asked, _ = auto_backend(backend, input_bytes)
    spec = PrepareSpec(TokenizerRef.of(tok, asked.value), template_text=tpl.text,
                       template_source=tpl.source, template_date=DEFAULT_TEMPLATE_DATE.isoformat(), loss=policy.value,
                       input_format=Format(input_format).value, fields=tuple(sorted(fields.renames().items())),
                       text_bos=AddToken(text_bos).value, text_eos=AddToken(text_eos).value)
    job = UnitJob(spec, batch_records=batch, fail_fast=False, work_dir="", config_hash="", command="stats")
    if workers is None:
        workers = auto_processes(default_workers(), units=len(specs), input_bytes=input_bytes)
    share_preparer(job, spec.build_preparer(job.command, tok))  # this process is a worker too, its tokenizer loaded
    engine = LocalEngine(max(1, min(workers, len(specs))))
    try:
        with engine.session():
            units = engine.map(measure_unit, MeasureJob(job, min(capacities, default=0)), specs)
    finally:
        share_preparer(job, None)
    reasons: Counter = Counter()
    guard = dict.fromkeys(tok.guard_counts(), 0)
    by_input = [{"source": source.path, "records": 0, "examples": 0, "rejected": 0} for source in sources]
    for spec, unit in zip(specs, units):
        reasons.update(unit.reasons)
        for key, value in unit.guard.items():
            guard[key] += value
        counts = by_input[spec.file_index]
        counts["records"] += unit.records
        counts["examples"] += len(unit.lengths)
        counts["rejected"] += unit.records - len(unit.lengths)
    tokenization = {"backend": tok.backend_name, "version": tok.backend_version, "reason": tok.backend_reason,
                    "guard": guard}
    lens = np.concatenate([u.lengths for u in units]) if units else np.zeros(0, np.int64)
    sups = np.concatenate([u.supervised for u in units]) if units else np.zeros(0, np.int64)
    masks, at = {}, 0
    for unit in units:
        masks.update({at + k: np.unpackbits(bits, count=int(unit.lengths[k])).astype(bool) for k, bits in unit.long})
        at += len(unit.lengths)
    # Default ordering budget: 1% of the examples, but never below TRL's 1000-example batches.
    budget = max_displacement if max_displacement is not None else max(1000.0, 0.01 * len(lens))
    cells = sweep(lens, sups, capacities, seed=seed) if len(lens) else []
    overlong = overlong_sweep(lens, sups, masks, capacities, overlap=split_overlap, min_last=split_min_last,
                              seed=seed) if len(lens) else []
    return LengthStats(records=sum(u.records for u in units), examples=len(lens), rejected=sum(reasons.values()),
                       rejected_reasons=dict(reasons.most_common()), by_input=by_input, total=Quantiles.of(lens),
                       supervised=Quantiles.of(sups), what_if=cells, overlong=overlong,
                       recommendation=recommend(cells, min_density=min_density, max_displacement=budget),
                       lengths=lens, tokenization=tokenization)


@dataclass(frozen=True)
class UnitLengths:
    """What `stats` keeps of one unit: its examples' lengths, the rejects' reasons, the guard's counts, and
    for each example longer than the smallest capacity (by its index in the unit) which tokens carry
    loss, as `np.packbits` of the mask."""

    records: int
    lengths: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    reasons: Counter
    guard: dict[str, int]
    long: list[tuple[int, npt.NDArray[np.uint8]]] = field(default_factory=list)


@dataclass(frozen=True)
class MeasureJob:
    """What every unit of a ``stats`` run shares: the tokenization (`packcli.job.units.UnitJob`) and the
    length above which an example's loss mask is kept (the smallest capacity)."""

    job: object  # a UnitJob (imported lazily)
    keep_masks_above: int


def measure_unit(measure: MeasureJob, spec) -> UnitLengths:  # noqa: ANN001 - a UnitSpec (imported lazily)
    """Tokenize one unit as ``pack`` would and keep only its lengths (module level: worker processes
    pickle it by name). The guard's counts are this unit's: a process runs one unit at a time."""
    from packcli.job.pause import pause_at
    from packcli.job.units import unit_batches
    from packcli.prepare import preparer_for

    pause_at("stats-unit")
    job = measure.job
    preparer = preparer_for(job)
    before = preparer.tokenizer.guard_counts()
    lengths: list[int] = []
    supervised: list[int] = []
    reasons: Counter = Counter()
    long: list[tuple[int, npt.NDArray[np.uint8]]] = []
    records = 0
    for batch in unit_batches(spec, job.batch_records):
        records += len(batch)
        for outcome in preparer.prepare(batch, source=spec.path):
            if isinstance(outcome, str):
                reasons[outcome] += 1
                continue
            if len(outcome.input_ids) > measure.keep_masks_above:
                long.append((len(lengths), np.packbits(outcome.labels != IGNORE_INDEX)))
            lengths.append(len(outcome.input_ids))
            supervised.append(outcome.supervised)
    after = preparer.tokenizer.guard_counts()
    return UnitLengths(records, np.asarray(lengths, dtype=np.int64), np.asarray(supervised, dtype=np.int64), reasons,
                       {key: after[key] - before[key] for key in after}, long)


def terminal_histogram(lengths: npt.NDArray[np.int64], *, width: int = 40) -> list[str]:
    """A compact histogram over power-of-two length bins, one text line per bin."""
    if len(lengths) == 0:
        return []
    top = int(np.ceil(np.log2(max(2, lengths.max()))))
    edges = [0] + [2 ** k for k in range(4, max(top, 4) + 1)]
    counts = np.histogram(lengths, bins=edges)[0]
    peak = counts.max() or 1
    lines = []
    for lo, hi, count in zip(edges[:-1], edges[1:], counts):
        bar = "#" * int(round(width * count / peak))
        lines.append(f"{lo:>6}-{hi:<6} {bar:<{width}} {count}")
    return lines
