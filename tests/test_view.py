"""`packcli.view.show_artifact`: an example with its own tokens and labels, a pack whole with its seams, and the
selectors' errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cjk_row
from typer.testing import CliRunner

from packcli.contract import IGNORE_INDEX
from packcli.data import iter_packs
from packcli.errors import InputError, PackcliError
from packcli.view import show_artifact

runner = CliRunner()


def test_an_example_is_shown_with_its_own_tokens_and_labels(packed, tokenizer):
    row = cjk_row(packed)
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
