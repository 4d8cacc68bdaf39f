"""`packcli.ingest.spans`: a source's location-free name, and every failure to read a file turned into an error
that names it (anything else stays a bug)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

from packcli.errors import InputError
from packcli.ingest.spans import Source, SourceKind, read_errors


def test_a_source_is_named_by_its_base_name_or_its_hub_name():
    assert Source("/data/run 1/a.jsonl", SourceKind.jsonl, ("/data/run 1/a.jsonl",)).name == "a.jsonl"
    assert Source("/cache/ds", SourceKind.dataset, ("/cache/ds/x.arrow",)).name == "ds"
    assert Source("hf:org/data:train", SourceKind.dataset, ()).name == "hf:org/data:train"


@pytest.mark.parametrize("failure", [
    lambda: Path("/nonexistent/packcli/a.jsonl").read_bytes(),
    lambda: gzip.decompress(b"\x1f\x8b\x08\x00truncated"),
    lambda: (_ for _ in ()).throw(pa.ArrowInvalid("Parquet magic bytes not found")),
], ids=["missing", "truncated-gzip", "corrupt-parquet"])
def test_a_file_that_cannot_be_read_is_an_input_error_naming_it(failure):
    with pytest.raises(InputError, match=r"^a\.jsonl: cannot read: ") as caught, read_errors("a.jsonl"):
        failure()
    assert caught.value.hint == "is the file complete and its extension right?"


def test_a_bug_while_reading_stays_a_bug():
    with pytest.raises(ZeroDivisionError), read_errors("a.jsonl"):
        1 / 0  # noqa: B018
