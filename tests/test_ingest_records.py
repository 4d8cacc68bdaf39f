"""`packcli.ingest.records`: format detection, normalisation, a clear reason for every bad record, content keys."""

from __future__ import annotations

import pytest
from conftest import parse_line

from packcli.choices import Format
from packcli.ingest import Kind, Rejection, parse_record


def test_ambiguous_records_say_which_field_was_read():
    rec = parse_line({"text": "t", "messages": [{"role": "user", "content": "u"}]})
    assert rec.format is Format.messages and rec.ambiguous == ("text",)
    assert parse_line({"messages": [{"role": "user", "content": "u"}]}).ambiguous == ()
    assert parse_line({"prompt": "p", "completion": "c", "text": "t"}).ambiguous == ("text",)


def test_prompt_completion_and_text():
    assert parse_line({"prompt": "p", "completion": "c"}).kind is Kind.prompt_completion
    assert parse_line({"text": "t"}).kind is Kind.text


def test_forced_format_overrides_detection():
    rec = parse_line({"text": "t", "messages": [{"role": "user", "content": "u"}]}, Format.text)
    assert rec.kind is Kind.text and rec.format is Format.text and rec.ambiguous == ()


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
    (b'{"messages": [{"role": "user", "content": [{"type": "image", "url": "x"}]}]}',
     "messages[0].content[0]: a 'image' part; packcli packs text only"),
])
def test_bad_records_are_rejected_with_the_field_named(raw, reason):
    rej = parse_line(raw)
    assert isinstance(rej, Rejection)
    assert reason in rej.reason and rej.line == 7


def test_content_key_ignores_where_and_how_a_record_is_written_but_not_what_it_says():
    from packcli.ingest import content_key

    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    same = [
        parse_line(chat),
        parse_record(b'{ "messages":[{"content":"hi","role":"user"},{"content":"y\\u006f","role":"assistant"}] }',
                     file_index=3, line=99),  # other key order, spacing, escapes, file and line
        parse_record(chat, file_index=0, line=0),  # a Parquet/Arrow row
        parse_line({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}),
        parse_line({"messages": [{"role": "user", "content": "hi", "name": None}, {"role": "assistant", "content": "yo"}]}),
    ]
    assert len({content_key(r) for r in same}) == 1
    different = [parse_line({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo!"}]}),
                 parse_line({"messages": [{"role": "system", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
                 parse_line({"prompt": "hi", "completion": "yo"}),
                 # content as parts reaches the template as parts (a template may render them otherwise)
                 parse_line({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                     {"role": "assistant", "content": "yo"}]}),
                 parse_line({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                        "tools": [{"type": "function", "function": {"name": "f"}}]})]
    assert len({content_key(r) for r in different + same[:1]}) == 6
