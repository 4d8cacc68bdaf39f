"""The reference backend: labels from span edges (char_to_token) equal labels from offsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from tokenizer_cases import MIXED, TOKENIZERS, assert_char_span_labels, examples

from packcli.tokenizer.reference import ReferenceBackend


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=examples())
def test_labels_from_char_spans_equal_labels_from_offsets(pairs, name, batch):
    texts, spans, _ = (list(col) for col in zip(*batch))
    assert_char_span_labels(pairs(name)[0].tokenizer, texts, spans)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_labels_from_char_spans_on_split_characters_and_every_code_point(pairs, name):
    """Edges inside a character split over byte tokens (emoji, CJK), decomposed text, added tokens."""
    tok = pairs(name)[0].tokenizer

    def every_edge(texts):
        spans = [[(k, k + 1), (k + 1, len(t))] for t in texts for k in range(len(t) - 1)]
        return [t for t in texts for _ in range(len(t) - 1)], spans

    texts, spans = every_edge(["😀👩🏽‍💻🇫🇷 x", "你好世界。日本語", "a<|im_end|>b<|im_start|>c", MIXED * 3])
    assert assert_char_span_labels(tok, texts, spans) == len(spans)
    assert_char_span_labels(tok, *every_edge(["Tie\u0302\u0301ng e\u0301 A\u0300" * 5]))  # may fall back
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    chunks = ["".join(points[k:k + 8192]) for k in range(0, len(points), 8192)]
    assert assert_char_span_labels(tok, chunks, [[(100, 4000), (5000, 5001)]] * len(chunks)) == len(chunks)


def test_the_reference_backend_without_offsets_gives_the_same_examples(pairs):
    ref = pairs("fixture")[0].tokenizer
    texts = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello 😀<|im_end|>\n", "plain", "xy"]
    spans = [[(43, 65)], [(0, 5)], [(1, 1)]]  # the last one irregular: the offsets path
    for flag in (False, True):
        lean = ReferenceBackend(ref, offsets=False).encode(texts, spans, add_special_tokens=flag)
        full = ReferenceBackend(ref).encode(texts, spans, add_special_tokens=flag)
        for a, b in zip(lean, full):
            assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.labels, b.labels)
        assert (lean.offsets is None) is (not flag)  # a batch keeps offsets only if every example has them
