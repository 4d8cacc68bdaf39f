"""`pack`'s driver keeps its per-example columns in files under the run's work folder (`packcli.job.scratch`):
they are file-backed while the run plans and writes, they hold what in-memory arrays would, and the
folder is gone when the run ends, whether it succeeded or failed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

import packcli.job.run as pipeline
from packcli.config import PackConfig
from packcli.errors import BudgetError
from packcli.job.run import pack_corpus
from packcli.job.scratch import IN_MEMORY, Scratch, TextColumn, copy_texts, take_texts
from packcli.job.workspace import side_paths


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
