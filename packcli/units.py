"""Units of work: contiguous line ranges of one input file, tokenized independently.

A unit is what an engine schedules (locally in a loop, or as one Ray task): it reads its byte range,
parses, renders and tokenizes, and writes its tokens and labels to its own spill files with a small
sidecar index. Everything a unit produces depends only on its spec and the run's configuration, so
any engine, any worker count and any order of completion give the same bytes.

Plain files are split every ``lines_per_unit`` physical lines at byte offsets found by one fast scan;
a compressed file cannot be entered in the middle, so it is a single unit.

A sidecar records the configuration hash, so a re-run with the same configuration reuses finished
units (resume) and never mixes units of different configurations.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.errors import PackcliError, RecordError
from packcli.ingest import InputFile, open_binary, read_errors
from packcli.prepare import Preparer, example_id
from packcli.tokenization import LoadedTokenizer, load_tokenizer

STATUSES = ("packed", "truncated", "dropped", "rejected")  # a record's fate, as the seam table spells it
PACKED, TRUNCATED, DROPPED, REJECTED = range(4)


@dataclass(frozen=True)
class UnitSpec:
    """Lines ``first_line`` .. of ``path`` from ``byte_start`` to ``byte_end`` (-1: to the end)."""

    index: int
    file_index: int
    path: str
    file_sha256: str
    first_line: int
    byte_start: int
    byte_end: int

    @property
    def name(self) -> str:
        return f"unit-{self.index:05d}"


@dataclass(frozen=True)
class UnitIndex:
    """Per-record facts of one unit, in line order; tokens live in the unit's spill files."""

    example_ids: npt.NDArray[np.int64]
    lines: npt.NDArray[np.int32]
    status: npt.NDArray[np.int8]
    reasons: list[str]
    lengths: npt.NDArray[np.int64]
    supervised: npt.NDArray[np.int64]
    seconds: dict[str, float]
    guard: dict[str, int]  # the tokenizer guard's counters for this unit (`LoadedTokenizer.guard_counts`)


def plan_units(files: list[InputFile], lines_per_unit: int) -> list[UnitSpec]:
    """Split every input into units of at most ``lines_per_unit`` physical lines."""
    specs: list[UnitSpec] = []
    for fi, f in enumerate(files):
        compressed = f.path.name.lower().endswith((".gz", ".zst"))
        bounds = [(1, 0)] if compressed else _line_starts(f.path, lines_per_unit)
        for k, (line, start) in enumerate(bounds):
            end = bounds[k + 1][1] if k + 1 < len(bounds) else -1
            specs.append(UnitSpec(len(specs), fi, str(f.path), f.sha256, line, start, end))
    return specs


