"""Length statistics and what-if packing, for choosing capacity and strategy before packing.

Pure functions over length arrays: the same numba kernels ``pack`` uses answer "what would this
capacity and strategy give?" in milliseconds per cell, so a whole sweep over 1M lengths is seconds.
The control row ``padding`` is one example per row padded to the capacity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from packcli.artifact.manifest import Manifest
from packcli.choices import AddToken, BackendChoice, Format, Strategy
from packcli.contract import IGNORE_INDEX, IN_PACKS

if TYPE_CHECKING:
    from packcli.ingest import FieldMap

QUANTILES = (5, 25, 50, 75, 90, 99, 99.9)
DEFAULT_CAPACITIES = (1024, 2048, 4096, 8192, 16384, 32768)
WHAT_IF_STRATEGIES = (*(s.value for s in Strategy), "padding")  # padding: one example a row, the control
MAX_SUPERVISED_LOSS = 0.001  # the recommendation's "loses < 0.1% of supervised tokens"


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
class WhatIf:
    """One (capacity, strategy) cell of the sweep."""

    capacity: int
    strategy: str
    packs: int
    density: float
    supervised_density: float
    dropped_examples: int
    dropped_tokens: int
    dropped_supervised: int
    dropped_supervised_fraction: float
    displacement_mean: float
    displacement_max: float
    seconds: float


@dataclass(frozen=True)
class PolicyWhatIf:
    """What one over-long policy (``drop``, ``truncate``, ``split``) keeps at one capacity, packed with the
    default strategy: examples with tokens in packs, segments (examples, or chunks under ``split``), tokens
    and supervised tokens in packs, the share of all supervised tokens that is, packs and density."""

    capacity: int
    policy: str
    examples: int
    segments: int
    tokens: int
    supervised: int
    supervised_fraction: float
    packs: int
    density: float


@dataclass(frozen=True)
class Recommendation:
    capacity: int | None
    strategy: str | None
    reason: str


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


def what_if(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64], capacity: int, strategy: str, *,
            seed: int = 0, window: int | None = None) -> WhatIf:
    """Pack the examples that fit ``capacity`` (over-long ones are dropped) and measure the result."""
    import time

    from packcli.pack import pack_lengths

    fits = lengths <= capacity
    kept, kept_sup = lengths[fits], supervised[fits]
    t0 = time.perf_counter()
    if strategy == "padding":
        packs, disp_mean, disp_max = len(kept), 0.0, 0.0
    else:
        plan = pack_lengths(kept, capacity, strategy=strategy, window=window, seed=seed)
        packs, disp_mean, disp_max = plan.num_packs, plan.metrics.displacement_mean, plan.metrics.displacement_max
    seconds = time.perf_counter() - t0
    slots = packs * capacity
    total_sup = int(supervised.sum())
    dropped_sup = int(supervised[~fits].sum())
    return WhatIf(
        capacity=capacity, strategy=strategy, packs=packs,
        density=float(kept.sum() / slots) if slots else 0.0,
        supervised_density=float(kept_sup.sum() / slots) if slots else 0.0,
        dropped_examples=int((~fits).sum()), dropped_tokens=int(lengths[~fits].sum()),
        dropped_supervised=dropped_sup, dropped_supervised_fraction=dropped_sup / total_sup if total_sup else 0.0,
        displacement_mean=float(disp_mean), displacement_max=float(disp_max), seconds=seconds,
    )


def sweep(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64], capacities=DEFAULT_CAPACITIES,
          strategies=WHAT_IF_STRATEGIES, *, seed: int = 0) -> list[WhatIf]:
    return [what_if(lengths, supervised, c, s, seed=seed) for c in capacities for s in strategies]


def overlong_sweep(lengths: npt.NDArray[np.int64], supervised: npt.NDArray[np.int64],
                   masks: dict[int, npt.NDArray[np.bool_]], capacities=DEFAULT_CAPACITIES, *, overlap: int = 0,
                   min_last: int = 1, seed: int = 0) -> list[PolicyWhatIf]:
    """Per capacity, what ``--overlong drop``, ``truncate`` and ``split`` (with ``overlap`` and ``min_last``)
    keep, each packed as ``pack`` packs it (the default strategy and ``seed``).

    Args:
        masks: which tokens carry loss, for every example longer than the smallest capacity (by its
            index): truncation and splitting are decided on them exactly as ``pack`` decides
            (`packcli.job.chunks.cut_example`).
    """
    from packcli.job.chunks import SplitRule, cut_example

    total_sup = int(supervised.sum())
    cells = []
    for capacity in capacities:
        over = np.flatnonzero(lengths > capacity).tolist()
        fits = lengths <= capacity
        cells.append(_policy_cell(capacity, "drop", lengths[fits], int(supervised[fits].sum()), int(fits.sum()),
                                  total_sup, seed))
        for policy, rule in (("truncate", SplitRule(capacity)), ("split", SplitRule(capacity, overlap, min_last))):
            counts = fits.astype(np.int64)  # segments per example, in input order as pack lays them out
            chunks, sup = {}, int(supervised[fits].sum())
            for i in over:
                cut = cut_example(np.where(masks[i], 0, IGNORE_INDEX), rule)
                keep = cut.kept if policy == "split" else (np.arange(cut.count) == 0) & (cut.supervised > 0)
                chunks[i], counts[i] = cut.length[keep], int(keep.sum())
                sup += int(cut.supervised[keep].sum())
            segments = np.repeat(lengths, counts)
            starts = np.cumsum(counts) - counts
            for i, pieces in chunks.items():
                segments[starts[i]:starts[i] + len(pieces)] = pieces
            cells.append(_policy_cell(capacity, policy, segments, sup, int(np.count_nonzero(counts)), total_sup, seed))
    return cells


def _policy_cell(capacity: int, policy: str, segments: npt.NDArray[np.int64], supervised: int, examples: int,
                 total_supervised: int, seed: int) -> PolicyWhatIf:
    from packcli.pack import pack_lengths

    packs = pack_lengths(segments, capacity, seed=seed).num_packs if len(segments) else 0
    tokens = int(segments.sum())
    return PolicyWhatIf(capacity, policy, examples, len(segments), tokens, supervised,
                        supervised / total_supervised if total_supervised else 0.0, packs,
                        tokens / (packs * capacity) if packs else 0.0)


def recommend(cells: list[WhatIf], *, min_density: float, max_displacement: float) -> Recommendation:
    """The smallest capacity that loses < 0.1% of supervised tokens, and at it the densest strategy
    whose mean displacement stays within budget (``max_displacement`` examples)."""
    caps = sorted({c.capacity for c in cells})
    ok_caps = [c for c in caps if all(w.dropped_supervised_fraction < MAX_SUPERVISED_LOSS for w in cells if w.capacity == c)]
    if not ok_caps:
        return Recommendation(None, None, f"every capacity tried loses >= {MAX_SUPERVISED_LOSS:.1%} of supervised "
                                          f"tokens when over-long examples are dropped; try larger capacities, or "
                                          f"`overlong='split'` (the over-long table: what each policy keeps)")
    cap = ok_caps[0]
    fitting = [w for w in cells if w.capacity == cap and w.strategy != "padding"
               and w.density >= min_density and w.displacement_mean <= max_displacement]
    if not fitting:
        return Recommendation(cap, None, f"at capacity {cap} no strategy reaches density {min_density} with mean "
                                         f"displacement <= {max_displacement:g}; relax a budget")
    best = max(fitting, key=lambda w: (w.density, -w.displacement_mean))
    return Recommendation(cap, best.strategy, f"capacity {cap} loses {best.dropped_supervised_fraction:.4%} of "
                                              f"supervised tokens; {best.strategy} gives density {best.density:.4f} "
                                              f"with mean displacement {best.displacement_mean:.1f} examples")


def length_stats_problems(inputs: Sequence[str], tokenizer: str, *, template: str = "auto",
                          capacities: Sequence[int] = DEFAULT_CAPACITIES, seed: int = 0, min_density: float = 0.95,
                          max_displacement: float | None = None, fields: FieldMap | None = None,
                          workers: int | None = None, split_overlap: int = 0, split_min_last: int = 1) -> list[str]:
    """What is wrong with `length_stats`'s arguments, every problem at once, before any tokenizing
    (messages name the parameters; the CLI prints its flags). Every capacity tried must take the
    split's overlap and last chunk, as pack's would."""
    from packcli.checks import (
        MAX_INT32,
        MAX_SEED,
        float_problems,
        input_problems,
        int_problems,
        template_problems,
        tokenizer_problems,
    )
    from packcli.engine import worker_problems
    from packcli.job.chunks import SplitRule

    problems = [p for c in capacities for p in int_problems("`capacities`", c, 2, MAX_INT32)]
    problems += int_problems("`seed`", seed, 0, MAX_SEED)
    split = int_problems("`split_overlap`", split_overlap, 0) + int_problems("`split_min_last`", split_min_last, 1)
    if not split and not problems:
        split = SplitRule(min(capacities), split_overlap, split_min_last).problems()
    problems += split
    problems += worker_problems(workers)
    problems += float_problems("`min_density`", min_density, 0, 1, low_open=True)
    problems += float_problems("`max_displacement`", max_displacement, 0)
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
    job = UnitJob(spec, batch_records=batch, fail_fast=False, work_dir="", config_hash="")
    if workers is None:
        workers = auto_processes(default_workers(), units=len(specs), input_bytes=input_bytes)
    share_preparer(job, spec.build_preparer("stats", tok))  # this process is a worker too, its tokenizer loaded
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


@dataclass(frozen=True)
class ArtifactStats:
    """``packcli stats DIR``: what a packed artifact holds, from its manifest and shards."""

    directory: str
    identity: dict
    counts: dict
    metrics: dict
    shards: list[dict]
    inputs: list[dict]  # per input: source, kind, records read, its mixture weight, and its counts by status
    fill: npt.NDArray[np.float64] = field(repr=False, compare=False)
    supervised_fill: npt.NDArray[np.float64] = field(repr=False, compare=False)
    lengths: npt.NDArray[np.int64] = field(repr=False, compare=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("fill", "supervised_fill", "lengths"):
            data.pop(key)
        data["fill_quantiles"] = Quantiles.of(self.fill).values
        data["supervised_fill_quantiles"] = Quantiles.of(self.supervised_fill).values
        return data


def artifact_stats(directory: str | Path) -> ArtifactStats:
    """Read the manifest and the per-pack counts (not the tokens) of every shard."""
    import pyarrow.compute as pc

    from packcli.artifact import manifest as mf
    from packcli.artifact.shards import read_parquet

    directory = Path(directory)
    manifest = mf.load_manifest(directory)
    capacity = manifest.config.capacity
    fills, sup_fills, shards = [], [], []
    for info in manifest.shards:
        table = read_parquet(directory / info.name, columns=["num_tokens", "num_supervised", "cu_seqlens"])
        tokens = table["num_tokens"].to_numpy()
        fills.append(tokens / capacity)
        sup_fills.append(table["num_supervised"].to_numpy() / capacity)
        shards.append({"name": info.name, "packs": len(table), "tokens": int(tokens.sum()),
                       "supervised": int(pc.sum(table["num_supervised"]).as_py() or 0),
                       "examples": int(pc.sum(pc.subtract(pc.list_value_length(table["cu_seqlens"]), 1)).as_py() or 0),
                       "density": float(tokens.sum() / (len(table) * capacity)) if len(table) else 0.0,
                       "bytes": info.bytes})
    lengths = _packed_lengths(directory / manifest.seam_table.name)
    identity = {"manifest_sha256": manifest.manifest_sha256, "contract_version": manifest.contract_version,
                "tokenizer_sha256": manifest.tokenizer.sha256, "template_sha256": manifest.template.sha256,
                "template_origin": manifest.template.origin, "loss_policy": manifest.loss_policy,
                "config": manifest.config.to_dict(), "versions": manifest.unhashed.get("versions", {})}
    return ArtifactStats(str(directory), identity, manifest.counts, manifest.metrics, shards, input_counts(manifest),
                         fill=np.concatenate(fills) if fills else np.zeros(0),
                         supervised_fill=np.concatenate(sup_fills) if sup_fills else np.zeros(0), lengths=lengths)


def _packed_lengths(path: Path) -> npt.NDArray[np.int64]:
    """The length of every seam-table row in a pack, read a batch at a time: the table's string columns
    are never all in memory, only one number a packed example."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    wanted = pa.array(list(IN_PACKS))
    parts = []
    with pq.ParquetFile(path) as handle:
        for batch in handle.iter_batches(columns=["length", "status"]):
            in_packs = pc.is_in(batch.column("status"), wanted)
            parts.append(np.asarray(batch.column("length").filter(in_packs)).astype(np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def input_counts(manifest: Manifest) -> list[dict]:
    """Per input of an artifact: where it came from, what its mixture asked of it, what became of its records."""
    from packcli.mix import Mixture, describe

    mix = manifest.config.mix
    weight = {}
    if mix is not None:
        mixture = Mixture.from_manifest(mix)
        weight = {i: describe(mixture.by, s.weight) for s in mixture.sources for i in s.inputs}
    by_input = manifest.counts.get("by_input") or [{} for _ in manifest.inputs]
    return [{"source": pinned.name, "kind": pinned.kind, "records": pinned.records, "weight": weight.get(i),
             **counts} for i, (pinned, counts) in enumerate(zip(manifest.inputs, by_input))]


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
