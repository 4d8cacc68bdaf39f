"""`packcli.prepare`: one tokenizer reference and one prepare spec for every process, a tokenizer that is not the
one referenced refused, a preparer built once per process, and the input warnings summed over units."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from conftest import FIXTURES

from packcli.errors import InputError, PackcliError
from packcli.prepare import InputWarnings, PrepareSpec, TokenizerRef, preparer_for, share_preparer
from packcli.tokenizer.load import load_tokenizer


def spec(ref: TokenizerRef) -> PrepareSpec:
    template = "{% for m in messages %}{{ m.content }}{% generation %}.{% endgeneration %}{% endfor %}"
    return PrepareSpec(ref, template, "test", "2024-07-26", "auto", "auto")


def test_a_reference_loads_its_tokenizer_and_refuses_another_file_at_its_path(tmp_path):
    shutil.copytree(FIXTURES / "tokenizer", tmp_path / "tok")
    tok = load_tokenizer(str(tmp_path / "tok"))
    ref = TokenizerRef.of(tok, "tokenizers")
    assert ref.path == str(tmp_path / "tok" / "tokenizer.json") and ref.sha256 == tok.sha256
    ref.check(tok, "pack")  # the same: no complaint
    other = dataclasses.replace(ref, sha256="0" * 64)
    with pytest.raises(InputError, match=r"tokenizer .* changed while stats ran \(sha256 [0-9a-f]{16}, first loaded "
                                         r"0000000000000000\)") as caught:
        other.check(tok, "stats")
    assert caught.value.hint == "run stats again"
    newer = dataclasses.replace(ref, version="0.0.1")
    with pytest.raises(PackcliError, match=r"the driver resolved 0\.0\.1"):
        newer.check(tok, "pack")


def test_verifys_reference_is_the_reference_backend_in_any_version():
    ref = TokenizerRef.reference("tok/tokenizer.json", "ab" * 32)
    assert (ref.backend, ref.resolved, ref.version) == ("tokenizers", "tokenizers", None)


def test_a_spec_builds_a_preparer_once_per_process_and_names_its_tokenizer_absolutely(monkeypatch, tokenizer_dir):
    monkeypatch.chdir(tokenizer_dir.parent)
    tok = load_tokenizer(str(tokenizer_dir))
    job = spec(dataclasses.replace(TokenizerRef.of(tok, "tokenizers"), path="tokenizer/tokenizer.json"))
    assert job.absolute().tokenizer.path == str(tokenizer_dir / "tokenizer.json")
    built = job.build_preparer("pack", tok)
    line = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
    encoded = built.prepare([(0, 1, line)])[0]
    assert len(encoded.input_ids) == len(encoded.labels) and encoded.supervised > 0  # the template's generation
    share_preparer(job, built)
    try:
        assert preparer_for(job) is built  # the driver's, not a second one
    finally:
        share_preparer(job, None)


def test_input_warnings_sum_over_units_and_keep_the_first_ambiguous_record():
    a = InputWarnings(ambiguous=2, first_ambiguous=(1, 40), ignored={"name": 3})
    b = InputWarnings(ambiguous=1, first_ambiguous=(0, 7), ignored={"name": 1, "tools": 2}, dropped={"tool_calls": 5})
    a.add(b)
    assert a.to_dict() == {"ambiguous": 3, "first_ambiguous": (0, 7), "ignored": {"name": 4, "tools": 2},
                           "dropped": {"tool_calls": 5}}
    assert InputWarnings.from_dict(a.to_dict()) == a
