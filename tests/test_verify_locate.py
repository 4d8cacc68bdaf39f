"""`packcli.verify.locate`: the files a manifest pins found where pack read them, else by name under the source
root with the pinned size and sha256: a file of the same name and other bytes is never taken for them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from packcli.artifact.manifest import Manifest
from packcli.errors import InputError
from packcli.verify.locate import at, find_source, find_tokenizer, locate_input

PINNED = json.loads((FIXTURES / "packed" / "manifest.json").read_text())  # provenance relative to the repository


def moved(**provenance: object) -> Manifest:
    """The committed fixture artifact's manifest, its unhashed provenance changed (where pack read the files)."""
    data = json.loads(json.dumps(PINNED))
    data["unhashed"]["provenance"].update(provenance)
    return Manifest.of(data)


def test_a_path_as_pack_was_given_it_resolves_from_the_root():
    assert at(None, ROOT) is None and at("", None) is None
    assert at("data/a.jsonl", Path("/srv")) == Path("/srv/data/a.jsonl")
    assert at("/abs/a.jsonl", Path("/srv")) == Path("/abs/a.jsonl")
    assert at("data/a.jsonl", None) == Path("data/a.jsonl")  # the working directory's


def test_a_source_is_found_at_its_provenance_path_from_the_root():
    manifest = moved()
    assert find_source(manifest, 1, ROOT) == ROOT / "fixtures" / "corpus" / "openai.jsonl"


def test_a_moved_source_is_found_by_name_size_and_sha256_never_by_name_alone(tmp_path):
    manifest = moved(inputs=[f"gone/{i['name']}" for i in PINNED["inputs"]])
    decoy = tmp_path / "a" / "text.jsonl"  # first in sorted order, the same name, other bytes
    decoy.parent.mkdir()
    decoy.write_text('{"text": "not the pinned file"}\n')
    real = tmp_path / "b" / "text.jsonl"
    real.parent.mkdir()
    shutil.copy(FIXTURES / "corpus" / "text.jsonl", real)
    k = next(k for k, i in enumerate(PINNED["inputs"]) if i["name"] == "text.jsonl")
    assert find_source(manifest, k, tmp_path) == real
    assert find_source(manifest, k, None) == Path("gone/text.jsonl")  # not there: the caller says so


def test_a_source_found_nowhere_is_an_input_error_naming_it(tmp_path):
    manifest = moved(inputs=[f"gone/{i['name']}" for i in PINNED["inputs"]])
    with pytest.raises(InputError, match=r"source gone/broken.jsonl: no such file \(input 0 of the manifest, "
                                         r"broken.jsonl, sha256 [0-9a-f]{16}\)") as caught:
        locate_input(manifest, 0, None)
    assert "`source_root`" in caught.value.hint


def test_the_tokenizer_is_found_by_its_pinned_sha256_under_the_root(tmp_path):
    manifest = moved(tokenizer="gone/tokenizer")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tokenizer.json").write_text("{}")  # a tokenizer.json, but not the pinned one
    shutil.copytree(FIXTURES / "tokenizer", tmp_path / "tok")
    assert find_tokenizer(manifest, tmp_path) == tmp_path / "tok" / "tokenizer.json"
    assert find_tokenizer(manifest, None) == Path("gone/tokenizer")
    assert find_tokenizer(moved(), ROOT) == ROOT / "fixtures" / "tokenizer"
