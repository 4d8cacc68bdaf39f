"""The fastokens backend against the reference: identical ids, labels and offsets, or the reference takes the example.

Property tests feed random Unicode (all planes, combining marks, fragments of special tokens) to both
backends; trap suites cover NFC, added tokens inside text, long runs, every code point once and mixed scripts.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_cases import (
    FIXTURE_JSON,
    MIXED,
    SPECIALS,
    TOKENIZERS,
    assert_all_go_to_the_reference,
    assert_same,
    examples,
    pair,
    text_st,
    variant,
)

from packcli.contract import IGNORE_INDEX
from packcli.tokenizer.guard import encode_batch
from packcli.tokenizer.types import TokenizerMismatchError

fastokens = pytest.importorskip("fastokens")


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=examples())
def test_random_unicode_gives_identical_ids_labels_offsets(pairs, name, batch):
    ref, fast = pairs(name)
    texts, spans, flags = (list(col) for col in zip(*batch))
    assert_same(ref, fast, texts, spans, flags)


@pytest.mark.parametrize("name", ["fixture", "fixture+nfc"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=examples())
def test_chunks_encoded_ahead_on_a_thread_give_the_same_arrays(pairs, name, batch, monkeypatch):
    """`FastBackend.encode` in chunks of 2 (fastokens encoding the next chunk while this one is finished)."""
    from packcli.tokenizer.fast import backend as fast_tokenizer

    monkeypatch.setattr(fast_tokenizer, "CHUNK", 2)
    ref, fast = pairs(name)
    texts, spans, flags = (list(col) for col in zip(*(batch * 3)))
    assert_same(ref, fast, texts, spans, flags)


def test_a_dropped_token_that_starts_no_character_goes_to_the_reference(pairs, monkeypatch):
    """With NFC, an NFC text keeps the identity map only if its tokens hold as many characters *and*
    bytes as the text: dropping the middle byte of an emoji (a token in which no character starts)
    keeps the character count right, and the text still goes to the reference; so does the next one."""
    ref, fast = pairs("fixture+nfc")
    texts, spans = ["a cab 😀 x", "Grüße 😀 caba"], [[(0, 10)], [(2, 12)]]
    real = fast.backend.fast
    middle = ref.tokenizer.token_to_id("ĺ")  # 0x98, the third byte of U+1F600

    class DropsAContinuationByte:
        def encode_batch_flat(self, batch, add_special_tokens):
            ids, bounds = real.encode_batch_flat(batch, add_special_tokens=add_special_tokens)
            ids, bounds = np.frombuffer(ids, dtype="<u4"), np.frombuffer(bounds, dtype="<u8").astype(np.int64)
            assert (ids == middle).sum() == len(batch)
            kept = ids != middle
            return ids[kept].tobytes(), np.concatenate(([0], np.cumsum(np.add.reduceat(kept, bounds[:-1])))
                                                       ).astype("<u8").tobytes()

    assert_all_go_to_the_reference(ref, fast, monkeypatch, DropsAContinuationByte(), texts, spans)


def test_an_id_swapped_for_one_of_the_same_size_is_left_to_the_guard(pairs, monkeypatch):
    """An id swapped for another one-byte token spells as many characters and bytes: the offsets still
    add up, so no per-example check can see it (the trade-off of not comparing every byte), and the
    guard's re-encoding does: the first example of a batch is always checked, every one under paranoid."""
    ref, fast = pairs("fixture+nfc")
    texts, spans = ["a cab", "Grüße caba"], [[(0, 5)], [(2, 10)]]
    real = fast.backend.fast
    a, c = (ref.tokenizer.token_to_id(ch) for ch in "ac")

    class SwapsAForC:
        def encode_batch_flat(self, batch, add_special_tokens):
            ids, bounds = real.encode_batch_flat(batch, add_special_tokens=add_special_tokens)
            swapped = np.frombuffer(ids, dtype="<u4").copy()
            swapped[swapped == a] = c
            return swapped.tobytes(), bounds

    monkeypatch.setattr(fast.backend, "fast", SwapsAForC())
    before = fast.backend.reference_fallbacks
    fast.backend.encode(texts, spans, add_special_tokens=False)
    assert fast.backend.reference_fallbacks == before  # not seen per example
    with pytest.raises(TokenizerMismatchError, match="example 0 of the batch: .* input_ids differ at token 0"):
        encode_batch(fast, texts, spans, [False, False])
    with pytest.raises(TokenizerMismatchError) as info:  # only the second has an a
        encode_batch(dataclasses.replace(fast, paranoid=True), ["Grüße", texts[1]], [[(0, 5)], spans[1]], [False] * 2)
    assert info.value.batch_index == 1 and info.value.position == 6  # G r ü ß e Ġc a


