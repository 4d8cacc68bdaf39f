"""The option and path checks every command makes before any work (`packcli.checks`)."""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest
from conftest import FIXTURES

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
        assert "cannot write in" in output_dir_problems("`out`", locked / "out", force=False)[0]
        assert "not writable" in output_file_problems("--plot", locked / "p.png", (".png",))[0]
    finally:
        locked.chmod(0o700)


def test_an_out_under_a_file_or_a_non_empty_out_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert "is not a directory" in output_dir_problems("`out`", tmp_path / "file" / "out", force=False)[0]
    for force in (False, True):  # a folder packcli did not write is never replaced, --force or not
        problem = output_dir_problems("`out`", tmp_path / "full", force=force)[0]
        assert "holds x, and no manifest.json, so packcli did not write it" in problem
    assert output_dir_problems("`out`", tmp_path / "new" / "deeper" / "out", force=False) == []  # made by pack


def test_an_artifact_is_replaced_only_with_force_and_an_empty_folder_always(tmp_path):
    shutil.copytree(FIXTURES / "packed", tmp_path / "art")
    (tmp_path / "empty").mkdir()
    assert "exists (a packcli artifact); pass `force`" in output_dir_problems("`out`", tmp_path / "art", force=False)[0]
    assert output_dir_problems("`out`", tmp_path / "art", force=True) == []
    assert output_dir_problems("`out`", tmp_path / "empty", force=False) == []


def test_an_out_that_holds_an_input_is_refused_even_when_it_is_an_artifact(tmp_path):
    shutil.copytree(FIXTURES / "packed", tmp_path / "art")
    (tmp_path / "art" / "sub").mkdir()
    problems = output_dir_problems("`out`", tmp_path / "art", force=True, inputs=[str(tmp_path / "art" / "rejects.jsonl")])
    assert "holds the input" in problems[0] and "rejects.jsonl" in problems[0]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.jsonl").write_text("{}")
    os.symlink(tmp_path / "data" / "in.jsonl", tmp_path / "link.jsonl")  # resolved: the link's target is inside
    problems = output_dir_problems("`out`", tmp_path / "data", force=True, inputs=[str(tmp_path / "link.jsonl")])
    assert "holds the input" in problems[0]
    problems = output_dir_problems("`out`", tmp_path, force=True, inputs=[str(tmp_path / "data" / "*.jsonl")])
    assert "holds the input" in problems[0]  # a glob's matches count, at any depth


@pytest.mark.parametrize("where,what", [("cwd", "the current directory"), ("above", "a folder above the current directory"),
                                        ("home", "the home directory"), ("root", "the root directory")])
def test_special_folders_are_never_an_out(where, what, tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    path = {"cwd": ".", "above": str(tmp_path / "a"), "home": str(tmp_path / "home"), "root": "/"}[where]
    for force in (False, True):
        assert f"is {what}; packcli replaces only a folder it wrote" in output_dir_problems("`out`", path, force=force)[0]


def test_links_and_files_are_never_replaced(tmp_path):
    shutil.copytree(FIXTURES / "packed", tmp_path / "art")
    os.symlink(tmp_path / "art", tmp_path / "link")
    (tmp_path / "file").write_text("x")
    assert "is a symbolic link" in output_dir_problems("`out`", tmp_path / "link", force=True)[0]
    assert "exists and is a file" in output_dir_problems("`out`", tmp_path / "file", force=True)[0]


def test_a_name_too_long_for_the_filesystem_is_refused(tmp_path):
    for path in (tmp_path / ("x" * 300) / "out", tmp_path / ("x" * 300)):
        problems = output_dir_problems("`out`", path, force=False)
        assert problems[0].startswith(f"`out` {path}") and "too long" in problems[0], problems
    problems = output_file_problems("--plot", tmp_path / ("p" * 300 + ".png"), (".png",))
    assert "too long" in problems[0], problems


def test_a_folder_on_a_virtual_filesystem_is_refused_by_trying(tmp_path):
    """/proc answers os.access with yes for root and refuses the file: the probe finds out, and leaves nothing."""
    assert "cannot write in /proc" in output_dir_problems("`out`", "/proc/forbidden/out", force=False)[0]
    assert "cannot write in /proc" in output_file_problems("--plot", "/proc/p.png", (".png",))[0]
    before = sorted(os.listdir(tmp_path))
    assert output_file_problems("--plot", tmp_path / "p.png", (".png",)) == []
    assert sorted(os.listdir(tmp_path)) == before, "the probe file is gone"


def test_a_file_packcli_did_not_write_is_not_replaced(tmp_path):
    (tmp_path / "mine.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a plot of packcli's")
    assert "exists and packcli did not write it" in output_file_problems("--plot", tmp_path / "mine.png", (".png",))[0]
