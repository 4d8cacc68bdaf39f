"""`packcli.ingest.parquet`: Parquet rows read as their JSONL lines and packed to the same tokens, in row spans that
cover every row once, resumable, and a bad file or row named."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import jsonl_records, pack_inputs, token_columns, write_jsonl, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.choices import Format
from packcli.errors import InputError, RecordError
from packcli.ingest import (
    DEFAULT_FIELDS,
    Record,
    SourceKind,
    check_sources,
    describe_input,
    expand_inputs,
    parse_record,
    read_source,
    read_span,
    reader,
)
from packcli.ingest.parquet import MAX_SPANS_PER_GROUP
from packcli.verify import verify_artifact

# Records whose fields have one type each, so pyarrow can give them one schema (OpenAI content is
# sometimes a string and sometimes a list of parts: no single Arrow type holds both).
UNIFORM = ("sharegpt.jsonl", "prompt_completion.jsonl", "text.jsonl")


def content(record):
    """A record without where it came from."""
    return {k: v for k, v in vars(record).items() if k not in ("file_index", "line")}


def test_parquet_rows_parse_as_their_jsonl_lines(tmp_path):
    records = jsonl_records(*UNIFORM)
    path = write_parquet(tmp_path / "c.parquet", records, row_group_size=17)
    rows = list(read_source(describe_input(path)))
    assert [n for n, _ in rows] == list(range(len(records)))  # rows numbered from 0
    for (n, row), record in zip(rows, records):
        a = parse_record(row, file_index=0, line=n)
        b = parse_record(json.dumps(record).encode(), file_index=0, line=n)
        assert isinstance(a, Record) and content(a) == content(b)


def test_nulls_of_a_shared_schema_read_as_absent_fields(tmp_path):
    """A table converted from JSONL gives every row every column; a null must not become a field."""
    records = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "name": "bot"}]},
               {"text": "plain"}]
    rows = [row for _, row in read_source(describe_input(write_parquet(tmp_path / "m.parquet", records)))]
    assert rows == records  # not {"messages": None, "text": "plain"}, not turns with "name": None
    assert parse_record(rows[1], file_index=0, line=1).text == "plain"


def test_parquet_packs_the_same_tokens_as_jsonl(tmp_path, tokenizer_dir):
    records = jsonl_records(*UNIFORM)
    a = pack_inputs([write_jsonl(tmp_path / "c.jsonl", records)], tokenizer_dir, tmp_path / "a")
    b = pack_inputs([write_parquet(tmp_path / "c.parquet", records, row_group_size=9)], tokenizer_dir, tmp_path / "b",
             lines_per_unit=20)
    assert a.manifest["counts"] == b.manifest["counts"]
    assert token_columns(tmp_path / "a", a.manifest) == token_columns(tmp_path / "b", b.manifest)
    assert b.manifest["inputs"][0]["kind"] == "parquet"
    assert verify_artifact(tmp_path / "b").ok


def test_parquet_unit_size_does_not_change_the_artifact(tmp_path, tokenizer_dir):
    path = write_parquet(tmp_path / "c.parquet", jsonl_records(*UNIFORM), row_group_size=33)
    one = pack_inputs([path], tokenizer_dir, tmp_path / "one", lines_per_unit=100_000)
    many = pack_inputs([path], tokenizer_dir, tmp_path / "many", lines_per_unit=7)
    assert many.units > one.units == 1
    assert one.manifest["manifest_sha256"] == many.manifest["manifest_sha256"]


def test_parquet_units_resume(tmp_path, tokenizer_dir, monkeypatch):
    """A run stopped after tokenizing reuses every finished Parquet unit and gives the same artifact."""
    import packcli.job.run as pipeline
    from packcli.prepare import Preparer

    path = write_parquet(tmp_path / "c.parquet", jsonl_records(*UNIFORM), row_group_size=25)
    monkeypatch.setattr(pipeline, "apply_overlong", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pack_inputs([path], tokenizer_dir, tmp_path / "o", lines_per_unit=30)
    monkeypatch.undo()
    calls = []
    real = Preparer.prepare
    monkeypatch.setattr(Preparer, "prepare", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    resumed = pack_inputs([path], tokenizer_dir, tmp_path / "o", lines_per_unit=30)
    assert calls == [] and resumed.units > 1
    monkeypatch.undo()
    assert pack_inputs([path], tokenizer_dir, tmp_path / "f", lines_per_unit=30).manifest["manifest_sha256"] == \
        resumed.manifest["manifest_sha256"]


@settings(max_examples=40, deadline=None)
@given(groups=st.lists(st.integers(0, 40), min_size=1, max_size=6), per_unit=st.integers(1, 25))
def test_parquet_spans_cover_every_row_once(tmp_path_factory, groups, per_unit):
    path = tmp_path_factory.mktemp("pq") / "g.parquet"
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        row = 0
        for size in groups:  # one row group each (empty ones included)
            writer.write_table(pa.table({"text": [f"r{row + k}" for k in range(size)]}, schema=schema))
            row += size
    source = describe_input(path)
    spans = reader(SourceKind.parquet).split(source, per_unit)
    got = [(n, r["text"]) for span in spans for n, r in read_span(span)]
    assert got == [(k, f"r{k}") for k in range(sum(groups))]
    bounds = [sum(groups[:g]) for g in range(len(groups) + 1)]
    for span in spans:  # at most per_unit rows, unless cut from a row group too large for that
        inside = [g for g in range(len(groups)) if bounds[g] <= span.start and span.end <= bounds[g + 1]]
        big = [groups[g] for g in inside if groups[g] > per_unit * MAX_SPANS_PER_GROUP]
        assert span.end - span.start <= per_unit or (big and span.end - span.start <= -(-big[0] // MAX_SPANS_PER_GROUP))
    for g in range(len(groups)):  # a row group is decoded by at most MAX_SPANS_PER_GROUP spans
        assert sum(1 for s in spans if s.start < bounds[g + 1] and s.end > bounds[g]) <= MAX_SPANS_PER_GROUP


def test_a_corrupt_parquet_file_is_an_input_error(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="bad.parquet: cannot read"):
        check_sources(expand_inputs([path]), DEFAULT_FIELDS, Format.auto)


def test_record_errors_name_file_and_row(tmp_path, tokenizer_dir):
    records = [{"text": "fine"}, {"text": "also fine"}, {"text": ""}]
    path = write_parquet(tmp_path / "r.parquet", records)
    with pytest.raises(RecordError, match=r"r\.parquet:2: text: empty"):
        pack_inputs([path], tokenizer_dir, tmp_path / "o", on_error="fail")
    summary = pack_inputs([path], tokenizer_dir, tmp_path / "o")
    rejects = [json.loads(line) for line in (tmp_path / "o" / "rejects.jsonl").read_text().splitlines()]
    assert rejects == [{"input": 0, "source": "r.parquet", "line": 2, "reason": "text: empty"}]
    assert summary.manifest["counts"]["rejected"] == 1