def test_tokens_that_spell_only_part_of_the_text_go_to_the_reference(pairs, monkeypatch):
    """With NFC, matching bytes are not enough: tokens that stop short of the text's end (the last one
    dropped) spell a prefix of it byte for byte, and must still go to the reference, the next text too
    (its bytes no longer start where the tokens say)."""
    ref, fast = pairs("fixture+nfc")
    texts, spans = ["a cab is here", "Grüße, caba"], [[(0, 13)], [(2, 11)]]
    real = fast.backend.fast

    class DropsLastToken:
        def encode_batch_flat(self, batch, add_special_tokens):
            ids, bounds = real.encode_batch_flat(batch, add_special_tokens=add_special_tokens)
            ids, bounds = np.frombuffer(ids, dtype="<u4"), np.frombuffer(bounds, dtype="<u8").astype(np.int64)
            kept = np.concatenate([ids[a:b - 1] for a, b in zip(bounds[:-1], bounds[1:])])
            return kept.tobytes(), (bounds - np.arange(len(bounds))).astype("<u8").tobytes()

    assert_all_go_to_the_reference(ref, fast, monkeypatch, DropsLastToken(), texts, spans)


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(text_st, text_st), min_size=1, max_size=4))
def test_chat_shaped_text_with_assistant_spans(pairs, name, turns):
    """ChatML-rendered turns with the assistant replies supervised, as the renderer produces them."""
    ref, fast = pairs(name)
    text, spans = "", []
    for user, reply in turns:
        text += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        spans.append((len(text), len(text) + len(reply) + len("<|im_end|>")))
        text += f"{reply}<|im_end|>\n"
    out = assert_same(ref, fast, [text, text], [spans, spans], [False, True])
    assert out[0].labels[0] == IGNORE_INDEX


