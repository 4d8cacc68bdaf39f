"""`pack`'s driver keeps its per-example columns in files under the run's work folder (`packcli.job.scratch`):
the units' facts spooled as units finish, the planner's arrays and the plan, the columns it plans and writes
with. They are file-backed while the run works, they hold what in-memory arrays would, and the folder is
gone when the run ends, whether it succeeded or failed."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

import packcli.job.run as pipeline
import packcli.job.scratch as scratch_module
from packcli.config import OnError, PackConfig
from packcli.contract import IN_PACK_CODES, PACKED, REJECTED, STATUSES
from packcli.errors import BudgetError, RecordError
from packcli.ingest import SourceKind, Span
from packcli.job.chunks import covered_tokens
from packcli.job.run import pack_corpus
from packcli.job.scratch import IN_MEMORY, Scratch, TextColumn, copy_texts, take_texts
from packcli.job.units import UnitIndex, UnitSpec, UnitSpool
from packcli.job.workspace import side_paths
from packcli.job.write import OVERLONG_FATES, count_by_input, count_examples, losses_by_fate, overlong_losses
from packcli.pack import STRATEGIES, pack_lengths
from packcli.prepare import InputWarnings


def config(tmp: Path, out: Path, **kw) -> PackConfig:
    """1,000 short text records: every int64 column over a page, so each is a file (`Scratch` maps no less)."""
    corpus = tmp / "short.jsonl"
    if not corpus.exists():
        corpus.write_text("".join(f'{{"text": "record {i} is short"}}\n' for i in range(1_000)))
    return PackConfig(inputs=(str(corpus),), tokenizer=str(FIXTURES / "tokenizer"), out=out, capacity=64, **kw)


def mapped(array: np.ndarray) -> bool:
    """Is ``array`` a view of a mapped file (`Scratch`'s), not memory numpy allocated?"""
    return isinstance(array.base, memoryview)


def test_scratch_columns_hold_what_numpy_would(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    values = rng.integers(-2**40, 2**40, 5_000)
    parts = [rng.integers(0, 100, k).astype(np.int32) for k in (0, 700, 3_000, 1)]
    for scratch, on_disk in ((Scratch(tmp_path), True), (IN_MEMORY, False)):
        columns = [scratch.put(values), scratch.put(values, np.int32), scratch.zeros(4_000, np.int64),
                   scratch.concatenate(parts, np.int64), scratch.keep(values.copy())]
        expected = [values, values.astype(np.int32), np.zeros(4_000, np.int64), np.concatenate(parts).astype(np.int64),
                    values]
        for got, want in zip(columns, expected):
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert mapped(got) is on_disk
        put = columns[0]
        put[0] += 1  # a copy: the source stays as it was
        assert put[0] != values[0]
    assert len(list(tmp_path.glob("column-*"))) == 5
    tiny = Scratch(tmp_path).put(np.arange(3))  # under a page: not worth a file
    assert not mapped(tiny) and len(list(tmp_path.glob("column-*"))) == 5


def test_the_plan_runs_on_file_backed_columns_under_the_work_folder_and_they_go_after(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    out = tmp_path / "out"
    seen = {}
    plan_packs = pipeline.plan_packs

    def looking(fates, settings, scratch):
        seen["folder"] = scratch.folder
        seen["mapped"] = [mapped(a) for a in (fates.used_len, fates.used_sup, fates.lost)]
        seen["files"] = sorted(p.name for p in scratch.folder.iterdir())
        return plan_packs(fates, settings, scratch)

    monkeypatch.setattr(pipeline, "plan_packs", looking)
    summary = pack_corpus(config(tmp_path, out))
    _, work = side_paths(out)
    assert seen["folder"].parent == work and seen["mapped"] == [True] * 3
    assert any(name.startswith("column-") for name in seen["files"])
    assert not seen["folder"].exists() and not work.exists()
    # the same bytes as a run whose columns are in memory
    monkeypatch.setattr(pipeline, "plan_packs", plan_packs)
    monkeypatch.setattr(pipeline, "Scratch", lambda folder: IN_MEMORY)
    in_memory = pack_corpus(config(tmp_path, tmp_path / "in-memory"))
    assert in_memory.manifest["manifest_sha256"] == summary.manifest["manifest_sha256"]


def test_a_failed_run_leaves_no_columns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(BudgetError):
        pack_corpus(config(tmp_path, out, min_density=1.0))
    _, work = side_paths(out)
    left = [p for p in work.iterdir() if p.is_dir()] if work.exists() else []
    assert left == [], left  # units stay for a resume; the columns' folder does not


def test_a_text_column_reads_and_writes_as_the_list_it_replaces(tmp_path: Path) -> None:
    parts = [["", "", "no known field", ""], [], ["", "a", "", "é"]]
    as_list = [text for part in parts for text in part]
    column = TextColumn.of(parts, Scratch(tmp_path))
    assert len(column) == len(as_list) and column[0:len(as_list)] == as_list
    assert [column[i] for i in range(len(as_list))] == as_list and column.names == ["", "no known field", "a", "é"]
    rows = np.array([7, 2, 2, 0], np.int64)
    taken, copied = column.take(rows), column.copy()
    for i, text in ((0, "new"), (3, "a"), (5, "")):  # a new text, a known one, the empty one
        column[i], as_list[i] = text, text
    assert column[0:len(as_list)] == as_list
    assert taken[0:4] == ["é", "no known field", "no known field", ""]  # taken before the writes: unchanged
    assert copied[0:3] == ["", "", "no known field"]
    assert take_texts(as_list, rows) == [as_list[i] for i in rows] and copy_texts(as_list) == as_list
    assert TextColumn.of([])[0:0] == []


def test_appended_parts_read_back_where_they_belong(tmp_path: Path) -> None:
    """Parts appended in one order (units finish in any order) and read back in another hold what was
    appended, file-backed or in memory; the file goes when the column is closed."""
    rng = np.random.default_rng(9)
    parts = [rng.integers(-2**40, 2**40, k) for k in (3, 0, 5_000, 1, 700)]
    for scratch in (Scratch(tmp_path), IN_MEMORY):
        column = scratch.appended(np.int64)
        starts = {k: column.append(parts[k]) for k in (2, 0, 4, 1, 3)}
        out = np.zeros(sum(len(p) for p in parts), np.int64)
        at = 0
        for k, part in enumerate(parts):
            column.read_into(starts[k], out[at:at + len(part)])
            at += len(part)
        assert np.array_equal(out, np.concatenate(parts))
        column.close()
    assert list(tmp_path.iterdir()) == []


def test_an_empty_part_does_not_take_the_place_of_the_part_after_it(tmp_path: Path) -> None:
    """An empty part (a unit whose records were all rejected) starts at the row the next part starts at; each
    still reads back as itself, file-backed and in memory."""
    for scratch in (Scratch(tmp_path), IN_MEMORY):
        column = scratch.appended(np.int64)
        empty, three = column.append(np.zeros(0, np.int64)), column.append(np.array([7, 8, 9]))
        assert empty == three
        out = np.zeros(3, np.int64)
        column.read_into(empty, out[:0])
        column.read_into(three, out)
        assert out.tolist() == [7, 8, 9]
        column.close()


def unit(rng: np.random.Generator, records: int, *, keys: bool) -> UnitIndex:
    status = np.where(rng.random(records) < 0.3, REJECTED, PACKED).astype(np.int8)
    lengths = np.where(status == PACKED, rng.integers(1, 50, records), 0)
    reasons = [f"bad record {int(rng.integers(3))}" if s == REJECTED else "" for s in status]
    formats = [str(rng.choice(["messages", "text", ""])) for _ in range(records)]
    return UnitIndex(rng.integers(0, 2**62, records), rng.integers(1, 10**6, records), status,
                     TextColumn.of([reasons]), lengths, lengths // 2, {"tokenize_s": 0.5}, {"checked": records},
                     TextColumn.of([formats]), InputWarnings(ambiguous=records), resumed=records % 2 == 1,
                     keys=rng.integers(0, 256, (records, 16), np.uint8).view("V16").ravel() if keys else None)


@pytest.mark.parametrize("on_disk", [True, False])
def test_the_spool_merges_units_that_finish_in_any_order_as_their_concatenation(tmp_path: Path, on_disk) -> None:
    """`UnitSpool` against the concatenation of the same units in unit order, the units added from two
    threads in a shuffled order (as `SharedPool.map` calls ``on_done``)."""
    rng = np.random.default_rng(4)
    sizes = [0, 1_000, 3, 2_500, 700, 1_200, 1]
    units = [unit(rng, k, keys=True) for k in sizes]
    specs = [UnitSpec(i, i % 2, f"in{i % 2}.jsonl", "0" * 64, 0, Span(SourceKind.jsonl, f"in{i % 2}.jsonl", 1, 0, -1))
             for i in range(len(units))]
    scratch = Scratch(tmp_path) if on_disk else IN_MEMORY
    spool = UnitSpool(specs, scratch, keys=True)
    order = rng.permutation(len(units)).tolist()
    halves = [order[0::2], order[1::2]]
    threads = [threading.Thread(target=lambda ks: [spool.add(specs[k], units[k]) for k in ks], args=(h,))
               for h in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    merged = spool.merge(2)
    for name, column in (("example_ids", merged.ids), ("lines", merged.line), ("status", merged.status),
                         ("lengths", merged.length), ("supervised", merged.supervised), ("keys", merged.keys)):
        want = np.concatenate([getattr(u, name) for u in units])
        assert column.dtype == want.dtype and np.array_equal(column, want), name
        assert mapped(column) is (on_disk and column.nbytes >= 4096), name
    n = sum(sizes)
    assert merged.reason[0:n] == [t for u in units for t in u.reasons[:]]
    assert merged.format[0:n] == [t for u in units for t in u.formats[:]]
    assert np.array_equal(merged.file_index, np.repeat([s.file_index for s in specs], sizes))
    assert merged.records_per_file == [sum(sizes[0::2]), sum(sizes[1::2])]
    offsets = np.concatenate([[0], np.cumsum(merged.length)[:-1]])
    assert np.array_equal(merged.spill_offset, np.where(merged.status == REJECTED, -1, offsets))
    assert merged.warnings.ambiguous == n
    assert [f.tokens for f in spool.facts] == [int(u.lengths.sum()) for u in units]
    assert [f.resumed for f in spool.facts] == [u.resumed for u in units]
    # the eight appended columns (the first files made) are gone once merged; the merged columns stay
    assert all(int(p.name.removeprefix("column-")) >= 8 for p in tmp_path.iterdir())


def test_a_spool_refuses_a_unit_without_keys_in_a_run_that_deduplicates(tmp_path: Path) -> None:
    spec = UnitSpec(0, 0, "in.jsonl", "0" * 64, 0, Span(SourceKind.jsonl, "in.jsonl", 1, 0, -1))
    spool = UnitSpool([spec], Scratch(tmp_path), keys=True)
    with pytest.raises(ValueError, match="no content keys"):
        spool.add(spec, unit(np.random.default_rng(0), 5, keys=False))
    uneven = unit(np.random.default_rng(0), 5, keys=True)
    with pytest.raises(ValueError, match="differ in length"):
        spool.add(spec, dataclasses.replace(uneven, lines=uneven.lines[:4]))
    with pytest.raises(ValueError, match="not finished"):
        spool.merge(1)
    column = spool.scratch.appended(np.int64)
    column.append(np.arange(600))
    with pytest.raises(OSError, match="read 800 of 4800 bytes at row 500"):  # a part past the file's end
        column.read_into(500, np.zeros(600, np.int64))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 64), max_size=600), strategy=st.sampled_from(STRATEGIES),
       shuffle=st.booleans(), seed=st.integers(0, 2**32))
def test_a_plan_on_file_backed_arrays_is_the_plan_in_memory(tmp_path_factory, lengths, strategy, shuffle, seed):
    scratch = Scratch(tmp_path_factory.mktemp("plan"))
    kw = {"strategy": strategy, "seed": seed, "shuffle": shuffle, "shuffle_packs": shuffle, "window": 7}
    want = pack_lengths(np.array(lengths, np.int64), 64, **kw)
    got = pack_lengths(np.array(lengths, np.int64), 64, allocate=scratch.empty, **kw)
    for name in ("lengths", "pack_of", "order", "pack_offsets"):
        a, b = getattr(want, name), getattr(got, name)
        assert a.dtype == b.dtype and np.array_equal(a, b) and not b.flags.writeable, name
    assert got.metrics == want.metrics and got.num_packs == want.num_packs
    if len(lengths) >= 512:  # an int64 column of a page or more is a file
        assert mapped(got.order) and mapped(got.lengths)


def test_a_run_spools_its_units_and_leaves_nothing_after_a_bad_record(tmp_path: Path, monkeypatch) -> None:
    """The units' facts go to the scratch folder as units finish (seen at the merge); a run that fails in the
    units (a bad record under ``on_error=fail``) leaves no columns either."""
    seen = {}
    merge = UnitSpool.merge

    def looking(self, num_files):
        seen["files"] = sorted(p.name for p in self.scratch.folder.iterdir())
        seen["rows"] = {name: column.rows for name, column in self._columns.items()}
        return merge(self, num_files)

    monkeypatch.setattr(UnitSpool, "merge", looking)
    out = tmp_path / "out"
    pack_corpus(config(tmp_path, out, lines_per_unit=300))
    assert len(seen["files"]) >= 7 and set(seen["rows"].values()) == {1_000}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(f'{{"text": "record {i}"}}\n' for i in range(600)) + "not json\n")
    failing = PackConfig(inputs=(str(bad),), tokenizer=str(FIXTURES / "tokenizer"), out=tmp_path / "bad-out",
                         capacity=64, on_error=OnError.fail, lines_per_unit=300)
    with pytest.raises(RecordError):
        pack_corpus(failing)
    _, work = side_paths(tmp_path / "bad-out")
    left = [p for p in work.iterdir() if p.is_dir()] if work.exists() else []
    assert left == [], left


