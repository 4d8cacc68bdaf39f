"""`packcli.ingest.sources`: the inputs as given (globs sorted, a missing file or a folder named), and the same
file given twice (every record its own id). Each reader has its file: tests/test_ingest_<reader>.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import pack_inputs

from packcli.artifact import manifest as mf
from packcli.errors import InputError
from packcli.ingest import expand_inputs
from packcli.verify import verify_artifact


def test_the_same_file_twice_gets_unique_ids_and_verifies(tmp_path, tokenizer_dir, corpus_files):
    """Two byte-identical inputs: every record twice, every example its own id (was: verify exit 1)."""
    (tmp_path / "copy").mkdir()
    twin = tmp_path / "copy" / "openai.jsonl"
    twin.write_bytes(Path(corpus_files[0]).read_bytes())
    summary = pack_inputs([corpus_files[0], twin], tokenizer_dir, tmp_path / "o")
    seam = pq.read_table(tmp_path / "o" / "examples.parquet").to_pydict()
    assert len(set(seam["example_id"])) == len(seam["example_id"]) == 2 * summary.manifest["inputs"][0]["records"]
    assert mf.read_manifest(tmp_path / "o")["inputs"][0]["sha256"] == summary.manifest["inputs"][1]["sha256"]
    assert verify_artifact(tmp_path / "o").ok


def test_expand_inputs_globs_sorted_and_missing(tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("{}\n")
    assert [Path(s.path).name for s in expand_inputs([str(tmp_path / "*.jsonl")])] == ["a.jsonl", "b.jsonl"]
    with pytest.raises(InputError, match="no such file"):
        expand_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(InputError, match="is a directory"):
        expand_inputs([str(tmp_path)])