def _line_starts(path: Path, every: int) -> list[tuple[int, int]]:
    """(line number, byte offset) of line 1, 1+every, 1+2*every, ... in one pass over the bytes."""
    starts = [(1, 0)]
    seen = 0  # newlines seen so far
    offset = 0
    size = path.stat().st_size
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            # line L starts after newline number L-1; we want L = 1 + k*every
            wanted = np.arange(((seen // every) + 1) * every, seen + len(newlines) + 1, every)
            for w in wanted:
                pos = offset + int(newlines[w - seen - 1]) + 1
                if pos < size:
                    starts.append((int(w) + 1, pos))
            seen += len(newlines)
            offset += len(block)
    return starts


def iter_unit_lines(spec: UnitSpec) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of every non-blank line of the unit.

    Raises:
        InputError: the file cannot be read or decompressed.
    """
    with read_errors(spec.path), open_binary(spec.path) as handle:
        if spec.byte_start:
            handle.seek(spec.byte_start)
        position = spec.byte_start
        for number, raw in enumerate(handle, start=spec.first_line):
            if spec.byte_end >= 0 and position >= spec.byte_end:
                return
            position += len(raw)
            if raw.strip():
                yield number, raw


@dataclass(frozen=True)
class UnitJob:
    """What every unit of a run shares; picklable, so a remote worker can rebuild the preparer."""

    tokenizer: str
    tokenizer_backend: str  # "hf" or "fast", as the driver resolved it: every worker encodes alike
    tokenizer_backend_version: str  # and the version the driver loaded: a worker with another refuses
    paranoid_tokenizer: bool
    template: str
    loss: str
    input_format: str
    batch_records: int
    fail_fast: bool
    work_dir: str
    config_hash: str

    def preparer(self) -> Preparer:
        """Build (once per process) the tokenizer, template and renderer this job names."""
        cached = _PREPARERS.get(self)
        if cached is None:
            from packcli.chat import LossPolicy, Renderer, load_template
            from packcli.ingest import Format

            tok = _WARM.pop((self.tokenizer, self.paranoid_tokenizer), None)
            if tok is None or backend_choice(tok) != self.tokenizer_backend:  # not warmed, or resolved otherwise
                tok = load_tokenizer(self.tokenizer, backend=self.tokenizer_backend, paranoid=self.paranoid_tokenizer)
            if tok.backend_version != self.tokenizer_backend_version:
                raise PackcliError(f"this worker has {tok.backend_name} {tok.backend_version}; the driver resolved "
                                   f"{self.tokenizer_backend_version}", "install the same version on every node")
            renderer = Renderer(load_template(self.template, tok.config), LossPolicy(self.loss),
                                bos_token=tok.bos_token, eos_token=tok.eos_token)
            cached = _PREPARERS[self] = Preparer(renderer, tok, Format(self.input_format))
        return cached


_PREPARERS: dict[UnitJob, Preparer] = {}
_WARM: dict[tuple[str, bool], LoadedTokenizer] = {}


def warm_tokenizer(tokenizer: str, backend: str, paranoid: bool) -> None:
    """Load, in a worker that has nothing to do yet, the tokenizer its first unit will need.

    Run while the driver loads the same file (the driver resolves ``auto`` first, so the job names
    "hf" or "fast"); `UnitJob.preparer` takes it if it resolved the same way. About 4 s of a
    Qwen3-sized worker's start that no longer waits behind the driver's own load.
    """
    _WARM[(tokenizer, paranoid)] = load_tokenizer(tokenizer, backend=backend, paranoid=paranoid)


def backend_choice(tok: LoadedTokenizer) -> str:
    """``UnitJob.tokenizer_backend`` for a loaded tokenizer: "hf" for the reference, "fast" otherwise."""
    return "hf" if tok.backend_name == "tokenizers" else "fast"


def register_preparer(job: UnitJob, preparer: Preparer) -> None:
    """Let this process reuse a preparer the driver already built (the local engine's case)."""
    _PREPARERS[job] = preparer


def run_unit(job: UnitJob, spec: UnitSpec) -> UnitIndex:
    """Tokenize one unit into ``work_dir/unit-NNNNN.{ids,labels}.bin`` plus a sidecar, or reuse a
    finished unit of the same configuration (resume)."""
    work_dir = Path(job.work_dir)
    done = _load_sidecar(spec, work_dir, job.config_hash)
    if done is not None:
        return done
    preparer = job.preparer()
    before, guard_before = dict(preparer.seconds), preparer.tokenizer.guard_counts()
    ids_path, labels_path = spill_paths(work_dir, spec)
    eids, lines, status, reasons, lengths, sup = [], [], [], [], [], []
    batch: list[tuple[int, int, bytes]] = []

    def flush() -> None:
        prepared = preparer.prepare(batch, source=spec.path)
        kept_lengths, kept_sup = prepared.encoded.lengths.tolist(), prepared.supervised.tolist()
        for (_, line, _), row in zip(batch, prepared.rows):
            eids.append(example_id(spec.file_sha256, line))
            lines.append(line)
            if isinstance(row, str):
                if job.fail_fast:
                    raise RecordError(spec.path, line, row)
                status.append(REJECTED), reasons.append(row), lengths.append(0), sup.append(0)
                continue
            status.append(PACKED), reasons.append(""), lengths.append(kept_lengths[row]), sup.append(kept_sup[row])
        ids_out.write(prepared.encoded.ids.tobytes())  # the accepted examples, end to end in record order
        labels_out.write(prepared.encoded.labels.tobytes())
        batch.clear()

    with open(ids_path, "wb") as ids_out, open(labels_path, "wb") as labels_out:
        for line, raw in iter_unit_lines(spec):
            batch.append((spec.file_index, line, raw))
            if len(batch) == job.batch_records:
                flush()
        if batch:
            flush()
    index = UnitIndex(np.asarray(eids, np.int64), np.asarray(lines, np.int32), np.asarray(status, np.int8), reasons,
                      np.asarray(lengths, np.int64), np.asarray(sup, np.int64),
                      {k: v - before[k] for k, v in preparer.seconds.items()},
                      {k: v - guard_before[k] for k, v in preparer.tokenizer.guard_counts().items()})
    _write_sidecar(spec, work_dir, job.config_hash, index)
    return index


def spill_paths(work_dir: Path, spec: UnitSpec) -> tuple[Path, Path]:
    return work_dir / f"{spec.name}.ids.bin", work_dir / f"{spec.name}.labels.bin"


@dataclass(frozen=True)
class SpillLayout:
    """Where the units' spill files are, and at which global token offset each unit starts.

    Picklable and small (two paths a unit), so a shard-writing task on another process or node can
    open its own `SpillReader` on the shared work directory.
    """

    paths: tuple[tuple[str, str], ...]
    starts: tuple[int, ...]  # one more than there are units: the last is the total

    @classmethod
    def of(cls, work_dir: Path, specs: Sequence[UnitSpec], tokens_per_unit: Sequence[int]) -> SpillLayout:
        starts = np.concatenate([[0], np.cumsum(np.asarray(tokens_per_unit, dtype=np.int64))])
        return cls(tuple((str(a), str(b)) for a, b in (spill_paths(work_dir, spec) for spec in specs)),
                   tuple(int(x) for x in starts))


class SpillReader:
    """Reads examples' ids and labels from the units' spill files by global token offset.

    The offsets count tokens over the units in order (unit 0's tokens, then unit 1's, ...), which
    is how `packcli.pipeline.ExampleIndex` numbers them; an example never spans two units. Reads go
    through ``pread`` into the caller's arrays, not through a memory map: a map's pages count in the
    process's RSS while mapped, and the write stage reads examples in shuffled order, so over a run
    a map touched the whole spill (8 bytes a token: 2.1 GiB at 200k conversations). Read this way the
    spill stays in the page cache, which the kernel reclaims and RSS does not count.
    """

    MAX_OPEN = 64  # units whose files stay open (two descriptors each); reads come in unit order
    GAP = 1 << 14  # tokens (64 KiB a file): examples closer than this in a spill are read in one go

    def __init__(self, layout: SpillLayout) -> None:
        self.starts = np.asarray(layout.starts, dtype=np.int64)
        self._paths = layout.paths
        self._open: dict[int, tuple[int, int]] = {}  # unit -> descriptors, least recently opened first

    def read(self, offset: int, length: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """One example's (or its first ``length`` tokens') ids and labels."""
        ids, labels = np.empty(length, np.int32), np.empty(length, np.int32)
        self._read_into(int(offset), ids, labels)
        return ids, labels

    def gather(self, offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
               ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The examples at ``offsets`` (``lengths`` tokens each) end to end, in the order given.

        Read in file order, so the reads walk each spill forward whatever order the packs want, and
        examples of one unit less than `GAP` tokens apart are read together, one ``pread`` a file:
        a shard holding a good share of the corpus (few shards) makes a few large reads instead of
        two system calls an example, and a shard holding a sliver of it (many shards) reads no more
        than its examples and the short gaps between them.
        """
        ends = np.cumsum(lengths)
        total = int(ends[-1]) if len(ends) else 0
        ids, labels = np.empty(total, np.int32), np.empty(total, np.int32)
        order = np.argsort(offsets, kind="stable")
        at, n = offsets[order].astype(np.int64), lengths[order].astype(np.int64)
        reach = np.maximum.accumulate(at + n)  # the furthest token needed so far
        unit = np.searchsorted(self.starts, at, side="right") - 1
        new = np.ones(len(at), dtype=bool)
        new[1:] = (at[1:] > reach[:-1] + self.GAP) | (unit[1:] != unit[:-1])
        cuts = np.append(np.flatnonzero(new), len(at)).tolist()
        dest = (ends - lengths)[order].tolist()
        for a, b in zip(cuts[:-1], cuts[1:]):
            lo, hi = int(at[a]), int(reach[b - 1])
            run_ids, run_labels = np.empty(hi - lo, np.int32), np.empty(hi - lo, np.int32)
            self._read_into(lo, run_ids, run_labels)
            for start, size, to in zip((at[a:b] - lo).tolist(), n[a:b].tolist(), dest[a:b]):
                ids[to:to + size] = run_ids[start:start + size]
                labels[to:to + size] = run_labels[start:start + size]
        return ids, labels

    def _read_into(self, offset: int, ids: npt.NDArray[np.int32], labels: npt.NDArray[np.int32]) -> None:
        unit = int(np.searchsorted(self.starts, offset, side="right")) - 1
        at = 4 * (offset - int(self.starts[unit]))
        for fd, out in zip(self._descriptors(unit), (ids, labels)):
            view = memoryview(out).cast("B")
            done = 0
            while done < len(view):  # pread may return short reads
                got = os.preadv(fd, [view[done:]], at + done)
                if got == 0:
                    raise OSError(f"spill of unit {unit} ends early: expected {len(view)} bytes at {at}")
                done += got

    def _descriptors(self, unit: int) -> tuple[int, int]:
        fds = self._open.get(unit)
        if fds is None:
            if len(self._open) >= self.MAX_OPEN:
                for fd in self._open.pop(next(iter(self._open))):
                    os.close(fd)
            ids_fd = os.open(self._paths[unit][0], os.O_RDONLY)
            try:
                fds = self._open[unit] = (ids_fd, os.open(self._paths[unit][1], os.O_RDONLY))
            except BaseException:
                os.close(ids_fd)
                raise
        return fds

    def close(self) -> None:
        for pair in self._open.values():
            for fd in pair:
                os.close(fd)
        self._open = {}

    def __enter__(self) -> SpillReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_sidecar(spec: UnitSpec, work_dir: Path, config_hash: str, index: UnitIndex) -> None:
    data = {"config_hash": config_hash, "spec": asdict(spec), "example_ids": index.example_ids.tolist(),
            "lines": index.lines.tolist(), "status": index.status.tolist(), "reasons": index.reasons,
            "lengths": index.lengths.tolist(), "supervised": index.supervised.tolist(), "seconds": index.seconds,
            "guard": index.guard}
    tmp = work_dir / f"{spec.name}.json.tmp"
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.rename(work_dir / f"{spec.name}.json")  # the sidecar appears last: its presence means "finished"


def _load_sidecar(spec: UnitSpec, work_dir: Path, config_hash: str) -> UnitIndex | None:
    path = work_dir / f"{spec.name}.json"
    ids_path, labels_path = spill_paths(work_dir, spec)
    if not (path.is_file() and ids_path.is_file() and labels_path.is_file()):
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data["config_hash"] != config_hash or data["spec"] != asdict(spec):
        return None
    lengths = np.asarray(data["lengths"], np.int64)
    if ids_path.stat().st_size != 4 * int(lengths.sum()) or labels_path.stat().st_size != ids_path.stat().st_size:
        return None
    return UnitIndex(np.asarray(data["example_ids"], np.int64), np.asarray(data["lines"], np.int32),
                     np.asarray(data["status"], np.int8), data["reasons"], lengths,
                     np.asarray(data["supervised"], np.int64), {k: 0.0 for k in data["seconds"]}, data["guard"])
