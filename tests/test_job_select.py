"""`packcli.job.select`: which records become which seam-table rows. Exact duplicates marked against the
first record with their content, a mixture's copies (and the records it drew none of), and one row per
chunk of a split example; every record keeps at least one row."""

from __future__ import annotations

import numpy as np

from packcli.choices import Overlong
from packcli.contract import DUPLICATE, IGNORE_INDEX, PACKED, REJECTED, SPLIT, UNSAMPLED, example_id
from packcli.ingest import InputFile, SourceKind
from packcli.job.chunks import SplitRule, cut_example
from packcli.job.fates import Fates, decide_fates
from packcli.job.select import expand_chunks, expand_copies, mark_duplicates
from packcli.job.units import NO_KEY, ExampleIndex
from packcli.mix import Mixture
from packcli.prepare import InputWarnings

FILES = [InputFile(f"/data/{name}", SourceKind.jsonl, (f"/data/{name}",), 100, sha * 32)
         for name, sha in (("a.jsonl", "aa"), ("b.jsonl", "bb"))]
KEY, OTHER = b"k" * 16, b"o" * 16


def index(status: list[int], keys: list[bytes] | None = None, length: list[int] | None = None) -> ExampleIndex:
    """Records 0..n-1: the first three of a.jsonl (lines 1, 2, 3), the rest of b.jsonl (lines 1, 2, ...)."""
    n = len(status)
    file_index = np.array([0 if i < 3 else 1 for i in range(n)], np.int32)
    line = np.array([i + 1 if i < 3 else i - 2 for i in range(n)], np.int64)
    length = np.array(length or [4] * n, np.int64)
    ids = np.array([example_id(FILES[f].sha256, 0, int(ln)) for f, ln in zip(file_index, line)], np.int64)
    offsets = np.concatenate([[0], np.cumsum(length)[:-1]])
    return ExampleIndex(ids=ids, file_index=file_index, line=line, status=np.array(status, np.int8),
                        reason=[""] * n, spill_offset=offsets, length=length, supervised=length - 1,
                        records_per_file=np.bincount(file_index, minlength=2).tolist(), format=["text"] * n,
                        warnings=InputWarnings(),
                        keys=None if keys is None else np.array(keys, dtype="V16"))


def whole_fates(idx: ExampleIndex) -> Fates:
    packed = idx.status == PACKED
    return Fates(idx.status.copy(), np.where(packed, idx.length, 0), np.where(packed, idx.supervised, 0),
                 np.zeros(len(idx.status), np.int64), list(idx.reason))


def test_a_duplicate_names_the_first_record_with_its_content_and_unparsed_records_never_match():
    idx = index([PACKED, PACKED, PACKED, PACKED, REJECTED, REJECTED], keys=[KEY, OTHER, KEY, KEY, NO_KEY, NO_KEY])
    assert mark_duplicates(idx, FILES) == 2
    assert idx.status.tolist() == [PACKED, PACKED, DUPLICATE, DUPLICATE, REJECTED, REJECTED]
    assert idx.reason[2] == idx.reason[3] == "exact duplicate of a.jsonl:1 (input 0)"
    assert idx.reason[4] == idx.reason[5] == ""


def test_without_content_keys_nothing_is_a_duplicate():
    idx = index([PACKED, PACKED])
    assert mark_duplicates(idx, FILES) == 0 and idx.status.tolist() == [PACKED, PACKED]


def test_without_a_mixture_every_record_is_one_example():
    idx = index([PACKED, REJECTED, PACKED])
    rows = expand_copies(idx, whole_fates(idx), None, FILES, None)
    assert rows.record.tolist() == [0, 1, 2] and rows.copy.tolist() == [0, 0, 0]
    assert rows.index.ids.tolist() == idx.ids.tolist() and rows.span.tolist() == [4, 4, 4]


def test_a_mixture_gives_each_copy_its_row_and_id_and_keeps_a_row_for_every_record():
    idx = index([PACKED, PACKED, REJECTED, PACKED])
    mixture = Mixture.from_manifest({"by": "proportion", "sources": [{"inputs": [0], "weight": 0.5},
                                                                     {"inputs": [1], "weight": 0.5}]})
    rows = expand_copies(idx, whole_fates(idx), np.array([2, 0, 3, 1]), FILES, mixture)
    assert rows.record.tolist() == [0, 0, 1, 2, 3] and rows.copy.tolist() == [0, 1, 0, 0, 0]
    assert rows.index.ids[0] == idx.ids[0] and rows.index.ids[1] == example_id(FILES[0].sha256, 0, 1, copy=1)
    assert rows.fates.status.tolist() == [PACKED, PACKED, UNSAMPLED, REJECTED, PACKED]  # a reject: one row
    assert rows.fates.reasons[2] == "not drawn by the mixture (0.5)" and rows.fates.used_len[2] == 0


def test_a_split_example_becomes_one_row_per_chunk_pointing_at_its_tokens():
    rule = SplitRule(8, overlap=2)
    idx = index([PACKED, PACKED], length=[12, 5])
    labels = np.arange(12, dtype=np.int32)
    labels[0] = IGNORE_INDEX
    fates = decide_fates(idx.status, idx.length, idx.supervised, list(idx.reason), rule, Overlong.split,
                         lambda i: cut_example(labels, rule))
    whole = expand_copies(idx, fates, None, FILES, None)
    rows = expand_chunks(whole)
    assert rows.record.tolist() == [0, 0, 1] and rows.chunk.tolist() == [0, 1, 0]
    assert rows.fates.status.tolist() == [SPLIT, SPLIT, PACKED]
    assert rows.chunk_start.tolist() == [0, 6, 0] and rows.span.tolist() == [8, 6, 5]
    assert rows.index.spill_offset.tolist() == [0, 6, 12]  # the chunk's first token in the spills
    assert rows.index.ids.tolist() == [idx.ids[0], idx.ids[0], idx.ids[1]]  # chunks share their example's id


def test_without_a_split_example_the_rows_stay_as_they_are():
    idx = index([PACKED, PACKED])
    whole = expand_copies(idx, whole_fates(idx), None, FILES, None)
    assert expand_chunks(whole) is whole