def resident_kib(array: np.ndarray) -> int:
    """Rss of the mapping that holds ``array`` (/proc/self/smaps): its pages this process has resident."""
    address, rss, inside = array.ctypes.data, None, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "Rss:":
            rss = int(line.split()[1])
    assert rss is not None
    return rss


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_release_hands_the_pages_back_and_the_values_stay(tmp_path: Path) -> None:
    scratch = Scratch(tmp_path)
    column = scratch.empty(1 << 20, np.int64)  # 8 MiB
    column[:] = np.arange(1 << 20)
    assert resident_kib(column) >= 8 * 1024
    scratch.release()
    assert resident_kib(column) < 1024
    assert np.array_equal(column, np.arange(1 << 20))  # read back from the file's pages
    assert resident_kib(column) >= 8 * 1024
    IN_MEMORY.release()  # nothing mapped: nothing to do


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 60), block=st.integers(1, 9))
def test_counts_a_block_at_a_time_are_the_whole_columns_counts(seed, n, block) -> None:
    """The manifest's counts (`count_examples`, `count_by_input`, `overlong_losses`, `losses_by_fate`) work a block
    of rows at a time: the whole-column formulas' results, with tiny blocks."""
    rng = np.random.default_rng(seed)
    status = rng.integers(0, len(STATUSES), n).astype(np.int8)
    used_len, used_sup, lost = (rng.integers(0, 100, n) for _ in range(3))
    length = used_len + rng.integers(0, 50, n)
    inputs = rng.integers(0, 3, n).astype(np.int32)
    chunk = np.where(rng.random(n) < 0.6, 0, 1) * rng.integers(1, 4, n)
    if n:
        chunk[0] = 0
    chunk_start = rng.integers(0, 40, n)

    def whole_counts(s, u, v):
        in_packs = np.isin(s, IN_PACK_CODES)
        counts = {name: int(np.count_nonzero(s == code)) for code, name in enumerate(STATUSES)}
        counts.update(tokens=int(u[in_packs].sum()), supervised_tokens=int(v[in_packs].sum()))
        return counts

    overlong = np.isin(status, OVERLONG_FATES)
    example = np.cumsum(chunk == 0) - 1
    packed = overlong & np.isin(status, IN_PACK_CODES)
    want_losses = (int(length[overlong & (chunk == 0)].sum()) - covered_tokens(chunk_start[packed], used_len[packed],
                                                                                example[packed]),
                   int(lost[overlong].sum()))
    old = scratch_module.BLOCK
    scratch_module.BLOCK = block
    try:
        assert count_examples(status, used_len, used_sup) == whole_counts(status, used_len, used_sup)
        assert count_by_input(status, used_len, used_sup, inputs, 3) == [
            whole_counts(status[inputs == k], used_len[inputs == k], used_sup[inputs == k]) for k in range(3)]
        assert overlong_losses(status, used_len, length, chunk, chunk_start, lost) == want_losses
        by_fate = losses_by_fate(status, length, used_len, lost)
        for name, code in (("truncated", 1), ("dropped", 2), ("split", 6)):
            mask = status == code
            assert STATUSES[code] == name
            assert by_fate[name] == {"examples": int(mask.sum()), "tokens": int((length - used_len)[mask].sum()),
                                     "supervised_tokens": int(lost[mask].sum())}
    finally:
        scratch_module.BLOCK = old


