"""`packcli.ingest.jsonl`: JSONL read line by line, compressed or not, blank lines skipped, an unreadable file named."""

from __future__ import annotations

import gzip

import pytest

from packcli.errors import InputError
from packcli.ingest import read_lines


def test_gz_and_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b'{"text": "a"}\n\n   \n{"text": "b"}\n')
    assert [line for line, _ in read_lines(path, 0)] == [1, 4]


def test_zst(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "a.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "a"}\n{"text": "b"}\n'))
    assert [line for line, _ in read_lines(path, 0)] == [1, 2]


def test_corrupt_gz_is_an_input_error(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="bad.jsonl.gz: cannot read"):
        list(read_lines(path, 0))
