"""Text documents: their BOS and EOS (--text-bos, --text-eos; packcli.tokenizer.ends) against what `tokenizers`
gives, on the real Qwen3 and Llama 3.2 tokenizers, the fixture tokenizer and one whose post-processor adds
both; and `text` records read from JSONL, Parquet and `datasets` tables, packed and verified.

Expected ids are built from `tokenizers` alone: ``encode(doc, add_special_tokens=False)`` with the BOS and
EOS ids the choice asks for around it, and, where the post-processor's own tokens are kept, exactly
``encode(doc).ids``.
"""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, real_asset, write_jsonl, write_parquet

from packcli.chat import Renderer, load_template
from packcli.choices import AddToken, LossPolicy
from packcli.contract import IGNORE_INDEX
from packcli.errors import InputError
from packcli.prepare import Preparer
from packcli.tokenizer.ends import TextEnds, post_processor_ends, text_ends
from packcli.tokenizer.load import load_tokenizer

DOCS = ["A document to continue pre-training on.", " leading space, trailing newline\n", "Ünïcödé 中文 🙂",
        "<|im_end|> is text here"]
CHOICES = list(product(AddToken, AddToken))


def _encode(tok, ends: TextEnds, doc: str) -> np.ndarray:
    renderer = Renderer(load_template("chatml"), LossPolicy.auto, bos_token=tok.bos_token, eos_token=tok.eos_token,
                        text_ends=ends)
    encoded = Preparer(renderer, tok).prepare([(0, 1, json.dumps({"text": doc}).encode())])[0]
    assert not isinstance(encoded, str), encoded
    labels = np.asarray(encoded.labels)
    assert labels[0] == IGNORE_INDEX and np.array_equal(labels[1:], encoded.input_ids[1:])  # loss on all of it
    return np.asarray(encoded.input_ids)


def _expected(tok, doc: str, bos: AddToken, eos: AddToken, bos_id: int | None, eos_id: int | None) -> list[int]:
    plain = tok.tokenizer.encode(doc, add_special_tokens=False).ids
    return ([bos_id] if bos_id is not None else []) + plain + ([eos_id] if eos_id is not None else [])


@pytest.fixture(scope="module")
def llama():
    return load_tokenizer(real_asset("llama3_2"))


@pytest.fixture(scope="module")
def qwen():
    return load_tokenizer(real_asset("qwen3"))


@pytest.mark.real
@pytest.mark.parametrize(("bos", "eos"), CHOICES, ids=[f"bos-{b.value}-eos-{e.value}" for b, e in CHOICES])
def test_llama_3_2(llama, bos, eos):
    """Llama 3.2: the post-processor adds <|begin_of_text|>; eos_token <|end_of_text|> is appended."""
    tok = llama
    begin, end = tok.tokenizer.token_to_id("<|begin_of_text|>"), tok.tokenizer.token_to_id("<|end_of_text|>")
    assert post_processor_ends(tok.tokenizer) == ([begin], [])
    ends = text_ends(tok, bos, eos)
    for doc in DOCS:
        got = _encode(tok, ends, doc).tolist()
        assert got == _expected(tok, doc, bos, eos, None if bos is AddToken.no else begin,
                                None if eos is AddToken.no else end)
        if bos is not AddToken.no:  # the post-processor's own BOS: exactly what encode(doc) gives
            assert got[:len(got) - (eos is not AddToken.no)] == tok.tokenizer.encode(doc).ids


@pytest.mark.real
@pytest.mark.parametrize(("bos", "eos"), CHOICES, ids=[f"bos-{b.value}-eos-{e.value}" for b, e in CHOICES])
def test_qwen3(qwen, bos, eos):
    """Qwen3: no post-processor tokens, no bos_token; eos_token <|im_end|>."""
    tok = qwen
    assert post_processor_ends(tok.tokenizer) == ([], []) and tok.bos_token is None
    if bos is AddToken.yes:
        with pytest.raises(InputError, match="`text_bos` yes: the tokenizer .* names no bos_token"):
            text_ends(tok, bos, eos)
        return
    ends = text_ends(tok, bos, eos)
    im_end = tok.tokenizer.token_to_id("<|im_end|>")
    for doc in DOCS:
        assert _encode(tok, ends, doc).tolist() == _expected(tok, doc, bos, eos, None,
                                                             None if eos is AddToken.no else im_end)
        assert tok.tokenizer.encode(doc).ids == tok.tokenizer.encode(doc, add_special_tokens=False).ids


