"""Units of work: contiguous spans of records of one input, tokenized independently.

A unit is what an engine schedules (locally in a loop, or as one Ray task): it reads its span
(`packcli.ingest.Span`: a byte range of a JSONL file, a row range of a Parquet or Arrow file),
parses, renders and tokenizes, and writes its tokens and labels to its own spill files with a small
sidecar index. Everything a unit produces depends only on its spec and the run's configuration, so
any engine, any worker count and any order of completion give the same bytes.

Each source kind's reader cuts its inputs into spans of about ``lines_per_unit`` records
(`packcli.ingest.Reader.split`): plain JSONL at line starts found by one fast scan, Parquet along
its row groups, Arrow anywhere; a compressed JSONL file cannot be entered in the middle, so it is
a single unit.

A sidecar records the configuration hash, so a re-run with the same configuration reuses finished
units (resume) and never mixes units of different configurations.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.contract import PACKED, REJECTED, example_id
from packcli.errors import RecordError
from packcli.ingest import InputFile, SourceKind, Span, read_span, reader
from packcli.job.pause import pause_at
from packcli.job.scratch import IN_MEMORY, Scratch, TextColumn, code_of
from packcli.job.spill import spill_paths
from packcli.prepare import InputWarnings, Preparer, PrepareSpec, preparer_for

NO_KEY = bytes(16)  # the content key of a record that did not parse (it has none)


@dataclass(frozen=True)
class UnitSpec:
    """The records of ``span``, a part of input ``file_index`` (``path`` as given, for messages).

    ``file_sha256`` and ``occurrence`` are the input's, for the example ids (`packcli.contract.example_id`).
    """

    index: int
    file_index: int
    path: str
    file_sha256: str
    occurrence: int
    span: Span

    @property
    def name(self) -> str:
        return f"unit-{self.index:05d}"

    @property
    def label(self) -> str:
        """How an error names the unit: ``unit-00003 (data.jsonl from line 20001)``, ``(data.parquet from row 0)``."""
        what = {SourceKind.jsonl: "line", SourceKind.json_array: "element"}.get(self.span.kind, "row")
        return f"{self.name} ({Path(self.path).name} from {what} {self.span.first})"

    def absolute(self) -> UnitSpec:
        """This unit with its file named as every node of a shared filesystem names it (a Ray worker runs in
        its node's directory, not the driver's)."""
        return replace(self, path=os.path.abspath(self.path),
                       span=replace(self.span, path=os.path.abspath(self.span.path)))


@dataclass(frozen=True)
class UnitIndex:
    """Per-record facts of one unit, in record order; tokens live in the unit's spill files.

    ``reasons`` and ``formats`` are a code a record into the unit's distinct strings (`TextColumn`): an
    accepted record's reason is "", and a unit reads a format or two. ``keys``: each record's content key
    (`NO_KEY` where it did not parse) when the run deduplicates.
    """

    example_ids: npt.NDArray[np.int64]
    lines: npt.NDArray[np.int64]
    status: npt.NDArray[np.int8]
    reasons: TextColumn
    lengths: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    seconds: dict[str, float]
    guard: dict[str, int]  # the tokenizer guard's counters for this unit (`LoadedTokenizer.guard_counts`)
    formats: TextColumn  # the format each record was read as ("" when not recognised)
    warnings: InputWarnings
    resumed: bool = False  # read back from a finished unit of an earlier run
    keys: np.ndarray | None = None  # dtype V16


@dataclass(frozen=True)
class UnitFacts:
    """What the run keeps of a finished unit beside its records' facts (those go to `UnitSpool`'s columns)."""

    records: int
    tokens: int  # spilled: the accepted records' lengths summed
    seconds: dict[str, float]
    guard: dict[str, int]
    warnings: InputWarnings
    resumed: bool


@dataclass(frozen=True)
class ExampleIndex:
    """Per-record facts in input order; token ids and labels live in the merged spill."""

    ids: np.ndarray
    file_index: np.ndarray
    line: np.ndarray
    status: np.ndarray
    reason: TextColumn
    spill_offset: np.ndarray
    length: np.ndarray
    supervised: np.ndarray
    records_per_file: list[int]
    format: TextColumn
    warnings: InputWarnings
    keys: np.ndarray | None = None


_RELEASE_ROWS = 1 << 20  # rows the merge writes between two `Scratch.release` calls

_SPOOLED = {"example_ids": np.int64, "lines": np.int64, "status": np.int8, "lengths": np.int64,
            "supervised": np.int64}  # UnitIndex's numeric columns; reasons and formats go as codes, keys as V16


class UnitSpool:
    """The units' per-record facts as units finish (``add``, an engine's ``on_done``), merged into the run's
    `ExampleIndex` when all are in (``merge``).

    The driver would otherwise hold every unit's `UnitIndex` until the merge, about 50 bytes a record in
    anonymous memory that the heap keeps after (docs/benchmarks-pipeline.md, memory). Here each finished
    unit's columns are appended to one `Appended` column each (a file under ``scratch``'s folder in
    ``pack``'s driver), in completion order, and ``merge`` copies them unit by unit into the index's columns
    in unit order; reasons and formats become codes into the run's distinct strings as they arrive.
    ``add`` may be called from two threads at once (`packcli.engine.pool.SharedPool.map`).
    """

    def __init__(self, specs: Sequence[UnitSpec], scratch: Scratch = IN_MEMORY, *, keys: bool = False) -> None:
        self.specs, self.scratch = list(specs), scratch
        self.facts: list[UnitFacts | None] = [None] * len(self.specs)
        self._start: list[int] = [0] * len(self.specs)  # each unit's first row in the appended columns
        names = [*_SPOOLED, "reasons", "formats", *(["keys"] if keys else [])]
        kinds = [*_SPOOLED.values(), np.int32, np.int32, *([np.dtype("V16")] if keys else [])]
        self._columns = {name: scratch.appended(kind) for name, kind in zip(names, kinds)}
        self._texts = {"reasons": ([], {}), "formats": ([], {})}  # the run's distinct strings, and their codes
        self._lock = threading.Lock()

    def add(self, spec: UnitSpec, unit: UnitIndex) -> None:
        """Keep a finished unit: its columns appended, its strings as codes, its other facts as `UnitFacts`."""
        with self._lock:
            columns = {name: getattr(unit, name) for name in _SPOOLED}
            for name, (names, index) in self._texts.items():
                texts: TextColumn = getattr(unit, name)
                ours = np.array([code_of(text, names, index) for text in texts.names], np.int32)
                columns[name] = ours[texts.codes] if len(texts) else texts.codes
            if "keys" in self._columns:
                if unit.keys is None:
                    raise ValueError(f"{spec.label}: no content keys in a run that deduplicates")
                columns["keys"] = unit.keys
            if len({len(values) for values in columns.values()}) != 1:  # before any is appended: all stay aligned
                raise ValueError(f"{spec.label}: its columns differ in length")
            starts = [self._columns[name].append(values) for name, values in columns.items()]
            self._start[spec.index] = starts[0]
            self.facts[spec.index] = UnitFacts(len(unit.lines), int(unit.lengths.sum()), unit.seconds, unit.guard,
                                               unit.warnings, unit.resumed)

    def merge(self, num_files: int) -> ExampleIndex:
        """Every unit's records in unit order (input order) as the run's `ExampleIndex`, in ``scratch``'s
        columns; ``spill_offset`` counts tokens over the units in order, as `SpillReader` reads them (-1 for a
        rejected record, which has none). The appended columns go after."""
        missing = [spec.label for spec, facts in zip(self.specs, self.facts) if facts is None]
        if missing:
            raise ValueError(f"units not finished: {', '.join(missing[:3])}")
        facts: list[UnitFacts] = self.facts  # type: ignore[assignment]
        n = sum(f.records for f in facts)
        scratch = self.scratch
        merged = {name: scratch.empty(n, column.dtype) for name, column in self._columns.items()}
        file_index = scratch.empty(n, np.int32)
        at = released = 0
        for spec, unit, start in zip(self.specs, facts, self._start):
            rows = slice(at, at + unit.records)
            for name, column in self._columns.items():
                column.read_into(start, merged[name][rows])
            file_index[rows] = spec.file_index
            at += unit.records
            if at - released >= _RELEASE_ROWS:  # the pages written so far go back (`Scratch.release`)
                scratch.release()
                released = at
        self.close()
        lengths, status = merged["lengths"], merged["status"]
        offsets = scratch.empty(n, np.int64)
        if n:
            offsets[0] = 0
            np.cumsum(lengths[:-1], out=offsets[1:])
            offsets[status == REJECTED] = -1
        warnings = InputWarnings()
        for unit in facts:
            warnings.add(unit.warnings)
        reasons, formats = (TextColumn(merged[name], *self._texts[name]) for name in ("reasons", "formats"))
        return ExampleIndex(ids=merged["example_ids"], file_index=file_index, line=merged["lines"], status=status,
                            reason=reasons, spill_offset=offsets, length=lengths, supervised=merged["supervised"],
                            records_per_file=np.bincount(file_index, minlength=num_files).tolist(), format=formats,
                            warnings=warnings, keys=merged.get("keys"))

    def close(self) -> None:
        """Let the appended columns go (their files too): after the merge, or when the run fails."""
        for column in self._columns.values():
            column.close()


def occurrences(sha256s: Sequence[str]) -> list[int]:
    """For each input (by its sha256, in run order), how many earlier inputs have the same sha256 (the
    same file given twice): the ``occurrence`` of `packcli.contract.example_id`."""
    seen: dict[str, int] = {}
    out = []
    for sha in sha256s:
        out.append(seen.get(sha, 0))
        seen[sha] = out[-1] + 1
    return out


def plan_units(files: list[InputFile], lines_per_unit: int) -> list[UnitSpec]:
    """Split every input into units of about ``lines_per_unit`` records (`packcli.ingest.Reader.split`)."""
    specs: list[UnitSpec] = []
    for fi, (f, occurrence) in enumerate(zip(files, occurrences([f.sha256 for f in files]))):
        for span in reader(f.kind).split(f, lines_per_unit):
            specs.append(UnitSpec(len(specs), fi, f.path, f.sha256, occurrence, span))
    return specs


def iter_unit_lines(spec: UnitSpec) -> Iterator[tuple[int, bytes | dict]]:
    """(record number, payload) of every record of the unit.

    Raises:
        InputError: the input cannot be read or decompressed.
    """
    return read_span(spec.span)


def unit_batches(spec: UnitSpec, size: int) -> Iterator[list[tuple[int, int, bytes | dict]]]:
    """The unit's records as ``(file index, record number, payload)``, in batches of ``size`` (the last
    one shorter): what `packcli.prepare.Preparer.prepare` takes, for pack, stats and verify alike.

    Raises:
        InputError: the input cannot be read or decompressed.
    """
    batch: list[tuple[int, int, bytes | dict]] = []
    for line, raw in iter_unit_lines(spec):
        batch.append((spec.file_index, line, raw))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass(frozen=True)
class UnitJob:
    """What every unit of a run shares; picklable, so a remote worker can rebuild the preparer."""

    spec: PrepareSpec  # the tokenizer, template and policies every worker prepares records with
    batch_records: int
    fail_fast: bool
    work_dir: str
    config_hash: str
    command: str = "pack"  # the command a refusal names (`packcli.prepare.TokenizerRef.check`): stats shares the job

    def absolute(self) -> UnitJob:
        """This job with its tokenizer and work folder named as every node of a shared filesystem names them
        (for an engine whose workers do not share this process's paths: `packcli.engine.Engine.shares_paths`)."""
        return replace(self, spec=self.spec.absolute(), work_dir=os.path.abspath(self.work_dir))

    def build_preparer(self) -> Preparer:
        """The tokenizer, template and renderer this job names (`packcli.prepare.preparer_for` caches it)."""
        return self.spec.build_preparer(self.command)


def run_unit(job: UnitJob, spec: UnitSpec) -> UnitIndex:
    """Tokenize one unit into ``work_dir/unit-NNNNN.{ids,labels}.bin`` plus a sidecar, or reuse a
    finished unit of the same configuration (resume)."""
    work_dir = Path(job.work_dir)
    done = _load_sidecar(spec, work_dir, job.config_hash)
    if done is not None:
        return done
    preparer = preparer_for(job)
    before, guard_before = dict(preparer.seconds), unit_counts(preparer)
    ids_path, labels_path = spill_paths(work_dir, spec.name)
    eids, lines, status, reasons, lengths, sup, formats, keys = [], [], [], [], [], [], [], []
    warnings = InputWarnings()

    def flush(batch: list[tuple[int, int, bytes | dict]]) -> None:
        prepared = preparer.prepare(batch, source=spec.path)
        formats.extend(prepared.formats)
        warnings.add(prepared.warnings)
        kept_lengths, kept_sup = prepared.encoded.lengths.tolist(), prepared.supervised.tolist()
        if prepared.keys is not None:
            keys.extend(NO_KEY if k is None else k for k in prepared.keys)
        for (_, line, _), row in zip(batch, prepared.rows):
            eids.append(example_id(spec.file_sha256, spec.occurrence, line))
            lines.append(line)
            if isinstance(row, str):
                if job.fail_fast:
                    raise RecordError(spec.path, line, row)
                status.append(REJECTED), reasons.append(row), lengths.append(0), sup.append(0)
                continue
            status.append(PACKED), reasons.append(""), lengths.append(kept_lengths[row]), sup.append(kept_sup[row])
        ids_out.write(prepared.encoded.ids.tobytes())  # the accepted examples, end to end in record order
        labels_out.write(prepared.encoded.labels.tobytes())

    ids_tmp, labels_tmp = attempt_path(ids_path), attempt_path(labels_path)
    try:
        with open(ids_tmp, "wb") as ids_out, open(labels_tmp, "wb") as labels_out:
            for batch in unit_batches(spec, job.batch_records):
                flush(batch)
        ids_tmp.replace(ids_path)
        labels_tmp.replace(labels_path)
    finally:
        ids_tmp.unlink(missing_ok=True)
        labels_tmp.unlink(missing_ok=True)
    pause_at("unit", spec.name)  # spills written, sidecar not yet: what a kill mid-unit leaves
    index = UnitIndex(np.asarray(eids, np.int64), np.asarray(lines, np.int64), np.asarray(status, np.int8),
                      TextColumn.of([reasons]), np.asarray(lengths, np.int64), np.asarray(sup, np.int64),
                      {k: v - before[k] for k, v in preparer.seconds.items()},
                      {k: v - guard_before[k] for k, v in unit_counts(preparer).items()}, TextColumn.of([formats]),
                      warnings,
                      keys=_keys(keys) if job.spec.keys else None)
    _write_sidecar(spec, work_dir, job.config_hash, index)
    return index


def unit_counts(preparer: Preparer) -> dict[str, int]:
    """The tokenizer guard's counters and the renderer's (``render_``-prefixed), as a unit sums them."""
    counts = preparer.tokenizer.guard_counts()
    counts.update({f"render_{k}": v for k, v in preparer.renderer.render_counts.items()})
    return counts


def attempt_path(path: Path) -> Path:
    """A name of its own for one attempt at writing ``path``, renamed into place when whole. A task that Ray
    re-runs (its node was lost) may still be running where it was: each attempt writes its own file, and
    the same bytes, so ``path`` is always one attempt's whole file."""
    return path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")


def _write_sidecar(spec: UnitSpec, work_dir: Path, config_hash: str, index: UnitIndex) -> None:
    data = {"config_hash": config_hash, "spec": asdict(spec), "example_ids": index.example_ids.tolist(),
            "lines": index.lines.tolist(), "status": index.status.tolist(), "reasons": index.reasons[:],
            "lengths": index.lengths.tolist(), "supervised": index.supervised.tolist(), "seconds": index.seconds,
            "guard": index.guard, "formats": index.formats[:], "warnings": index.warnings.to_dict(),
            "keys": None if index.keys is None else [k.tobytes().hex() for k in index.keys]}
    tmp = attempt_path(work_dir / f"{spec.name}.json")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.rename(work_dir / f"{spec.name}.json")  # the sidecar appears last: its presence means "finished"


def _load_sidecar(spec: UnitSpec, work_dir: Path, config_hash: str) -> UnitIndex | None:
    path = work_dir / f"{spec.name}.json"
    ids_path, labels_path = spill_paths(work_dir, spec.name)
    if not (path.is_file() and ids_path.is_file() and labels_path.is_file()):
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data["config_hash"] != config_hash or data["spec"] != asdict(spec):
        return None
    lengths = np.asarray(data["lengths"], np.int64)
    if ids_path.stat().st_size != 4 * int(lengths.sum()) or labels_path.stat().st_size != ids_path.stat().st_size:
        return None
    keys = None if data["keys"] is None else _keys([bytes.fromhex(k) for k in data["keys"]])
    return UnitIndex(np.asarray(data["example_ids"], np.int64), np.asarray(data["lines"], np.int64),
                     np.asarray(data["status"], np.int8), TextColumn.of([data["reasons"]]), lengths,
                     np.asarray(data["supervised"], np.int64), {k: 0.0 for k in data["seconds"]}, data["guard"],
                     TextColumn.of([data["formats"]]), InputWarnings.from_dict(data["warnings"]), resumed=True, keys=keys)


def _keys(keys: list[bytes]) -> np.ndarray:
    """Content keys as one array of 16-byte items (sortable, so duplicates are found with `np.unique`)."""
    return np.frombuffer(b"".join(keys), dtype="V16").copy() if keys else np.zeros(0, dtype="V16")


def count_finished_units(work_dir: Path, config_hash: str | None) -> int:
    """Units in ``work_dir`` that a re-run can reuse: sidecar and spills present and, given
    ``config_hash``, made with it. Reads only the start of each sidecar (its hash is written first),
    so it needs no unit plan and stays quick when an interrupt asks."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        return 0
    head = None if config_hash is None else json.dumps({"config_hash": config_hash})[:-1]
    count = 0
    for sidecar in work_dir.glob("unit-*.json"):
        if not all(p.is_file() for p in spill_paths(work_dir, sidecar.name.removesuffix(".json"))):
            continue
        if head is not None:
            with open(sidecar, encoding="utf-8") as handle:
                if not handle.read(len(head)) == head:
                    continue
        count += 1
    return count
