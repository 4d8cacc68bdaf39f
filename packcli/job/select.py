"""Which records become which seam-table rows: exact duplicates (``--dedupe exact``), mixture copies
(``--mix``) and the chunks of split examples (``--overlong split``).

These decisions need every record's facts at once, so they run in the driver on the merged
`ExampleIndex`, after tokenizing and before packing:

    records --mark_duplicates--> a duplicate keeps its row, status ``duplicate``, reason naming the first
            --apply_overlong---> (packcli.job.plan) over-long ones dropped, truncated or split
            --expand_copies----> one row per example: a record with k copies has k rows (copy 0..k-1),
                                 a usable record the mixture drew 0 times one row, status ``unsampled``
            --expand_chunks----> one row per chunk of a split example (chunk 0..n-1), each copy its own

Every record keeps at least one seam-table row whatever happens to it, so counts add up and
``verify`` can account for every record, every copy and every chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from packcli.contract import DUPLICATE, IN_PACK_CODES, UNSAMPLED, example_id
from packcli.ingest import InputFile
from packcli.job.fates import Fates, split_rows
from packcli.job.scratch import IN_MEMORY, Scratch, take_texts
from packcli.job.units import NO_KEY, ExampleIndex, occurrences
from packcli.mix import Mixture, describe


def duplicate_reason(name: str, line: int, input_index: int) -> str:
    """How a duplicate's seam-table reason names the first record with its content: by the input's
    name (location-free), the record's number and the input's index (two inputs may share a name)."""
    return f"exact duplicate of {name}:{line} (input {input_index})"


def mark_duplicates(index: ExampleIndex, files: Sequence[InputFile]) -> int:
    """Mark every record whose content key equals an earlier record's as ``duplicate`` (in place);
    return how many. Records that did not parse have no key and are never duplicates."""
    keys = index.keys
    if keys is None or not len(keys):
        return 0
    has_key = keys != np.frombuffer(NO_KEY, dtype="V16")[0]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    first_of = first[inverse.reshape(-1)]  # per record, the first record with its key
    dup = np.flatnonzero(has_key & (first_of != np.arange(len(keys))))
    for i in dup.tolist():
        j = int(first_of[i])
        index.status[i] = DUPLICATE
        k = int(index.file_index[j])
        index.reason[i] = duplicate_reason(files[k].name, int(index.line[j]), k)
    return len(dup)


def unsampled_reason(mixture: Mixture, input_index: int) -> str:
    """The seam-table reason of a usable record the mixture drew no copy of (``verify`` expects it too)."""
    weight = next(describe(mixture.by, s.weight) for s in mixture.sources if input_index in s.inputs)
    return f"not drawn by the mixture ({weight})"


@dataclass(frozen=True)
class Examples:
    """The rows of a run's seam table, in input order: one per example (a record's copies are examples of
    their own), or, after `expand_chunks`, one per chunk of a split example. ``index.spill_offset`` and
    ``span`` say where a row's tokens are in the spills and how many (a chunk's, or the whole example's)."""

    index: ExampleIndex
    fates: Fates
    record: npt.NDArray[np.int64]  # the record (row of the per-record index) each row is of
    copy: npt.NDArray[np.int32]
    chunk: npt.NDArray[np.int32]
    chunk_start: npt.NDArray[np.int64]  # where the chunk starts in its example (0 for a whole example)
    span: npt.NDArray[np.int64]

    @classmethod
    def whole(cls, index: ExampleIndex, fates: Fates, record: npt.NDArray[np.int64],
              copy: npt.NDArray[np.int32], scratch: Scratch = IN_MEMORY) -> Examples:
        """Rows that are whole examples (no chunks yet)."""
        n = len(record)
        return cls(index, fates, record, copy, scratch.zeros(n, np.int32), scratch.zeros(n, np.int64),
                   scratch.put(index.length, np.int64))


def expand_copies(index: ExampleIndex, fates: Fates, copies: npt.NDArray[np.int64] | None, files: Sequence[InputFile],
                  mixture: Mixture | None, scratch: Scratch = IN_MEMORY) -> Examples:
    """One row per example: ``copies[i]`` rows for a usable record, one for any other (see the module docstring).

    Without a mixture every record is one example (copy 0) and nothing changes. ``scratch``: where the new
    per-row columns live (`packcli.job.scratch`).
    """
    n = len(index.ids)
    if copies is None:
        record = scratch.empty(n, np.int64)
        record[...] = np.arange(n, dtype=np.int64)
        return Examples.whole(index, fates, record, scratch.zeros(n, np.int32), scratch)
    usable = np.isin(fates.status, IN_PACK_CODES)
    reps = np.where(usable, np.maximum(copies, 1), 1)
    record = np.repeat(np.arange(n, dtype=np.int64), reps)
    starts = np.concatenate([[0], np.cumsum(reps)[:-1]])
    copy = (np.arange(len(record)) - np.repeat(starts, reps)).astype(np.int32)
    rows = fates.take(record)
    for row in np.flatnonzero(usable[record] & (copies[record] == 0)).tolist():
        rows.status[row], rows.used_len[row], rows.used_sup[row], rows.lost[row] = UNSAMPLED, 0, 0, 0
        rows.reasons[row] = unsampled_reason(mixture, int(index.file_index[record[row]]))
    ids = index.ids[record].copy()
    occurrence = occurrences([f.sha256 for f in files])
    for row in np.flatnonzero(copy > 0).tolist():
        r, fi = int(record[row]), int(index.file_index[record[row]])
        ids[row] = example_id(files[fi].sha256, occurrence[fi], int(index.line[r]), int(copy[row]))
    return Examples.whole(_index_rows(index, record, ids, rows), rows, record, copy, scratch)


def expand_chunks(examples: Examples) -> Examples:
    """One row per chunk of every split example (`packcli.job.fates.split_rows`), each pointing at its
    chunk's tokens in the spills; other rows stay as they are."""
    fates = examples.fates
    if not fates.cuts:
        return examples
    chunked = split_rows(fates, examples.index.length, key=examples.record)
    rows = chunked.example
    index = _index_rows(examples.index, rows, examples.index.ids[rows], chunked.fates)
    index = replace(index, spill_offset=np.where(index.spill_offset < 0, -1, index.spill_offset + chunked.chunk_start))
    return Examples(index, chunked.fates, examples.record[rows], examples.copy[rows], chunked.chunk,
                    chunked.chunk_start, chunked.span)


def _index_rows(index: ExampleIndex, rows: npt.NDArray[np.int64], ids: npt.NDArray[np.int64],
                fates: Fates) -> ExampleIndex:
    """``index`` at ``rows`` (a row may repeat), with these ids and fates' statuses and reasons."""
    return replace(index, ids=ids, file_index=index.file_index[rows], line=index.line[rows], status=fates.status,
                   reason=fates.reasons, spill_offset=index.spill_offset[rows], length=index.length[rows],
                   supervised=index.supervised[rows], format=take_texts(index.format, rows),
                   keys=None if index.keys is None else index.keys[rows])
