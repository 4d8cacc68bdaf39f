"""`packcli.bundled`: the demo data a bare ``packcli pack`` packs, and a clear error where it is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcli import bundled as module
from packcli.bundled import DEFAULT_INPUTS, DEFAULT_TOKENIZER, bundled
from packcli.errors import InputError


def test_the_default_inputs_and_tokenizer_are_there():
    assert all(Path(bundled(name)).is_file() for name in DEFAULT_INPUTS)
    assert (Path(bundled(DEFAULT_TOKENIZER)) / "tokenizer.json").is_file()


def test_an_installation_without_them_says_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "FIXTURES", tmp_path)
    with pytest.raises(InputError, match="no bundled data at .* \\(packcli was not installed from a source checkout\\)"
                       ) as caught:
        bundled(DEFAULT_TOKENIZER)
    assert caught.value.hint == "pass INPUT files and `tokenizer` explicitly"
