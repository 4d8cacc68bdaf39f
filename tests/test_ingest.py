"""Ingestion: format detection, normalisation, and a clear reason for every bad record."""

from __future__ import annotations

import gzip
import json

import pytest

from packcli.choices import Format
from packcli.errors import InputError
from packcli.ingest import (
    Kind,
    Record,
    Rejection,
    expand_inputs,
    parse_record,
    read_lines,
)


def parse(obj_or_bytes, fmt=Format.auto):
    raw = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode()
    return parse_record(raw, file_index=0, line=7, fmt=fmt)


def test_openai_messages_with_text_parts():
    rec = parse({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                              {"role": "assistant", "content": "c"}]})
    assert isinstance(rec, Record) and rec.kind is Kind.chat
    assert [(m.role, m.content) for m in rec.messages] == [("user", "ab"), ("assistant", "c")]


@pytest.mark.parametrize("alias,role", [("human", "user"), ("gpt", "assistant"), ("chatgpt", "assistant"),
                                        ("bing", "assistant"), ("bard", "assistant"), ("system", "system")])
def test_sharegpt_role_aliases(alias, role):
    rec = parse({"conversations": [{"from": alias, "value": "x"}]})
    assert rec.messages[0].role == role


def test_prompt_completion_and_text():
    assert parse({"prompt": "p", "completion": "c"}).kind is Kind.prompt_completion
    assert parse({"text": "t"}).kind is Kind.text


def test_forced_format_overrides_detection():
    rec = parse({"text": "t", "messages": [{"role": "user", "content": "u"}]}, Format.text)
    assert rec.kind is Kind.text


@pytest.mark.parametrize("raw,reason", [
    (b'{"messages": [', "malformed JSON"),
    (b"[1, 2]", "expected a JSON object, got array"),
    (b'{"foo": 1}', "no known field"),
    (b'{"messages": []}', "messages: empty conversation"),
    (b'{"messages": [{"role": "wizard", "content": "x"}]}', "messages[0].role: unknown role 'wizard'"),
    (b'{"messages": [{"role": "user", "content": 42}]}', "messages[0].content: expected a string or a list of text parts, got number"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "invalid UTF-8 at byte"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    (b'{"text": "ok \\uDC00 then more"}', "lone surrogate"),  # upper-case escape, a low surrogate alone
    (b'{"prompt": "\\u00e9\\uD83D", "completion": "x"}', "lone surrogate"),  # after another escape
    (b'{"conversations": [{"from": "alien", "value": "x"}]}', "unknown role 'alien'"),
    (b'{"prompt": "p", "completion": 3}', "completion: expected a string, got number"),
    (b'{"text": ""}', "text: empty"),
])
def test_bad_records_are_rejected_with_the_field_named(raw, reason):
    rej = parse(raw)
    assert isinstance(rej, Rejection)
    assert reason in rej.reason and rej.line == 7


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


def test_expand_inputs_globs_sorted_and_missing(tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("{}\n")
    assert [p.name for p in expand_inputs([str(tmp_path / "*.jsonl")])] == ["a.jsonl", "b.jsonl"]
    with pytest.raises(InputError, match="no such file"):
        expand_inputs([str(tmp_path / "nope.jsonl")])
    with pytest.raises(InputError, match="is a directory"):
        expand_inputs([str(tmp_path)])