def test_the_fixture_tokenizer_gets_its_bos_only_when_asked(tokenizer):
    """No post-processor: auto adds no BOS (encode adds none), yes writes bos_token <s> (id 3) before the text."""
    assert post_processor_ends(tokenizer.tokenizer) == ([], [])
    assert text_ends(tokenizer) == TextEnds("", "<|im_end|>", True)  # what a text record always got
    for doc in DOCS:
        assert _encode(tokenizer, text_ends(tokenizer, "yes", "no"), doc).tolist() == _expected(
            tokenizer, doc, AddToken.yes, AddToken.no, 3, None)


@pytest.fixture(scope="module")
def wrapping(tmp_path_factory):
    """The fixture tokenizer with a post-processor that adds <s> before and <|im_end|> after every text."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    raw = Tokenizer.from_file(str(FIXTURES / "tokenizer" / "tokenizer.json"))
    raw.post_processor = TemplateProcessing(single="<s> $A <|im_end|>", special_tokens=[("<s>", 3), ("<|im_end|>", 2)])
    folder = tmp_path_factory.mktemp("wrapping")
    raw.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        (FIXTURES / "tokenizer" / "tokenizer_config.json").read_text(encoding="utf-8"), encoding="utf-8")
    return load_tokenizer(folder)


@pytest.mark.parametrize(("bos", "eos"), CHOICES, ids=[f"bos-{b.value}-eos-{e.value}" for b, e in CHOICES])
def test_a_post_processor_that_adds_both_is_never_doubled(wrapping, bos, eos):
    """The EOS the post-processor adds is not written again (it used to be: text + eos_token, encoded with
    special tokens, ended in two); one it adds but was not asked for is left out."""
    assert post_processor_ends(wrapping.tokenizer) == ([3], [2])
    ends = text_ends(wrapping, bos, eos)
    for doc in DOCS:
        got = _encode(wrapping, ends, doc).tolist()
        assert got == _expected(wrapping, doc, bos, eos, None if bos is AddToken.no else 3,
                                None if eos is AddToken.no else 2)
        if AddToken.no not in (bos, eos):
            assert got == wrapping.tokenizer.encode(doc).ids and ends.add_special_tokens


def test_text_records_from_jsonl_parquet_and_datasets_pack_alike(tmp_path, tokenizer_dir):
    """A `text` column in Parquet and a `datasets` directory (and a column of another name, mapped) give the
    same examples as JSONL; --text-bos/--text-eos are pinned in the manifest and verify re-renders with them."""
    import datasets

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus
    from packcli.verify import verify_artifact

    records = [{"text": d} for d in DOCS * 3]
    inputs = {"jsonl": write_jsonl(tmp_path / "docs.jsonl", records),
              "parquet": write_parquet(tmp_path / "docs.parquet", records)}
    datasets.Dataset.from_list([{"body": r["text"]} for r in records]).save_to_disk(str(tmp_path / "ds"))
    seen = {}
    for kind, path, fields in (("jsonl", inputs["jsonl"], {}), ("parquet", inputs["parquet"], {}),
                               ("dataset", tmp_path / "ds", {"text": "body"})):
        out = tmp_path / f"out-{kind}"
        summary = pack_corpus(PackConfig(inputs=(str(path),), tokenizer=str(tokenizer_dir), out=out, capacity=64,
                                         text_bos="yes", text_eos="no", fields=fields, overlong="split"))
        config = summary.manifest["config"]
        assert (config["text_bos"], config["text_eos"]) == ("yes", "no")
        assert verify_artifact(out).ok
        rows = pq.read_table(out / "examples.parquet").to_pylist()
        assert {r["format"] for r in rows} == {"text"}
        seen[kind] = [(r["line"], r["chunk"], r["token_hash"], r["supervised"]) for r in rows]
    offset = [(line - 1, *rest) for line, *rest in seen["jsonl"]]  # JSONL lines count from 1, table rows from 0
    assert offset == seen["parquet"] == seen["dataset"]


def test_options_are_pinned_and_checked(tmp_path, corpus_files, tokenizer_dir):
    from typer.testing import CliRunner

    from packcli.cli import app

    result = CliRunner().invoke(app, ["pack", corpus_files[3], "-t", str(tokenizer_dir), "-o", str(tmp_path / "o"),
                                      "--text-bos", "maybe"])
    assert result.exit_code == 2 and "--text-bos" in result.output
    qwen = FIXTURES.parent / ".cache" / "assets" / "qwen3"
    if qwen.exists():
        result = CliRunner().invoke(app, ["pack", corpus_files[3], "-t", str(qwen), "-o", str(tmp_path / "q"),
                                          "--text-bos", "yes", "--template", "chatml"])
        assert result.exit_code == 2 and "names no bos_token" in result.output and not (tmp_path / "q").exists()