@pytest.mark.parametrize("name", TOKENIZERS)
def test_traps_special_tokens_inside_text_and_mixed_scripts(pairs, name):
    ref, fast = pairs(name)
    texts = ["".join(SPECIALS), "x<|im_start|>y<|im_end|>z<|im_start", "<|im_start|><|im_start|>" * 20,
             "<|endoftext|>\u0301", "<|im_end|>\u0338", MIXED, MIXED * 40, "", " ", "\n\n\n"]
    spans = [[(0, len(t))] if k % 2 else [(1, max(1, len(t) // 2))] for k, t in enumerate(texts)]
    for flag in (False, True):
        assert_same(ref, fast, texts, spans, [flag] * len(texts))


@pytest.mark.parametrize("name", ["fixture+nfc", pytest.param("qwen3", marks=pytest.mark.real)])
def test_nfc_normalizer_on_text_that_is_not_nfc(pairs, name):
    """Decomposed text takes the aligned path (no reference fallback), except a run that may continue an
    added token, which goes to the reference; both equal the reference exactly."""
    ref, fast = pairs(name)
    texts = ["Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u", "e\u0301" * 300,
             "\u1100\u1161\u11a8 \u1112\u1161\u11ab", "\u0b47\u0b3e \U00011935\U00011930 \u0958\u093c",
             "x\u0323\u0301 x\u0301\u0323 \u212b \u2126 \u0344", "caf\u00e9 cafe\u0301 " + MIXED]
    spans = [[(0, len(t))] for t in texts]
    before = fast.backend.reference_fallbacks
    assert_same(ref, fast, texts, spans, [False] * len(texts))
    assert fast.backend.reference_fallbacks == before  # all of them aligned, not re-encoded
    assert_same(ref, fast, ["<|im_end|>\u0338 =\u0338"], [[(0, 12)]], [False])
    assert fast.backend.reference_fallbacks == before + 1


@pytest.mark.parametrize("limit, encodes", [(1 << 20, 1), (3, 3)])
def test_run_memo_knows_runs_nfc_leaves_alone_and_starts_again_past_its_limit(pairs, monkeypatch, limit, encodes):
    """Runs that fail the quick check but are NFC (Bengali vowel signs) are memoized as such and keep the
    identity map; the aligner sees each distinct run once, or again after the memo passed its limit
    (then it starts again on the next batch), without changing a result."""
    from packcli.tokenizer.fast.backend import RunAlignments

    class CountingAligner:
        def __init__(self, aligner):
            self.aligner, self.normalizer, self.calls = aligner, aligner.normalizer, 0

        def encode_batch(self, runs, **kw):
            self.calls += 1
            return self.aligner.encode_batch(runs, **kw)

    ref, fast = pairs("fixture+nfc")
    aligner = CountingAligner(fast.backend.alignments.aligner)
    memo = RunAlignments(aligner, limit=limit)
    monkeypatch.setattr(fast.backend, "alignments", memo)
    texts = ["\u09a8\u09be \u09ae\u09be \u09a8\u09be", "Tie\u0302\u0301ng Vie\u0323\u0302t \u09a8\u09be",
             "e\u0301 \u09c7\u09be"]
    for k in range(3):
        batch = texts[k:] + texts[:k]
        assert_same(ref, fast, batch, [[(0, len(t))] for t in batch], [False] * 3, guard=False)
    assert aligner.calls == encodes
    assert sorted(key.decode() for key in memo.index) == sorted(["\u09a8\u09be", "\u09ae\u09be", "e\u0302\u0301",
                                                                 "e\u0323\u0302", "e\u0301", "\u09c7\u09be"])
    assert [bool(memo.identity[memo.index[run.encode()]]) for run in ("\u09a8\u09be", "e\u0301", "\u09c7\u09be")] == [
        True, False, False]


def test_neighbours_of_an_example_sent_to_the_reference_keep_their_labels(pairs):
    """Found by the property test: an example the fast path hands back (a mark after an added token, out
    of canonical order) sat next to an aligned one, whose labels the vectorized search then got wrong."""
    ref, fast = pairs("fixture+nfc")
    texts = ["<|im_start|>\u0300\u0316", "0" * 17 + "\U00011935\U00011930", "plain ascii"]
    assert_same(ref, fast, texts, [[], [(0, 18)], [(2, 5)]], [False] * 3)


def test_a_run_holding_the_end_of_an_added_token_past_its_first_character_goes_to_the_reference(tmp_path,
                                                                                                monkeypatch):
    """A run can hold an ASCII character past its first one only after a code point unassigned here (a
    newer Unicode may compose the two). If that character ends an added token, ``tokenizers`` cuts the
    token out before normalizing, so normalizing the run whole would be wrong: the text must go to the
    reference. Simulated: an added token "k", and à taken for unassigned, so the run is à k U+0301,
    which NFC turns into à ḱ where ``tokenizers`` keeps the token "k"."""
    from packcli.tokenizer.fast import backend as fast_tokenizer

    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    token = {"id": spec["model"]["vocab"]["k"], "content": "k", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
    path = variant(tmp_path, "k", normalizer={"type": "NFC"}, added_tokens=[*spec["added_tokens"], token])
    table = fast_tokenizer._nfc_table().copy()
    table[ord("\u00e0")] |= 256 | 512
    monkeypatch.setattr(fast_tokenizer, "_nfc_table", lambda: table)
    ref, fast = pair(path)
    texts = ["x\u00e0k\u0301 y", "x\u00e0o\u0301 y"]
    assert_same(ref, fast, texts, [[(0, 6)]] * 2, [False] * 2)
    assert fast.backend.reference_fallbacks == 1  # the first; the second has no added token in its run


def test_every_code_point_once(pairs):
    """In code point order, in chunks; with NFC, so both the identity and the aligned path run."""
    ref, fast = pairs("fixture+nfc")
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = ["".join(points[k:k + 8192]) for k in range(0, len(points), 8192)]
    spans = [[(100, 4000), (5000, 5001)] for _ in texts]
    assert_same(ref, fast, texts, spans, [False] * len(texts), guard=False)


def test_the_nfc_pre_pass_leaves_each_texts_utf8_cached_for_fastokens():
    """Not correctness (tested everywhere else) but the mechanism the pre-pass's speed rests on: a
    pyarrow that stopped caching would cost Qwen3 6-11% with every test still green."""
    from packcli.tokenizer.fast.backend import _utf8

    texts = ["".join(["é", "x" * k, "😀"]) for k in range(3)]  # built at run time: not shared constants
    before = [sys.getsizeof(t) for t in texts]
    joined, starts = _utf8(texts)
    assert joined == b"".join(t.encode() for t in texts) and starts.tolist() == [0, 6, 13, 21]
    assert [sys.getsizeof(t) - b for t, b in zip(texts, before)] == [len(t.encode()) + 1 for t in texts]
    assert _utf8([])[0] == b"" and _utf8(["", ""])[1].tolist() == [0, 0, 0]


@pytest.mark.parametrize("name", ["fixture", "fixture+nfc"])
def test_a_lone_surrogate_is_a_unicode_error_on_the_fast_path(pairs, name):
    """ingest rejects them; a library caller gets the error that names the character (before the UTF-8
    moved to pyarrow, the NFC path failed later, in the aligner, with a TypeError)."""
    _, fast = pairs(name)
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        fast.backend.encode(["ok", "a\ud800b"], [[(0, 1)], [(0, 1)]], add_special_tokens=False)


@pytest.mark.slow
def test_two_million_spaces(pairs):
    ref, fast = pairs("fixture")
    text = " " * 2_000_000
    assert_same(ref, fast, [text, "a" + text[:1000] + "b"], [[(5, 1_999_000)], [(0, 3)]], [False, False], guard=False)


@pytest.mark.real
@pytest.mark.parametrize("name", ["qwen3", "llama3_2"])
def test_long_runs_without_spaces(pairs, name):
    ref, fast = pairs(name)
    texts = ["a" * 50_000, "1234567890" * 5_000, "\u4e2d" * 20_000, " " * 100_000 + "x", "😀" * 10_000]
    assert_same(ref, fast, texts, [[(10, len(t) - 10)] for t in texts], [True] * len(texts), guard=False)


@given(st.lists(st.lists(st.integers(0, 30), max_size=5), min_size=1, max_size=6), st.integers(0, 40))
def test_batch_rows_keep_every_chunk_in_order_as_they_grow(chunks, texts):
    """Chunks of any size, more texts than announced or fewer: what was written stays (growing copies
    the rows taken), each chunk lands after the one before, and the bounds count from the batch's start."""
    from packcli.tokenizer.fast.backend import BatchRows

    rows, ids_want, bounds_want = BatchRows(texts), [], [0]
    for k, lengths in enumerate(chunks):
        ids, offsets, labels = rows.take(np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
        values = np.arange(len(ids), dtype=np.int32) + 1000 * k
        ids[:], labels[:], offsets[:] = values, -values, values[:, None]
        ids_want += values.tolist()
        bounds_want += (bounds_want[-1] + np.cumsum(lengths)).tolist()
    batch = rows.batch()
    assert batch.ids.tolist() == ids_want and batch.labels.tolist() == [-v for v in ids_want]
    assert batch.offsets.tolist() == [[v, v] for v in ids_want] and batch.bounds.tolist() == bounds_want
