"""`packcli.ingest.columnar`: a table's columns checked before any work, and what a row keeps of its JSON where a
column's type cannot hold it (warned)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import write_parquet
from typer.testing import CliRunner

from packcli.choices import Format
from packcli.cli import app
from packcli.errors import InputError
from packcli.ingest import DEFAULT_FIELDS, FieldMap, check_sources, expand_inputs


def test_a_table_packcli_cannot_read_at_all_fails_before_any_work(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", [{"question": "q", "answer": "a"}])
    with pytest.raises(InputError, match="no column packcli reads .* columns: question, answer") as info:
        check_sources(expand_inputs([path]), DEFAULT_FIELDS, Format.auto)
    assert "`fields.prompt`" in info.value.hint
    check_sources(expand_inputs([path]), FieldMap(prompt="question", completion="answer"), Format.auto)


def test_what_a_parquet_row_keeps_of_its_json_and_the_warning_where_it_does_not(tmp_path, tokenizer_dir):
    """docs/inputs.md: strings, lists and keys come back; a struct's key order, its null members and a whole
    number in a float column do not. The columns where a template would print the difference are named."""
    from packcli.ingest import read_source, source_of
    from packcli.ingest.columnar import type_warnings

    call = {"type": "function", "function": {"name": "f", "arguments": {"b": 5, "a": None}}}
    records = [{"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                             {"role": "tool", "content": "done"}, {"role": "assistant", "content": "ok"}]},
               {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [
                   {"type": "function", "function": {"name": "g", "arguments": {"a": "x", "b": 2.5}}}]},
                   {"role": "tool", "content": "done"}, {"role": "assistant", "content": "ok"}]}]
    data = write_parquet(tmp_path / "calls.parquet", records)
    rows = [row for _, row in read_source(source_of(data))]
    assert [m["content"] for m in rows[0]["messages"]] == ["go", "", "done", "ok"]  # kept
    assert rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"b": 5.0}  # a: null gone, 5 -> 5.0
    assert list(rows[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == ["b", "a"]  # the table's order
    lines = type_warnings(pq.read_schema(data))
    assert lines == ["messages[].tool_calls[].function.arguments is a struct: its keys read back in the table's "
                     "order, without the ones whose value was null",
                     "messages[].tool_calls[].function.arguments.b is double: a whole number the JSON had as 5 reads "
                     "back as 5.0"]
    assert type_warnings(pq.read_schema(write_parquet(tmp_path / "plain.parquet", [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]))) == []
    result = CliRunner().invoke(app, ["pack", str(data), "-t", str(tokenizer_dir), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "columns whose type cannot hold the JSON they came from" in result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["unhashed"]["input_warnings"]["column_types"] == {str(data): lines}
