"""``packcli show``: the example's own tokens and labels, its pack's seams, its seam-table row; rich, HTML, JSON."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from packcli.cli import app
from packcli.contract import IGNORE_INDEX
from packcli.data import iter_packs
from packcli.errors import InputError, PackcliError
from packcli.show import show_artifact

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _rows(packed) -> list[dict]:
    return pq.read_table(packed / "examples.parquet").to_pylist()


def _cjk_row(packed) -> dict:
    """A packed record whose text has multi-byte characters split over byte-level tokens."""
    corpus = (FIXTURES / "corpus" / "openai.jsonl").read_text(encoding="utf-8").split("\n")
    wanted = {i + 1 for i, line in enumerate(corpus) if "東" in line or "京" in line or "語" in line}
    return next(r for r in _rows(packed) if r["source"].endswith("openai.jsonl") and r["line"] in wanted
                and r["status"] == "packed")


def test_an_example_is_shown_with_its_own_tokens_and_labels(packed, tokenizer):
    row = _cjk_row(packed)
    shown = show_artifact(packed, source=f"openai.jsonl:{row['line']}")
    (example,) = shown.examples
    assert example.row == row
    pack = next(p for k, p in enumerate(iter_packs(packed)) if k == shown.pack.index)
    k = list(pack.example_ids).index(row["example_id"])
    ids = pack.input_ids[pack.cu_seqlens[k]:pack.cu_seqlens[k + 1]]
    labels = pack.labels[pack.cu_seqlens[k]:pack.cu_seqlens[k + 1]]
    assert [t.id for t in example.tokens] == ids.tolist()
    assert [t.supervised for t in example.tokens] == (labels != IGNORE_INDEX).tolist()
    assert sum(t.supervised for t in example.tokens) == row["supervised"]
    # every piece belongs to one token, and together they are the example's text
    assert example.text == tokenizer.tokenizer.decode(ids.tolist(), skip_special_tokens=False)
    assert any(t.text == "" for t in example.tokens)  # a token that ends inside a character shows nothing


def test_a_pack_is_shown_whole_with_its_seams(packed):
    shown = show_artifact(packed, pack=1)
    seams = shown.pack.seams
    assert [s["offset"] for s in seams] == np.cumsum([0] + [s["length"] for s in seams])[:-1].tolist()
    assert sum(s["length"] for s in seams) == shown.pack.num_tokens
    assert [e.row["example_id"] for e in shown.examples] == [s["example_id"] for s in seams]
    assert all(len(e.tokens) == e.row["length"] for e in shown.examples)


def test_selector_errors(packed):
    with pytest.raises(PackcliError, match="choose exactly one"):
        show_artifact(packed)
    with pytest.raises(PackcliError, match=r"choose exactly one .* \(got --example, --pack\)"):
        show_artifact(packed, example_id=1, pack=0)
    with pytest.raises(InputError, match="--example 1: no such example"):
        show_artifact(packed, example_id=1)
    with pytest.raises(InputError, match="expected FILE:LINE"):
        show_artifact(packed, source="openai.jsonl")
    with pytest.raises(InputError, match="no record at that line"):
        show_artifact(packed, source="openai.jsonl:99999")
    with pytest.raises(InputError, match="--pack 100000: the artifact has packs 0 to"):
        show_artifact(packed, pack=100_000)


def test_cli_terminal_json_and_html(packed, tmp_path):
    row = _cjk_row(packed)
    result = run("show", packed, "--example", row["example_id"])
    assert result.exit_code == 0, result.output
    assert "seam-table row" in result.stdout and f"{row['source']}:{row['line']}" in result.stdout
    assert f"{row['supervised']:,} supervised" in result.stdout
    data = json.loads(run("show", packed, "--example", row["example_id"], "--json").stdout)
    assert data["examples"][0]["row"] == row and data["pack"]["seams"]
    assert sum(t["supervised"] for t in data["examples"][0]["tokens"]) == row["supervised"]
    page = tmp_path / "show.html"
    result = run("show", packed, "--pack", 0, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "<style>" in text
    assert "http" not in text and "src=" not in text  # self-contained: nothing fetched
    assert text.count("<span class='t s") > 0 and text.count("<span class='t u") > 0


def test_cli_a_rejected_record_and_usage_errors(packed):
    broken = next(r for r in _rows(packed) if r["status"] == "rejected")
    result = run("show", packed, "--source", f"broken.jsonl:{broken['line']}")
    assert result.exit_code == 0 and "not in a pack (rejected" in result.stdout
    assert run("show", packed).exit_code == 2
    assert run("show", packed, "--source", "nope.jsonl:1").exit_code == 2
