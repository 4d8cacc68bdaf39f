"""Every option of every command, set to bad values (paths included): a usage error, before any work.

For each (command, option, bad value): exit 2; on stderr one ``error:`` line and at most one
``hint:`` line; no traceback; nothing on stdout; nothing written anywhere under the working
directory or beside ``--out`` (no work folder, no temporary artifact, no lock file).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app

runner = CliRunner()
CORPUS = str(FIXTURES / "corpus" / "text.jsonl")
TOKENIZER = str(FIXTURES / "tokenizer")
ARTIFACT = str(FIXTURES / "packed")
HUGE = "3000000000"  # above int32: offsets, lengths and line numbers are int32 in the artifact

# Paths the cases name, made in the working directory by `workspace` (a file, an empty folder,
# a non-empty --out, a file that is not JSONL).
NOT_JSONL, EMPTY_DIR, A_FILE, FULL_OUT = "data.csv", "empty", "plain.txt", "taken"
FOREIGN_PNG, FOREIGN_CSV, FOREIGN_HTML = "mine.png", "mine.csv", "mine.html"  # a user's files, with packcli's suffixes

PACK = ["pack", CORPUS, "-t", TOKENIZER, "-o", "out"]
STATS = ["stats", CORPUS, "-t", TOKENIZER]
VERIFY = ["verify", ARTIFACT]


def cases() -> list[tuple[list[str], list[str]]]:
    """(base command, bad arguments appended to it)."""
    out: list[tuple[list[str], list[str]]] = []

    def each(base: list[str], option: str, *values: str) -> None:
        out.extend((base, [option, v]) for v in values)

    # pack: numbers (negative, zero, huge, wrong type), choices, paths
    each(PACK, "--capacity", "-1", "0", "1", HUGE, "abc", "1.5")
    each(PACK, "--window", "0", "-1", HUGE, "abc")
    each(PACK, "--seed", "-1", str(2**64), "abc")
    each(PACK, "--min-density", "0", "-0.1", "2", "nan", "inf", "abc")
    each(PACK, "--max-displacement", "-1", "nan", "inf", "abc")
    each(PACK, "--max-reject-fraction", "-0.1", "1.5", "nan", "abc")
    each(PACK, "--packs-per-shard", "0", "-1", HUGE, "abc")
    each(PACK, "--unit-lines", "0", "-5", HUGE, "abc")
    each(PACK, "--workers", "0", "-1", "100000", "abc")
    each(PACK, "--strategy", "magic")
    each(PACK, "--overlong", "chop")
    each(PACK, "--on-error", "ignore")
    each(PACK, "--format", "csv")
    each(PACK, "--loss", "bogus")
    each(PACK, "--engine", "spark")
    each(PACK, "--tokenizer-backend", "quick")
    each(PACK, "--template", "missing.jinja")
    each(PACK, "--tokenizer", "missing-tokenizer", EMPTY_DIR, A_FILE + "/x", str(FIXTURES / "tokenizer" / "tokenizer_config.json"))
    each(PACK, "--out", FULL_OUT, f"{A_FILE}/out", ".", "/", "/proc/forbidden/out", "x" * 300, A_FILE)
    out += [(PACK, ["--out", FULL_OUT, "--force"]), (PACK, ["--out", ".", "--force"])]
    each(PACK, "--ray-address", "auto")
    out += [(["pack", "missing.jsonl", "-t", TOKENIZER, "-o", "out"], []),
            (["pack", EMPTY_DIR, "-t", TOKENIZER, "-o", "out"], []),
            (["pack", NOT_JSONL, "-t", TOKENIZER, "-o", "out"], []),
            (["pack", "nothing-*.jsonl", "-t", TOKENIZER, "-o", "out"], []),
            (["pack", CORPUS, "-o", "out"], []),  # inputs without a tokenizer
            (PACK, ["--bogus-option"]),
            (PACK, ["-c", "2000000"])]  # 2,048 packs of 2M tokens: more than a shard's int32 offsets hold
    # stats
    each(STATS, "--capacity", "0", "-1", HUGE, "abc")
    each(STATS, "--seed", "-1", "abc")
    each(STATS, "--min-density", "0", "2", "nan", "abc")
    each(STATS, "--max-displacement", "-1", "nan")
    each(STATS, "--plot", "no-such-dir/p.png", "p.txt", EMPTY_DIR + ".png", A_FILE + "/p.png", FOREIGN_PNG,
         "/proc/p.png", "p" * 300 + ".png")
    each(STATS, "--template", "missing.jinja")
    each(STATS, "--tokenizer", "missing-tokenizer", EMPTY_DIR)
    each(STATS, "--loss", "bogus")
    out += [(["stats", "missing.jsonl", "-t", TOKENIZER], []),
            (["stats", CORPUS], []),  # inputs without a tokenizer
            (["stats", ARTIFACT], ["--capacity", "4096"]),  # settings for raw data, given with an artifact
            (["stats", ARTIFACT], ["--tokenizer", TOKENIZER])]
    # verify
    each(VERIFY, "--packs", "0", "-1", HUGE, "abc")
    each(VERIFY, "--max-violations", "-1", "abc")
    each(VERIFY, "--workers", "0", "100000", "abc")
    each(VERIFY, "--seam-out", "x.txt", "no-such-dir/x.csv", EMPTY_DIR + ".parquet", FOREIGN_CSV)
    each(VERIFY, "--source-root", "no-such-dir", A_FILE)
    each(VERIFY, "--tokenizer", "missing-tokenizer")
    each(VERIFY, "--template", "missing.jinja")
    each(VERIFY, "--attention", "bogus", "", "sdpa,nope")
    each(VERIFY, "--dtype", "float8")
    out += [(["verify", "no-such-artifact"], []),
            (["verify", A_FILE], []),
            (VERIFY, ["--self-test", "--attention", "sdpa"]),
            (VERIFY, ["--attention", "sdpa", "--device", "tpu"])]
    # show
    out += [(["show", ARTIFACT, "--pack", "0", "--html", page], []) for page in
            (FOREIGN_HTML, EMPTY_DIR, "no-such-dir/p.html", A_FILE + "/p.html", "/proc/p.html")]
    return out


@pytest.fixture()
def workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / NOT_JSONL).write_text('{"text": "a"}\n')
    (tmp_path / EMPTY_DIR).mkdir()
    (tmp_path / (EMPTY_DIR + ".png")).mkdir()
    (tmp_path / (EMPTY_DIR + ".parquet")).mkdir()
    (tmp_path / A_FILE).write_text("x")
    (tmp_path / FULL_OUT).mkdir()
    (tmp_path / FULL_OUT / "keep").write_text("mine")
    for name in (FOREIGN_PNG, FOREIGN_CSV, FOREIGN_HTML):
        (tmp_path / name).write_text("the user's")
    return tmp_path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _id(case: tuple[list[str], list[str]]) -> str:
    base, extra = case
    return " ".join([base[0], *(Path(a).name if os.sep in a else a for a in (extra or base[1:]))])


@pytest.mark.parametrize("case", cases(), ids=_id)
def test_bad_option_is_one_line_exit_2_and_writes_nothing(case, workspace):
    base, extra = case
    before = snapshot(workspace)
    fixtures_before = snapshot(FIXTURES / "packed")
    result = runner.invoke(app, [*base, *extra])
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.rstrip("\n").split("\n")
    assert lines[0].startswith("error: ") and len(lines) <= 2, result.stderr
    assert len(lines) == 1 or lines[1].startswith("  hint: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert snapshot(workspace) == before, "a usage error wrote something"
    assert snapshot(FIXTURES / "packed") == fixtures_before
    assert not [p for p in workspace.rglob(".packcli-*")]
