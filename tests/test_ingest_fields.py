"""`packcli.ingest.fields`: a column mapping reads renamed fields the same way in every format, for pack and stats,
and a mapping that cannot work fails before any work."""

from __future__ import annotations

import json

import pytest
from conftest import jsonl_records, pack_inputs, token_columns, write_jsonl, write_parquet
from typer.testing import CliRunner

from packcli.cli import app
from packcli.config import PackConfig
from packcli.errors import PackcliError
from packcli.ingest import FieldMap, parse_record
from packcli.verify import verify_artifact

RENAMED = [{"conversation": [{"speaker": t["role"], "says": t["content"]} for t in r["messages"]]}
           for r in jsonl_records("openai.jsonl") if all(isinstance(t["content"], str) for t in r["messages"])]
MAPPING = FieldMap(messages="conversation", role="speaker", content="says")


def test_mapping_reads_renamed_fields_the_same_way_in_every_format(tmp_path, tokenizer_dir):
    standard = [{"messages": [{"role": t["speaker"], "content": t["says"]} for t in r["conversation"]]}
                for r in RENAMED]
    control = pack_inputs([write_jsonl(tmp_path / "std.jsonl", standard)], tokenizer_dir, tmp_path / "c")
    for name, write in (("m.jsonl", write_jsonl), ("m.parquet", write_parquet)):
        out = tmp_path / name.replace(".", "_")
        summary = pack_inputs([write(tmp_path / name, RENAMED)], tokenizer_dir, out, fields=MAPPING)
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
