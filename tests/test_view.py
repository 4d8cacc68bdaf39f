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
from packcli.view import show_artifact

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
    with pytest.raises(PackcliError, match=r"choose exactly one .* \(got `example_id`, `pack`\)"):
        show_artifact(packed, example_id=1, pack=0)
    with pytest.raises(InputError, match="`example_id` 1: no such example"):
        show_artifact(packed, example_id=1)
    with pytest.raises(InputError, match="expected FILE:LINE"):
        show_artifact(packed, source="openai.jsonl")
    with pytest.raises(InputError, match="no record at that line"):
        show_artifact(packed, source="openai.jsonl:99999")
    with pytest.raises(InputError, match="`pack` 100000: the artifact has packs 0 to"):
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


def test_the_html_page_names_what_it_shows_draws_a_legend_and_never_splits_a_token(packed):
    import html
    import re

    from packcli.view_page import render_html

    shown = show_artifact(packed, pack=0)
    page = render_html(shown)
    assert f"<title>packcli show: pack 0 of {packed}</title>" in page
    assert "class='legend'" in page and "carries loss" in page and "no loss" in page
    assert "break-all" not in page and ".t{display:inline-block;white-space:pre" in page  # a token is one box
    assert page.count("<table") == 1  # the pack's seams, once; no row table repeated per example
    boxes = re.findall(r"<span class='t [us][01]' title='token (\d+)'>((?:[^<]|<span class='nl'>↵</span>)*)</span>(\n*)",
                       page.split("</div>", 1)[1])
    tokens = [t for e in shown.examples for t in e.tokens]
    assert [int(i) for i, _, _ in boxes] == [t.id for t in tokens]
    for (_, inner, after), token in zip(boxes, tokens):
        drawn = html.unescape(re.sub(r"<span class='nl'>↵</span>", "\n", inner))
        assert drawn == (token.text or "·") and len(after) == token.text.count("\n")  # breaks after the box only
    one = show_artifact(packed, example_id=shown.examples[1].row["example_id"])
    page = render_html(one)
    row = one.examples[0].row
    assert f"<title>packcli show: example {row['example_id']} ({row['source']}:{row['line']}) of {packed}</title>" \
        in page
    assert page.count("<table") == 2 and page.count("class='me'") == 1  # its row, and its pack's seams marked


def test_the_terminal_keeps_token_boundaries_with_8_or_16_colours(packed):
    """Adjacent tokens render differently in the terminal's own colour system; the 256-colour greys, squeezed
    into 16 colours, are one colour (the failure this guards against)."""
    from rich.color import ColorSystem
    from rich.style import Style

    from packcli.cli.output import SHADES, token_shades

    def ansi(style, system):  # a fresh Style: rich keeps the codes of the first colour system it rendered with
        parsed = Style.parse(style)
        fresh = Style(color=parsed.color, bgcolor=parsed.bgcolor, bold=parsed.bold, underline=parsed.underline)
        return fresh.render("x", color_system=system)

    for name, system in (("standard", ColorSystem.STANDARD), ("256", ColorSystem.EIGHT_BIT),
                         ("truecolor", ColorSystem.TRUECOLOR), (None, ColorSystem.STANDARD)):
        shades = token_shades(name)
        for supervised in (False, True):
            assert ansi(shades[supervised][0], system) != ansi(shades[supervised][1], system), (name, supervised)
        assert {ansi(s, system) for s in shades[False]}.isdisjoint(ansi(s, system) for s in shades[True])
    greys = SHADES["256"][False]
    assert ansi(greys[0], ColorSystem.STANDARD) == ansi(greys[1], ColorSystem.STANDARD)


def test_the_terminal_shows_a_packs_seam_table_once(packed, monkeypatch):
    from rich.console import Console

    from packcli.cli import console
    from packcli.cli.output import render_shown

    monkeypatch.setattr(console, "out", Console(color_system="standard", force_terminal=True, record=True, width=100))
    render_shown(show_artifact(packed, pack=0))
    styled = console.out.export_text(styles=True, clear=False)
    text = console.out.export_text()
    assert "seam-table row" not in text and text.count("pack 0 (shard-00000.parquet row 0") == 1
    assert "\x1b[4m" in styled or "\x1b[4;" in styled  # every other token underlined: the boundaries show
