"""The option and path checks every command makes before any work (`packcli.checks`)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from packcli.checks import (
    MAX_INT32,
    float_problems,
    input_problems,
    int_problems,
    output_dir_problems,
    output_file_problems,
)


@pytest.mark.parametrize("value,ok", [(1, True), (MAX_INT32, True), (0, False), (MAX_INT32 + 1, False),
                                      (True, False), (1.0, False), (None, True), (np.int64(7), True)])
def test_int_bounds_are_inclusive_and_bools_are_not_ints(value, ok):
    assert (int_problems("--n", value, 1) == []) is ok


@pytest.mark.parametrize("value,ok", [(1.0, True), (1e-9, True), (0.0, False), (1.0000001, False),
                                      (math.nan, False), (math.inf, False), (-math.inf, False)])
def test_floats_must_be_finite_and_in_range(value, ok):
    assert (float_problems("--x", value, 0, 1, low_open=True) == []) is ok


def test_every_input_problem_is_reported_at_once(tmp_path):
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "b.csv").write_text("x")
    (tmp_path / "d").mkdir()
    problems = input_problems([tmp_path / "a.jsonl", tmp_path / "b.csv", tmp_path / "d", tmp_path / "gone.jsonl",
                               str(tmp_path / "none-*.jsonl")])
    assert len(problems) == 4
    assert [p.split(": ", 1)[1].split(" ")[0] for p in problems] == ["a", "is", "no", "no"]


def test_compressed_json_and_table_names_are_inputs(tmp_path):
    for name in ("a.jsonl.gz", "b.JSONL", "c.json.zst", "d.ndjson", "e.parquet", "f.arrow"):
        (tmp_path / name).write_bytes(b"")
    assert input_problems([str(tmp_path / "*")]) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: permissions cannot make a folder unwritable")
def test_an_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert "cannot write in" in output_dir_problems("--out", locked / "out", force=False)[0]
        assert "not writable" in output_file_problems("--plot", locked / "p.png", (".png",))[0]
    finally:
        locked.chmod(0o700)


def test_an_out_under_a_file_or_a_non_empty_out_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert "is not a directory" in output_dir_problems("--out", tmp_path / "file" / "out", force=False)[0]
    assert "not empty" in output_dir_problems("--out", tmp_path / "full", force=False)[0]
    assert output_dir_problems("--out", tmp_path / "full", force=True) == []
    assert output_dir_problems("--out", tmp_path / "new" / "deeper" / "out", force=False) == []  # made by pack
