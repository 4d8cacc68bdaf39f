"""`packcli.tokenizer.fast.build.unsupported_reason`: the fast backend takes only a tokenizer.json whose byte-length
offsets are exact, and names why it refuses any other (the reference tokenizes it then)."""

from __future__ import annotations

import json

import pytest
from tokenizer_cases import FIXTURE_JSON

from packcli.tokenizer.fast.build import unsupported_reason

FIXTURE = json.loads(FIXTURE_JSON.read_text())


def edited(**changes: object) -> dict:
    spec = json.loads(json.dumps(FIXTURE))
    spec.update(changes)
    return spec


def test_the_fixture_tokenizer_is_supported():
    assert unsupported_reason(FIXTURE) is None
    assert unsupported_reason(edited(normalizer={"type": "NFC"})) is None  # NFC is aligned separately


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}


@pytest.mark.parametrize(("changes", "reason"), [
    ({"model": {"type": "WordPiece"}}, "model 'WordPiece' is not BPE"),
    ({"model": {**FIXTURE["model"], "dropout": 0.1}}, "BPE dropout makes tokenization random"),
    ({"pre_tokenizer": {"type": "Whitespace"}}, "not a byte-level BPE (no ByteLevel pre-tokenizer)"),
    ({"pre_tokenizer": {**BYTE_LEVEL, "add_prefix_space": True}}, "the ByteLevel pre-tokenizer adds a prefix space"),
    ({"normalizer": {"type": "Lowercase"}}, "changes the text (only none or NFC is supported)"),
    ({"post_processor": {"type": "BertProcessing"}}, "post-processor 'BertProcessing'"),
    ({"post_processor": {**BYTE_LEVEL, "trim_offsets": True}}, "trims whitespace from offsets"),
    ({"added_tokens": [{"content": "<x>", "lstrip": True}]}, "added token '<x>' strips whitespace"),
    ({"normalizer": {"type": "NFC"}, "added_tokens": [{"content": "<é>"}]}, "added token '<é>' is normalized"),
])
def test_each_tokenizer_the_offsets_would_be_wrong_for_is_named(changes, reason):
    assert reason in unsupported_reason(edited(**changes))
