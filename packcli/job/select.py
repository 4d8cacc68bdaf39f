"""Which records become which examples: exact duplicates (``--dedupe exact``) and mixture copies (``--mix``).

Both decisions need every record's facts at once, so they run in the driver on the merged
`ExampleIndex`, after tokenizing and before packing:

    records --mark_duplicates--> a duplicate keeps its row, status ``duplicate``, reason naming the first
            --apply_overlong---> (packcli.job.plan) over-long ones dropped or truncated
            --expand_copies----> one row per example: a record with k copies has k rows (copy 0..k-1),
                                 a usable record the mixture drew 0 times one row, status ``unsampled``

Every record keeps at least one seam-table row whatever happens to it, so counts add up and
``verify`` can account for every record and every copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from packcli.contract import DUPLICATE, PACKED, TRUNCATED, UNSAMPLED, example_id
from packcli.ingest import InputFile
from packcli.job.units import NO_KEY, ExampleIndex, occurrences
from packcli.mix import Mixture, describe

if TYPE_CHECKING:  # job.plan imports the packing kernels (numba), which verify's use of this module never needs
    from packcli.job.plan import Fates


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
    """The examples of a run, one row each (a record's copies are rows of their own), in input order."""

    index: ExampleIndex
    fates: Fates
    record: npt.NDArray[np.int64]  # the record (row of the per-record index) each example is a copy of
    copy: npt.NDArray[np.int32]


def expand_copies(index: ExampleIndex, fates: Fates, copies: npt.NDArray[np.int64] | None, files: Sequence[InputFile],
                  mixture: Mixture | None) -> Examples:
    """One row per example: ``copies[i]`` rows for a usable record, one for any other (see the module docstring).

    Without a mixture every record is one example (copy 0) and nothing changes.
    """
    from packcli.job.plan import Fates

    n = len(index.ids)
    if copies is None:
        return Examples(index, fates, np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int32))
    usable = (fates.status == PACKED) | (fates.status == TRUNCATED)
    reps = np.where(usable, np.maximum(copies, 1), 1)
    record = np.repeat(np.arange(n, dtype=np.int64), reps)
    starts = np.concatenate([[0], np.cumsum(reps)[:-1]])
    copy = (np.arange(len(record)) - np.repeat(starts, reps)).astype(np.int32)
    status = fates.status[record].copy()
    reasons = [fates.reasons[r] for r in record.tolist()]
    used_len, used_sup = fates.used_len[record].copy(), fates.used_sup[record].copy()
    for row in np.flatnonzero(usable[record] & (copies[record] == 0)).tolist():
        status[row], used_len[row], used_sup[row] = UNSAMPLED, 0, 0
        reasons[row] = unsampled_reason(mixture, int(index.file_index[record[row]]))
    ids = index.ids[record].copy()
    occurrence = occurrences([f.sha256 for f in files])
    for row in np.flatnonzero(copy > 0).tolist():
        r, fi = int(record[row]), int(index.file_index[record[row]])
        ids[row] = example_id(files[fi].sha256, occurrence[fi], int(index.line[r]), int(copy[row]))
    expanded = replace(index, ids=ids, file_index=index.file_index[record], line=index.line[record],
                       status=status, reason=reasons, spill_offset=index.spill_offset[record],
                       length=index.length[record], supervised=index.supervised[record],
                       format=[index.format[r] for r in record.tolist()],
                       keys=None if index.keys is None else index.keys[record])
    return Examples(expanded, Fates(status, used_len, used_sup, reasons), record, copy)
