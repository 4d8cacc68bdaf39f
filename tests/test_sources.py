"""Sources beside JSONL: Parquet files, datasets directories, cached hub splits; spans; column mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import hub_cache, jsonl_records, write_jsonl, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from packcli.artifact import manifest as mf
from packcli.choices import Format
from packcli.cli import app
from packcli.config import PackConfig
from packcli.errors import InputError, PackcliError, RecordError
from packcli.ingest import (
    DEFAULT_FIELDS,
    FieldMap,
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
from packcli.job.run import pack_corpus
from packcli.verify import verify_artifact

# Records whose fields have one type each, so pyarrow can give them one schema (OpenAI content is
# sometimes a string and sometimes a list of parts: no single Arrow type holds both).
UNIFORM = ("sharegpt.jsonl", "prompt_completion.jsonl", "text.jsonl")


def pack(inputs, tokenizer_dir, out, **kw):
    kw.setdefault("capacity", 512)
    return pack_corpus(PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out, **kw))


def content(record):
    """A record without where it came from."""
    return {k: v for k, v in vars(record).items() if k not in ("file_index", "line")}


def token_columns(directory: Path, manifest: dict) -> list[dict]:
    """The shards' token columns: what training reads (example ids differ with the input's sha256)."""
    cols = ["input_ids", "labels", "position_ids", "cu_seqlens", "num_tokens", "num_supervised"]
    return [pq.read_table(directory / s["name"], columns=cols).to_pydict() for s in manifest["shards"]]


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
    a = pack([write_jsonl(tmp_path / "c.jsonl", records)], tokenizer_dir, tmp_path / "a")
    b = pack([write_parquet(tmp_path / "c.parquet", records, row_group_size=9)], tokenizer_dir, tmp_path / "b",
             lines_per_unit=20)
    assert a.manifest["counts"] == b.manifest["counts"]
    assert token_columns(tmp_path / "a", a.manifest) == token_columns(tmp_path / "b", b.manifest)
    assert b.manifest["inputs"][0]["kind"] == "parquet"
    assert verify_artifact(tmp_path / "b").ok


def test_parquet_unit_size_does_not_change_the_artifact(tmp_path, tokenizer_dir):
    path = write_parquet(tmp_path / "c.parquet", jsonl_records(*UNIFORM), row_group_size=33)
    one = pack([path], tokenizer_dir, tmp_path / "one", lines_per_unit=100_000)
    many = pack([path], tokenizer_dir, tmp_path / "many", lines_per_unit=7)
    assert many.units > one.units == 1
    assert one.manifest["manifest_sha256"] == many.manifest["manifest_sha256"]


def test_parquet_units_resume(tmp_path, tokenizer_dir, monkeypatch):
    """A run stopped after tokenizing reuses every finished Parquet unit and gives the same artifact."""
    import packcli.job.run as pipeline
    from packcli.prepare import Preparer

    path = write_parquet(tmp_path / "c.parquet", jsonl_records(*UNIFORM), row_group_size=25)
    monkeypatch.setattr(pipeline, "apply_overlong", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pack([path], tokenizer_dir, tmp_path / "o", lines_per_unit=30)
    monkeypatch.undo()
    calls = []
    real = Preparer.prepare
    monkeypatch.setattr(Preparer, "prepare", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    resumed = pack([path], tokenizer_dir, tmp_path / "o", lines_per_unit=30)
    assert calls == [] and resumed.units > 1
    monkeypatch.undo()
    assert pack([path], tokenizer_dir, tmp_path / "f", lines_per_unit=30).manifest["manifest_sha256"] == \
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


def test_datasets_directory_is_read_across_its_arrow_files(tmp_path, tokenizer_dir):
    datasets = pytest.importorskip("datasets")
    records = jsonl_records("sharegpt.jsonl")
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "ds"), num_shards=3)
    source = expand_inputs([tmp_path / "ds"])[0]
    assert source.kind is SourceKind.dataset and len(source.files) == 3
    spans = reader(SourceKind.dataset).split(source, 7)
    got = [(n, row) for span in spans for n, row in read_span(span)]
    assert [n for n, _ in got] == list(range(len(records))) and [r for _, r in got] == records
    jsonl = pack([write_jsonl(tmp_path / "s.jsonl", records)], tokenizer_dir, tmp_path / "j")
    ds = pack([tmp_path / "ds"], tokenizer_dir, tmp_path / "d", lines_per_unit=11)
    assert token_columns(tmp_path / "j", jsonl.manifest) == token_columns(tmp_path / "d", ds.manifest)
    assert verify_artifact(tmp_path / "d").ok


def test_a_datasetdict_or_plain_directory_is_a_clear_error(tmp_path):
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_list([{"text": "a"}])
    datasets.DatasetDict({"train": table, "test": table}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match="DatasetDict with splits train, test") as info:
        expand_inputs([tmp_path / "dd"])
    assert str(tmp_path / "dd" / "train") in info.value.hint
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        expand_inputs([tmp_path / "plain"])


def test_hub_name_from_the_local_cache_offline(tmp_path, tokenizer_dir, monkeypatch):
    pytest.importorskip("datasets")
    records = jsonl_records("prompt_completion.jsonl")
    cache = hub_cache(tmp_path, "tester/chat", {"train": write_parquet(tmp_path / "t.parquet", records),
                                                "test": write_parquet(tmp_path / "v.parquet", records[:5])})
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    train = expand_inputs(["hf:tester/chat"])[0]
    assert train.kind is SourceKind.dataset and [r for _, r in read_source(train)] == records
    assert len(list(read_source(expand_inputs(["hf:tester/chat:test"])[0]))) == 5
    summary = pack(["hf:tester/chat"], tokenizer_dir, tmp_path / "o")
    assert summary.manifest["inputs"][0]["name"] == "hf:tester/chat"  # location-free as it is
    assert verify_artifact(tmp_path / "o").ok
    assert "HF_HUB_OFFLINE" not in __import__("os").environ  # the caller's environment is left as it was
    with pytest.raises(InputError, match="hf:tester/nope: not readable from the local Hugging Face cache"):
        expand_inputs(["hf:tester/nope"])
    with pytest.raises(InputError, match="not a dataset name"):
        expand_inputs(["hf:a:b:c:d"])


def test_record_errors_name_file_and_row(tmp_path, tokenizer_dir):
    records = [{"text": "fine"}, {"text": "also fine"}, {"text": ""}]
    path = write_parquet(tmp_path / "r.parquet", records)
    with pytest.raises(RecordError, match=r"r\.parquet:2: text: empty"):
        pack([path], tokenizer_dir, tmp_path / "o", on_error="fail")
    summary = pack([path], tokenizer_dir, tmp_path / "o")
    rejects = [json.loads(line) for line in (tmp_path / "o" / "rejects.jsonl").read_text().splitlines()]
    assert rejects == [{"input": 0, "source": "r.parquet", "line": 2, "reason": "text: empty"}]
    assert summary.manifest["counts"]["rejected"] == 1


def test_a_corrupt_parquet_file_is_an_input_error(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="bad.parquet: cannot read"):
        check_sources(expand_inputs([path]), DEFAULT_FIELDS, Format.auto)


# ---- column mapping -------------------------------------------------------------------------------

RENAMED = [{"conversation": [{"speaker": t["role"], "says": t["content"]} for t in r["messages"]]}
           for r in jsonl_records("openai.jsonl") if all(isinstance(t["content"], str) for t in r["messages"])]
MAPPING = FieldMap(messages="conversation", role="speaker", content="says")


def test_mapping_reads_renamed_fields_the_same_way_in_every_format(tmp_path, tokenizer_dir):
    standard = [{"messages": [{"role": t["speaker"], "content": t["says"]} for t in r["conversation"]]}
                for r in RENAMED]
    control = pack([write_jsonl(tmp_path / "std.jsonl", standard)], tokenizer_dir, tmp_path / "c")
    for name, write in (("m.jsonl", write_jsonl), ("m.parquet", write_parquet)):
        out = tmp_path / name.replace(".", "_")
        summary = pack([write(tmp_path / name, RENAMED)], tokenizer_dir, out, fields=MAPPING)
        assert summary.manifest["counts"] == control.manifest["counts"], name
        assert token_columns(out, summary.manifest) == token_columns(tmp_path / "c", control.manifest), name
        assert summary.manifest["config"]["fields"] == {"messages": "conversation", "role": "speaker",
                                                        "content": "says"}
        assert verify_artifact(out).ok  # verify re-reads with the pinned mapping


def test_a_mapped_field_replaces_the_canonical_one():
    fields = FieldMap(text="body")
    assert fields.apply({"text": "ignored", "body": "read"}) == {"text": "read"}
    assert fields.apply({"text": "ignored"}) == {}  # no body: no text either, never a silent fallback
    assert parse_record(b'{"text": "x"}', file_index=0, line=1, fields=fields).reason.startswith("no known field")


@pytest.mark.parametrize("kw,message", [
    ({"messages": "text"}, "`fields.messages` and `fields.text` both read the field 'text'"),
    ({"role": "content"}, "`fields.role` and `fields.content` both read the field 'content'"),
    ({"prompt": " "}, "`fields.prompt` must name a field"),
])
def test_a_mapping_that_cannot_work_is_a_configuration_error(tmp_path, kw, message):
    with pytest.raises(PackcliError, match=message):
        PackConfig(inputs=("x.jsonl",), tokenizer="t", out=tmp_path / "o", fields=FieldMap(**kw))


@pytest.mark.parametrize("args,message", [
    (["--messages-field", "conversation"], "no column 'conversation' (--messages-field)"),
    (["--format", "messages"], "no column 'messages'"),
    (["--messages-field", "dialog", "--role-field", "who"], "have no key 'who' (--role-field)"),
])
def test_a_table_without_the_mapped_column_fails_before_any_work(tmp_path, tokenizer_dir, monkeypatch, args,
                                                                message):
    """One line naming the file and the column; the tokenizer is never loaded, nothing is written."""
    import packcli.job.run as pipeline

    monkeypatch.setattr(pipeline, "cached_tokenizer", lambda *a, **k: pytest.fail("the tokenizer was loaded"))
    path = write_parquet(tmp_path / "t.parquet", [{"dialog": [{"role": "user", "content": "x"}]}])
    result = CliRunner().invoke(app, ["pack", str(path), "-t", str(tokenizer_dir), "-o", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {path}: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 2  # the error and its hint
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_a_table_packcli_cannot_read_at_all_fails_before_any_work(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", [{"question": "q", "answer": "a"}])
    with pytest.raises(InputError, match="no column packcli reads .* columns: question, answer") as info:
        check_sources(expand_inputs([path]), DEFAULT_FIELDS, Format.auto)
    assert "`fields.prompt`" in info.value.hint
    check_sources(expand_inputs([path]), FieldMap(prompt="question", completion="answer"), Format.auto)


def test_stats_reads_parquet_with_the_same_mapping(tmp_path, tokenizer_dir):
    path = write_parquet(tmp_path / "m.parquet", RENAMED)
    std = write_jsonl(tmp_path / "a.jsonl", jsonl_records("text.jsonl"))
    result = CliRunner().invoke(app, ["stats", str(path), str(std), "-t", str(tokenizer_dir), "-c", "1024", "--json",
                                      "--messages-field", "conversation", "--role-field", "speaker",
                                      "--content-field", "says"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(i["source"], i["records"], i["rejected"]) for i in data["by_input"]] == [
        (str(std), 40, 0), (str(path), len(RENAMED), 0)]


def test_the_same_file_twice_gets_unique_ids_and_verifies(tmp_path, tokenizer_dir, corpus_files):
    """Two byte-identical inputs: every record twice, every example its own id (was: verify exit 1)."""
    (tmp_path / "copy").mkdir()
    twin = tmp_path / "copy" / "openai.jsonl"
    twin.write_bytes(Path(corpus_files[0]).read_bytes())
    summary = pack([corpus_files[0], twin], tokenizer_dir, tmp_path / "o")
    seam = pq.read_table(tmp_path / "o" / "examples.parquet").to_pydict()
    assert len(set(seam["example_id"])) == len(seam["example_id"]) == 2 * summary.manifest["inputs"][0]["records"]
    assert mf.read_manifest(tmp_path / "o")["inputs"][0]["sha256"] == summary.manifest["inputs"][1]["sha256"]
    assert verify_artifact(tmp_path / "o").ok


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


def test_expand_inputs_globs_sorted_and_missing(tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("{}\n")
    assert [Path(s.path).name for s in expand_inputs([str(tmp_path / "*.jsonl")])] == ["a.jsonl", "b.jsonl"]
    with pytest.raises(InputError, match="no such file"):
        expand_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(InputError, match="is a directory"):
        expand_inputs([str(tmp_path)])