def test_a_column_never_takes_over_a_file_it_did_not_create(tmp_path: Path) -> None:
    """Columns are created exclusively: a file already at a column's name (not packcli's) is refused, never
    truncated, mapped or unlinked, and stays as it was."""
    (tmp_path / "column-0000").write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        Scratch(tmp_path).empty(1 << 16, np.int64)
    with pytest.raises(FileExistsError):
        Scratch(tmp_path).appended(np.int64)
    assert (tmp_path / "column-0000").read_bytes() == b"mine"
    own = tmp_path / "own"
    own.mkdir()
    column = Scratch(own).appended(np.int64)  # a file the column made is its own, and goes with it
    column.append(np.arange(3))
    column.close()
    assert list(own.iterdir()) == [] and (tmp_path / "column-0000").read_bytes() == b"mine"


def test_a_column_is_allocated_before_it_is_mapped(tmp_path):
    """A column's file gets its disk when it is made (not a sparse file a full disk would turn into a SIGBUS at the
    first write of a page): its blocks cover its size."""
    column = Scratch(tmp_path).empty(1 << 18, np.int64)
    column[...] = 7
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("column-")]
    assert path.stat().st_blocks * 512 >= column.nbytes


def test_a_full_disk_is_an_error_naming_the_column_not_a_crash(tmp_path, monkeypatch):
    """What the disk says when a column is allocated reaches the caller as an OSError naming the file (the command
    reports it); a filesystem that cannot allocate ahead gets a sparse file, which still works."""
    import errno
    import os

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as caught:
        Scratch(tmp_path).empty(1 << 18, np.int64)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename.endswith("column-0000")

    def unsupported(fd, offset, size):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    (tmp_path / "sparse").mkdir()
    column = Scratch(tmp_path / "sparse").empty(1 << 18, np.int64)
    column[...] = 3
    assert int(column.sum()) == 3 * (1 << 18)
