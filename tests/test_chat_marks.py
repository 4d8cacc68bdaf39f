"""`packcli.chat.marks`: Hugging Face's ``tojson`` (no HTML escaping, unlike jinja2's own filter: templates print
tool arguments with it) and the generation marks, characters no text can hold."""

from __future__ import annotations

import unicodedata

import jinja2

from packcli.chat.marks import CLOSE, OPEN, hf_tojson

ARGS = {"query": "a < b && c > 'd'", "city": "Köln"}


def test_tojson_prints_json_as_transformers_does_and_never_html_escapes():
    assert hf_tojson(ARGS) == '{"query": "a < b && c > \'d\'", "city": "Köln"}'
    assert "\\u003c" in jinja2.Environment().from_string("{{ x|tojson }}").render(x=ARGS)  # what it must not do
    assert hf_tojson(ARGS, ensure_ascii=True) == '{"query": "a < b && c > \'d\'", "city": "K\\u00f6ln"}'
    assert hf_tojson({"b": 1, "a": [1, 2]}, indent=2, sort_keys=True) == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'
    assert hf_tojson([1, 2], separators=(",", ":")) == "[1,2]"


def test_the_generation_marks_are_unicode_noncharacters():
    assert OPEN != CLOSE and all(unicodedata.category(c) == "Cn" for c in (OPEN, CLOSE))
