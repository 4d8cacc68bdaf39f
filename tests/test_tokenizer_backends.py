"""The fastokens backend against the reference: identical ids, labels and offsets, or a loud failure.

Property tests feed random Unicode (all planes, combining marks, fragments of special tokens) to both
backends through `encode_batch` and compare every array; trap suites cover NFC, byte fallback, added
tokens inside text, long runs, every code point once and mixed scripts; the guard is fed broken
backends; ``auto`` is fed tokenizer files it must refuse.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, artifact_bytes, real_asset
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from packcli.config import PackConfig
from packcli.contract import IGNORE_INDEX, MANIFEST_NAME
from packcli.errors import InputError, PackcliError
from packcli.job.run import pack_corpus
from packcli.tokenizer.fast.backend import FastBackend
from packcli.tokenizer.guard import GUARD_PERIOD, encode_batch, guard_sample
from packcli.tokenizer.load import load_tokenizer
from packcli.tokenizer.reference import (
    ReferenceBackend,
    labels_from_char_spans,
    labels_from_spans,
)
from packcli.tokenizer.types import (
    Encoded,
    EncodedBatch,
    GuardStats,
    TokenizerMismatchError,
)

fastokens = pytest.importorskip("fastokens")
FIXTURE_JSON = FIXTURES / "tokenizer" / "tokenizer.json"
SPECIALS = ["<|im_", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>",
            "<|eot_id|>", "<|start_header_id|>", "<think>", "|>", "<", ">", "<|"]
MIXED = ("Grüße aus Köln! Привет, мир. 你好世界。日本語のテキスト。한국어 텍스트. مرحبا. שלום. नमस्ते. "
         "ภาษาไทย. Tiếng Việt. Ελληνικά. 😀👩🏽‍💻🇫🇷 x² ∑ ﬁ ℌ 𝔘 \u200b\u200d\ufeff \t\r\n")


def variant(tmp_dir: Path, name: str, **changes) -> Path:
    """A copy of the fixture tokenizer.json with top-level fields replaced."""
    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    spec.update(changes)
    path = tmp_dir / name / "tokenizer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def nfc_fixture(tmp_path_factory) -> Path:
    return variant(tmp_path_factory.mktemp("tok"), "nfc", normalizer={"type": "NFC"})


def _pair(path: Path):
    fast = load_tokenizer(path, backend="fastokens")
    # the reference with offsets (compared too): the same file, loaded once
    return dataclasses.replace(fast, backend=ReferenceBackend(fast.tokenizer), guard=GuardStats()), fast


@pytest.fixture(scope="module")
def pairs(nfc_fixture):
    """(reference, fast) per tokenizer, loaded once: the real ones take seconds each."""
    loaded = {"fixture": _pair(FIXTURE_JSON), "fixture+nfc": _pair(nfc_fixture)}

    def get(name: str):
        if name not in loaded:
            loaded[name] = _pair(real_asset(name))
        return loaded[name]
    return get


TOKENIZERS = ["fixture", "fixture+nfc", pytest.param("qwen3", marks=pytest.mark.real),
              pytest.param("llama3_2", marks=pytest.mark.real)]


def assert_same(ref_tok, fast_tok, texts, spans, flags, *, guard: bool = True) -> list[Encoded]:
    """Both backends on the same batch; every array equal. ``guard=False`` calls the fast backend
    directly (no guard re-encoding the sample), for inputs where the reference takes seconds."""
    ref = encode_batch(ref_tok, texts, spans, flags)
    assert ref_tok.backend_name == "tokenizers" and fast_tok.backend_name == "fastokens"
    if guard:
        fast = encode_batch(fast_tok, texts, spans, flags)
    else:
        assert len(set(flags)) == 1
        fast = fast_tok.backend.encode(texts, spans, add_special_tokens=flags[0])
    for i, (r, f) in enumerate(zip(ref, fast)):
        for what in ("input_ids", "labels", "offsets"):
            a, b = getattr(r, what), getattr(f, what)
            assert a.shape == b.shape and np.array_equal(a, b), (
                f"example {i} {texts[i][:60]!r}: {what} differ, reference {a.ravel()[:12]} fast {b.ravel()[:12]}")
        assert f.input_ids.dtype == np.int32 and f.labels.dtype == np.int32
    return fast


# ------------------------------------------------------------------------------------ properties

piece = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),  # every plane
    st.text(st.characters(categories=("Mn", "Mc", "Me")), min_size=1, max_size=4),  # combining marks
    st.sampled_from(SPECIALS),
    st.sampled_from(["e\u0301", "a\u0323\u0302", "x\u0301\u0323", "\u1100\u1161\u11a8", "\u0b47\u0b3e",
                     "\U00011935\U00011930", ">\u0338", "=\u0338", "\u212b", "\ufb01", "\u0958", "ﾊﾟ"]),
    st.text("ab \n\t", max_size=20),
    st.sampled_from(["😀", "👩🏽‍💻", "🇫🇷", "\U0010fffd", "\x00", "\u00a0", "\u3000", "  ", "\r\n"]),
)
text_st = st.lists(piece, max_size=12).map("".join)


@st.composite
def examples(draw):
    """A batch of texts, each with spans (in range, empty, or out of range) and its add_special_tokens."""
    batch = []
    for text in draw(st.lists(text_st, min_size=1, max_size=5)):
        n = len(text)
        spans = draw(st.lists(st.tuples(st.integers(0, n + 1), st.integers(0, n + 1)).map(sorted).map(tuple),
                              max_size=3))
        batch.append((text, spans, draw(st.booleans())))
    return batch


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


def assert_all_go_to_the_reference(ref, fast, monkeypatch, broken, texts, spans) -> None:
    """With ``broken`` in place of fastokens, every text goes to the reference, so the results are still exact."""
    monkeypatch.setattr(fast.backend, "fast", broken)
    before = fast.backend.reference_fallbacks
    out = fast.backend.encode(texts, spans, add_special_tokens=False)
    assert fast.backend.reference_fallbacks - before == len(texts)
    for got, want in zip(out, encode_batch(ref, texts, spans, [False] * len(texts))):
        assert got.input_ids.tolist() == want.input_ids.tolist() and got.labels.tolist() == want.labels.tolist()


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


# ------------------------------------------------------------------------------------ labels without offsets

def assert_char_span_labels(tokenizer, texts, spans) -> int:
    """The reference's two label paths agree; returns how many examples the char_to_token path took
    (not all: a combining mark that NFC composes into its base maps to no token of its own)."""
    taken = 0
    for text, enc, sp in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False), spans):
        ids = np.asarray(enc.ids, dtype=np.int32)
        want = labels_from_spans(ids, np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2), sp)
        got = labels_from_char_spans(enc, ids, sp)
        if not all(0 <= s < e <= len(text) for s, e in sp):
            assert got is None, f"{text[:40]!r} {sp}: an irregular span must take the offsets path"
        elif text.isascii():  # nothing for a normalizer to merge: every edge character has a token
            assert got is not None, f"{text[:40]!r} {sp}: regular spans on ASCII text must not fall back"
        if got is not None:
            taken += 1
            assert np.array_equal(got, want), f"{text[:60]!r} {sp}: {got[:12]} vs {want[:12]}"
    return taken


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


# ------------------------------------------------------------------------------------ traps

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
    ref, fast = _pair(path)
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


# ------------------------------------------------------------------------------------ the guard

class DropToken:
    """A deliberately broken fast backend: drops the last token of example ``victim``."""

    name, version, reference_fallbacks = "fastokens", "broken", 0

    def __init__(self, inner, victim: int = 0, what: str = "input_ids") -> None:
        self.inner, self.victim, self.what, self.calls = inner, victim, what, 0

    def encode(self, texts, spans, *, add_special_tokens):
        self.calls += 1
        out = list(self.inner.encode(texts, spans, add_special_tokens=add_special_tokens))
        e = out[self.victim]
        if self.what == "input_ids":
            out[self.victim] = Encoded(e.input_ids[:-1], e.labels[:-1], e.offsets[:-1])
        elif self.what == "labels":
            labels = e.labels.copy()
            labels[-1] = IGNORE_INDEX if labels[-1] != IGNORE_INDEX else e.input_ids[-1]
            out[self.victim] = Encoded(e.input_ids, labels, e.offsets)
        else:  # offsets only: ids and labels stay right
            out[self.victim] = Encoded(e.input_ids, e.labels, e.offsets + 1)
        return EncodedBatch.of(out)


def broken(victim: int = 0, what: str = "input_ids", paranoid: bool = False):
    tok = load_tokenizer(FIXTURE_JSON, backend="fastokens", paranoid=paranoid)
    object.__setattr__(tok, "backend", DropToken(tok.backend, victim, what))
    return tok


def reference(texts=None, flags=(False,) * 3) -> list[Encoded]:
    tok = load_tokenizer(FIXTURE_JSON)
    with_offsets = dataclasses.replace(tok, backend=ReferenceBackend(tok.tokenizer))
    return encode_batch(with_offsets, texts or TEXTS, SPANS, list(flags))


TEXTS = ["hello <|im_start|>world", "second example here", "third one, a bit longer than the others"]
SPANS = [[(0, 23)], [(7, 14)], [(0, 5), (10, 20)]]


def test_guard_catches_a_dropped_token_in_the_first_example():
    expected = reference()[0].input_ids
    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(broken(victim=0), TEXTS, SPANS, [False] * 3)
    err = info.value
    assert isinstance(err, PackcliError) and err.exit_code == 1
    assert (err.batch_index, err.what, err.position) == (0, "input_ids", len(expected) - 1)
    assert (err.fast, err.reference) == ([], [int(expected[-1])])
    assert "example 0 of the batch" in str(err) and "input_ids differ at token" in str(err)
    assert err.located("chat.jsonl:1832").message.startswith("chat.jsonl:1832: fastokens and tokenizers disagree")


def test_mismatch_error_survives_pickling():
    """Ray sends a worker's exception back pickled; the driver must get the same error, not a TypeError."""
    import pickle

    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(broken(victim=0), TEXTS, SPANS, [False] * 3)
    located = info.value.located("chat.jsonl:7")
    again = pickle.loads(pickle.dumps(located))
    assert type(again) is TokenizerMismatchError and again.message == located.message and again.hint == located.hint
    assert (again.batch_index, again.what, again.position) == (located.batch_index, located.what, located.position)


def _unit_job(tmp_path, *, asked: str, resolved: str, version: str, sha256: str | None = None):
    from packcli.chat import load_template
    from packcli.job.units import UnitJob

    return UnitJob(tokenizer=str(FIXTURE_JSON), tokenizer_sha256=sha256 or load_tokenizer(FIXTURE_JSON).sha256,
                   tokenizer_backend=asked, tokenizer_backend_resolved=resolved, tokenizer_backend_version=version,
                   paranoid_tokenizer=False, template_text=load_template("chatml").text,
                   template_source="builtin:chatml", template_date="2024-07-26", loss="auto", input_format="auto",
                   batch_records=8, fail_fast=False, work_dir=str(tmp_path), config_hash=f"{asked}-{resolved}")


def test_a_worker_with_another_backend_version_refuses(tmp_path):
    job = _unit_job(tmp_path, asked="fastokens", resolved="fastokens", version="0.0.1")
    with pytest.raises(PackcliError, match="the driver resolved 0.0.1"):
        job.build_preparer()


def test_a_worker_that_finds_another_tokenizer_file_refuses(tmp_path):
    job = _unit_job(tmp_path, asked="tokenizers", resolved="tokenizers", version=load_tokenizer(FIXTURE_JSON).version,
                    sha256="0" * 64)
    with pytest.raises(PackcliError, match="changed while pack ran"):
        job.build_preparer()


def test_a_warmed_tokenizer_is_used_only_if_it_resolved_as_the_driver_did(tmp_path):
    from packcli.tokenizer.load import cached_tokenizer, warm_tokenizer

    warm_tokenizer(str(FIXTURE_JSON), "auto", False)  # resolves to fastokens for the fixture
    warmed = cached_tokenizer(FIXTURE_JSON, backend="auto")
    assert warmed.backend_name == "fastokens"
    job = _unit_job(tmp_path, asked="auto", resolved="fastokens", version=warmed.backend_version)
    assert job.build_preparer().tokenizer is warmed  # taken, not loaded again
    reference = _unit_job(tmp_path, asked="auto", resolved="tokenizers",
                          version=load_tokenizer(FIXTURE_JSON).version).build_preparer().tokenizer
    assert reference is not warmed and reference.backend_name == "tokenizers"  # the driver fell back: so does it


def test_a_tokenizer_file_replaced_in_place_is_loaded_again(tmp_path):
    from packcli.tokenizer.load import cached_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_bytes(FIXTURE_JSON.read_bytes())
    first = cached_tokenizer(path)
    assert cached_tokenizer(path) is first
    data = json.loads(path.read_text())
    data["added_tokens"] = data["added_tokens"][:-1]
    path.write_text(json.dumps(data))
    again = cached_tokenizer(path)
    assert again is not first and again.sha256 != first.sha256


def test_guard_reports_the_batch_index_and_position_under_paranoid():
    tok = broken(victim=2, paranoid=True)
    expected = reference(flags=[True] * 3)[2].input_ids
    with pytest.raises(TokenizerMismatchError) as info:
        encode_batch(tok, TEXTS, SPANS, [True] * 3)
    assert info.value.batch_index == 2
    assert info.value.position == len(expected) - 1  # the fast side ran out one token early
    assert info.value.fast == [] and info.value.reference == [int(expected[-1])]


def test_guard_catches_a_flipped_label():
    with pytest.raises(TokenizerMismatchError, match="labels differ at token"):
        encode_batch(broken(victim=0, what="labels"), TEXTS, SPANS, [False] * 3)


def test_guard_misses_an_unsampled_example_but_paranoid_does_not():
    """The sample is the trade-off: a fault outside it passes the default guard."""
    right = reference()
    wrong = EncodedBatch.of([Encoded(e.input_ids[:-1], e.labels[:-1]) for e in right])  # what DropToken hands the guard
    victim = next(i for i in range(len(TEXTS)) if i not in guard_sample(right) + guard_sample(wrong))
    encode_batch(broken(victim=victim), TEXTS, SPANS, [False] * 3)  # not sampled: not caught
    with pytest.raises(TokenizerMismatchError):
        encode_batch(broken(victim=victim, paranoid=True), TEXTS, SPANS, [False] * 3)


def test_offset_mismatch_switches_the_rest_of_the_run_to_the_reference():
    tok = broken(victim=0, what="offsets")
    first = encode_batch(tok, TEXTS, SPANS, [False] * 3)
    assert tok.guard.offset_mismatches == 1 and "offsets differed" in tok.guard.disabled_reason
    np.testing.assert_array_equal(first.offsets, reference().offsets)  # the reference encoded the batch again
    calls = tok.backend.calls
    encode_batch(tok, TEXTS, SPANS, [False] * 3)
    assert tok.backend.calls == calls  # the fast backend is not asked again


@given(st.lists(st.lists(st.integers(-100, 500), max_size=6), max_size=8), st.data())
def test_an_encoded_batch_holds_its_examples_end_to_end(rows, data):
    examples = [Encoded(np.asarray(r, np.int32), np.asarray(r, np.int32)[::-1].copy(),
                        np.arange(2 * len(r), dtype=np.int64).reshape(-1, 2)) for r in rows]
    batch = EncodedBatch.of(examples)
    assert len(batch) == len(rows) and batch.lengths.tolist() == [len(r) for r in rows]
    assert batch.supervised.tolist() == [e.supervised for e in examples]  # empty examples count 0
    for got, want in zip(batch, examples):
        for what in ("input_ids", "labels", "offsets"):
            np.testing.assert_array_equal(getattr(got, what), getattr(want, what))
    if rows:
        k = data.draw(st.integers(-len(rows), len(rows) - 1))
        np.testing.assert_array_equal(batch[k].labels, examples[k].labels)
    start, stop = sorted(data.draw(st.lists(st.integers(0, len(rows)), min_size=2, max_size=2)))
    part, want = batch[start:stop], EncodedBatch.of(examples[start:stop])
    for what in ("ids", "labels", "bounds", "offsets"):
        np.testing.assert_array_equal(getattr(part, what), getattr(want, what))
    without = EncodedBatch.of([*examples, Encoded(np.zeros(1, np.int32), np.zeros(1, np.int32))])
    assert without.offsets is None and len(without) == len(rows) + 1  # offsets only when every example has them
    with pytest.raises(IndexError):
        batch[len(rows)]


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


def test_offsets_are_checked_on_the_first_example_of_a_batch_and_on_all_under_paranoid():
    """The trade-off of the lean reference: an offset fault past the first example passes the default
    guard (ids and labels, what is stored, are still compared on the whole sample), not paranoid."""
    sampled = encode_batch(load_tokenizer(FIXTURE_JSON, backend="fastokens"), TEXTS, SPANS, [False] * 3)
    assert 1 not in guard_sample(sampled)
    for paranoid, caught in ((False, 0), (True, 1)):
        tok = broken(victim=1, what="offsets", paranoid=paranoid)
        encode_batch(tok, TEXTS, SPANS, [False] * 3)
        assert tok.guard.offset_mismatches == caught and (tok.guard.disabled_reason is None) is not caught


def test_guard_counts_and_samples_deterministically():
    tok = load_tokenizer(FIXTURE_JSON, backend="fastokens")
    texts = [f"example number {k} with some text" for k in range(3000)]
    encoded = encode_batch(tok, texts, [[(0, 7)]] * 3000, [False] * 3000)
    sample = guard_sample(encoded)
    assert sample[0] == 0 and sample == guard_sample(encode_batch(load_tokenizer(FIXTURE_JSON), texts, [[(0, 7)]] * 3000,
                                                                   [False] * 3000))  # the same on either backend
    assert set(guard_sample(encoded[1:])) | {0} == {k - 1 for k in sample if k >= 1} | {0}  # position-independent
    assert 3000 / GUARD_PERIOD / 3 < len(sample) < 3000 / GUARD_PERIOD * 3
    assert tok.guard_checked == len(sample) and tok.guard.examples == 3000
    assert guard_sample(encoded, paranoid=True) == list(range(3000))


# ------------------------------------------------------------------------------------ choosing a backend

def test_default_is_the_reference_and_auto_picks_fastokens_for_the_fixture():
    assert load_tokenizer(FIXTURE_JSON).backend_name == "tokenizers"  # verify relies on this default
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert (tok.backend_name, tok.backend_version) == ("fastokens", metadata.version("fastokens"))
    assert tok.backend_reason.startswith("auto: fastokens")


@pytest.mark.parametrize("change,reason", [
    ({"normalizer": {"type": "NFKC"}}, "normalizer"),
    ({"normalizer": {"type": "Lowercase"}}, "normalizer"),
    ({"post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}},
     "trims"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}},
     "prefix space"),
])
def test_auto_falls_back_for_unsupported_files(tmp_path, change, reason):
    path = variant(tmp_path, "v", **change)
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and reason in tok.backend_reason
    with pytest.raises(InputError, match="cannot encode this tokenizer exactly"):
        load_tokenizer(path, backend="fastokens")


def test_auto_falls_back_for_a_vocabulary_token_outside_the_byte_alphabet(tmp_path):
    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    top = max([*spec["model"]["vocab"].values(), *(t["id"] for t in spec["added_tokens"])]) + 1
    path = variant(tmp_path, "v", model={**spec["model"], "vocab": {**spec["model"]["vocab"], "x😀": top}})
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and "'x😀' is not in the byte-level alphabet" in tok.backend_reason


def test_auto_falls_back_for_a_byte_fallback_sentencepiece_bpe(tmp_path):
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    for t in ("▁", "a", "b", "▁a", "ab", "▁ab"):
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, [("▁", "a"), ("a", "b"), ("▁a", "b")], unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(tmp_path, backend="auto")
    assert loaded.backend_name == "tokenizers" and "byte-level" in loaded.backend_reason
    out = encode_batch(loaded, ["ab a é <s>"], [[(0, 4)]], [False])[0]
    assert out.input_ids.tolist() == tok.encode("ab a é <s>").ids  # é by byte fallback: <0xC3> <0xA9>


def test_auto_falls_back_when_the_self_check_fails(monkeypatch):
    from packcli.tokenizer.fast import backend as fast_tokenizer

    real = fast_tokenizer.FastBackend._encode_fast

    def drop_last(self, texts, spans, flag):
        out, ok = real(self, texts, spans, flag)
        return EncodedBatch.of([Encoded(e.input_ids[:-1], e.labels[:-1], e.offsets[:-1]) if len(e.input_ids)
                                else e for e in out]), ok
    monkeypatch.setattr(fast_tokenizer.FastBackend, "_encode_fast", drop_last)
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert tok.backend_name == "tokenizers" and "self-check" in tok.backend_reason


def test_auto_without_fastokens_or_with_another_version(monkeypatch):
    from packcli.tokenizer.fast import backend as fast_tokenizer

    monkeypatch.setattr(fast_tokenizer.metadata, "version", lambda name: "9.9.9")
    assert "validated with 0.3.5" in load_tokenizer(FIXTURE_JSON, backend="auto").backend_reason
    assert load_tokenizer(FIXTURE_JSON, backend="fastokens").backend_name == "fastokens"  # explicit: allowed
    monkeypatch.setitem(sys.modules, "fastokens", None)  # import fails
    assert "not installed" in load_tokenizer(FIXTURE_JSON, backend="auto").backend_reason
    with pytest.raises(InputError, match="not installed"):
        load_tokenizer(FIXTURE_JSON, backend="fastokens")


def test_a_file_fastokens_fails_to_parse_on_its_thread_is_refused_with_the_reason(monkeypatch):
    def refuse(raw):
        raise ValueError("no such pre-tokenizer")
    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", staticmethod(refuse))
    tok = load_tokenizer(FIXTURE_JSON, backend="auto")
    assert tok.backend_name == "tokenizers" and "cannot load it: no such pre-tokenizer" in tok.backend_reason
    with pytest.raises(InputError, match="cannot load it"):
        load_tokenizer(FIXTURE_JSON, backend="fastokens")


@pytest.mark.parametrize("extra", [{}, {"decoder": {"type": "ByteLevel", "normalizer": {"type": "NFC"}}}])
def test_fastokens_gets_the_file_without_its_normalizer(extra):
    """The normalizer's value is cut out of the text where its key is found once (the usual file), and the
    spec is written again where it is not (here: a second key of that name, nested)."""
    from packcli.tokenizer.fast.load import _without_normalizer

    spec = {**json.loads(FIXTURE_JSON.read_text(encoding="utf-8")), "normalizer": {"type": "NFC"}, **extra}
    raw = json.dumps(spec, indent=2)
    out = _without_normalizer(raw, spec)
    assert json.loads(out) == {**spec, "normalizer": None}
    assert ("\n" in out) is not bool(extra)  # cut keeps the file's indentation; written again, it has none
    assert _without_normalizer(raw, {**spec, "normalizer": None}) is raw


def _flat_spans(spans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each example's spans end to end, as the kernels take them: pointers, starts, ends."""
    span_ptr = np.concatenate(([0], np.cumsum([len(sp) for sp in spans]))).astype(np.int64)
    flat = np.array([x for sp in spans for pair in sp for x in pair], dtype=np.int64).reshape(-1, 2)
    return span_ptr, flat[:, 0].copy(), flat[:, 1].copy()


def _check_labels_kernel(examples) -> None:
    """The kernel against `labels_from_spans`, token by token; ``examples``: (tokens, spans) pairs."""
    from packcli.tokenizer.fast import kernels as fast_kernels

    ids = np.arange(sum(len(t) for t, _ in examples), dtype=np.int32) + 7
    bounds = np.concatenate(([0], np.cumsum([len(t) for t, _ in examples]))).astype(np.int64)
    start = np.array([s for t, _ in examples for s, _, _ in t], dtype=np.int64)
    end = np.array([s + w for t, _ in examples for s, w, _ in t], dtype=np.int64)
    added = np.array([a for t, _ in examples for _, _, a in t], dtype=bool)
    spans = [sp for _, sp in examples]
    span_ptr, span_s, span_e = _flat_spans(spans)
    todo = np.ones(len(examples), dtype=bool)
    todo[-1] = len(examples) == 1  # an example not to do keeps what its rows held
    got = np.full(len(ids), 777, dtype=np.int32)
    fast_kernels.labels(ids, bounds, np.stack((start, end), axis=1), added, span_ptr, span_s, span_e, todo, got)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        offsets = np.stack((start[a:b], end[a:b]), axis=1)
        want = (labels_from_spans(ids[a:b], offsets, spans[i], added=added[a:b]) if todo[i]
                else np.full(b - a, 777, dtype=np.int32))
        assert got[a:b].tolist() == want.tolist(), (i, spans[i], offsets.tolist())


tokens_st = st.lists(st.tuples(st.integers(-2, 40), st.integers(0, 6), st.booleans()), max_size=12)  # start, width, added


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    tokens_st, st.lists(st.tuples(st.integers(-3, 42), st.integers(-3, 42)), max_size=4),  # spans, any order, some bad
), min_size=1, max_size=6))
def test_labels_kernel_is_labels_from_spans(examples):
    """Token by token the kernel gives the reference's formula, on offsets that are not monotone,
    tokens past the text, empty tokens, added tokens, and empty, inverted or out-of-range spans."""
    _check_labels_kernel(examples)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.one_of(tokens_st, st.lists(st.integers(0, 4), max_size=14).map(  # or contiguous tokens, as a text's are
        lambda widths: [(sum(widths[:k]), w, False) for k, w in enumerate(widths)])),
    st.lists(st.integers(-2, 40), max_size=8).map(lambda cuts: list(zip(*[iter(sorted(cuts))] * 2))),  # in order
), min_size=1, max_size=6))
def test_labels_kernel_on_ordered_spans(examples):
    """Spans in order, as a template's generation blocks are (touching, empty or outside the text
    included): the kernel's pointer path, with tokens in order and out of it."""
    _check_labels_kernel(examples)


def _fused_pass(vocab, examples, add_special=False, prefix=(), suffix=()):
    """`fast_kernels.offsets_labels` over ``examples`` ((token ids, spans) pairs) with the token table
    ``vocab`` ((bytes, characters, starts mid-character) per id)."""
    from packcli.tokenizer.fast import kernels as fast_kernels

    tokens = fast_kernels.pack_tokens(*(np.array(column, dtype=np.int64) for column in zip(*vocab)))
    raw = np.array([t for ids, _ in examples for t in ids], dtype=np.uint32)
    bounds = np.concatenate(([0], np.cumsum([len(ids) for ids, _ in examples]))).astype(np.int64)
    span_ptr, span_s, span_e = _flat_spans([sp for _, sp in examples])
    ids, off, labels = np.zeros(len(raw), np.int32), np.zeros((len(raw), 2), np.int32), np.zeros(len(raw), np.int32)
    rest = fast_kernels.offsets_labels(raw, bounds, tokens, np.array(prefix, np.int64), np.array(suffix, np.int64),
                                       add_special, span_ptr, span_s, span_e, ids, off, labels)
    added, ok, chars, nbytes, labelled, bad = rest
    return ids, off, added, labels, ok, chars, nbytes, labelled, bad


vocab_st = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4), st.booleans()).filter(
    lambda t: t[1] + t[2] >= 1), min_size=1, max_size=8)  # bytes, characters, mid-character: a token starts a
# character or continues one


@settings(max_examples=300, deadline=None)
@given(vocab_st, st.data())
def test_the_fused_pass_gives_the_offsets_and_the_labels_of_labels_from_spans(vocab, data):
    """Offsets as the characters add up, token by token; where the spans are in order the labels of the
    pass are `labels_from_spans` on those offsets, and the pass says which examples it did."""
    examples = data.draw(st.lists(st.tuples(
        st.lists(st.integers(0, len(vocab) - 1), max_size=12),
        st.one_of(st.lists(st.integers(-2, 30), max_size=8).map(lambda cuts: list(zip(*[iter(sorted(cuts))] * 2))),
                  st.lists(st.tuples(st.integers(-2, 30), st.integers(-2, 30)), max_size=4))),
        min_size=1, max_size=5))
    ids, off, added, labels, ok, chars, nbytes, labelled, bad = _fused_pass(vocab, examples)
    assert bad == -1 and ok.all() and not added.any()
    at = 0
    for i, (toks, spans) in enumerate(examples):
        before, want = 0, []
        for t in toks:
            size, c, mid = vocab[t]
            want.append((before - mid, before + c))
            before += c
        rows = slice(at, at + len(toks))
        assert ids[rows].tolist() == toks and off[rows].tolist() == [list(w) for w in want]
        assert (chars[i], nbytes[i]) == (before, sum(vocab[t][0] for t in toks))
        in_order = all(s <= e for s, e in spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        assert labelled[i] == in_order
        if in_order:
            assert labels[rows].tolist() == labels_from_spans(ids[rows], off[rows].astype(np.int64), spans).tolist()
        at += len(toks)


def test_the_fused_pass_leaves_examples_with_added_tokens_and_stops_at_an_id_past_the_vocabulary():
    vocab = [(1, 1, False)] * 4
    *_, ok, _, _, labelled, bad = _fused_pass(vocab, [([3, 1, 2, 3], [(0, 9)]), ([1, 2], [(0, 9)])],
                                              add_special=True, prefix=[3], suffix=[3])
    assert bad == -1 and ok.tolist() == [True, False] and not labelled.any()  # the second lacks them: not ok
    assert _fused_pass(vocab, [([1, 2], [(0, 2)]), ([0, 4, 1], [(0, 3)])])[-1] == 4


def test_a_token_too_long_for_the_kernels_table_is_unsupported(tmp_path):
    from packcli.tokenizer.fast import kernels as fast_kernels

    spec = json.loads(FIXTURE_JSON.read_text(encoding="utf-8"))
    top = max([*spec["model"]["vocab"].values(), *(t["id"] for t in spec["added_tokens"])]) + 1
    long = "a" * (fast_kernels.FIELD_MAX + 1)
    path = variant(tmp_path, "v", model={**spec["model"], "vocab": {**spec["model"]["vocab"], long: top}})
    tok = load_tokenizer(path, backend="auto")
    assert tok.backend_name == "tokenizers" and f"a token of {len(long)} bytes" in tok.backend_reason
    assert load_tokenizer(FIXTURE_JSON, backend="auto").backend_name == "fastokens"  # the same file without it


# 1-4 UTF-8 bytes: Maybe (U+0301, U+0323, U+031B, nukta U+093C, Hangul vowel and final), No (U+212B, U+0340,
# U+0958), combining marks that pass the quick check in order of class (U+05B0 10 < U+0316 220, Thai U+0E38), unassigned
# (U+0378), ASCII long enough to be skipped 8 bytes at a time, and what added tokens end with.
RUN_CHARS = ["a", "e", "o", "\u031b", "\u0301", "\u0323", "\u05b0", "\u0316", "\u1100", "\u1161", "\u11a8", "\u00e9",
             "\u212b", "\u0340", "\u0958", "\u0915", "\u093c", "\u0e01", "\u0e38", "\u0378", "\u4e16", "😀", "\x00", " ",
             "\u0338", ">", "hello world, ", "0123456789abcdef"]


def _quick_check_runs(text: str, nfc) -> list[tuple[int, int]]:
    """The rule of `fast_kernels.nfc_runs` in Python: maximal stretches of characters whose entry is not 0
    (or that follow an unassigned one), with the character before, kept if a character has 256 or a
    nonzero class below the one before it."""
    flags = [int(nfc[ord(ch)]) for ch in text]
    inside = [bool(v) or (c > 0 and flags[c - 1] >= 512) for c, v in enumerate(flags)]
    runs = []
    for c, v in enumerate(flags):
        if v and (c == 0 or not inside[c - 1]):
            stop = next((d for d in range(c, len(flags)) if not inside[d]), len(flags))
            last, fails = 0, False
            for w in flags[c:stop]:
                fails |= w > 0xFF or (0 < w & 0xFF < last)
                last = w & 0xFF
            if fails:
                runs.append((max(c - 1, 0), stop))
    return runs


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(RUN_CHARS), max_size=14).map("".join), min_size=1, max_size=6))
@example(["abcdef\u4e16\u0301x", "abcdefg\u4e16\u0301x", "abcde\u00e9\u0301"])  # an 8-byte step ends inside 世
def test_nfc_runs_kernel_is_the_quick_check_and_each_run_normalizes_alone(texts):
    """The runs kernel against its rule in Python (character and byte positions, UTF-8 of 1-4 bytes, the
    8-byte steps, which may end inside a character), and what the fast backend relies on: a text with no run is NFC, and normalizing
    each run alone, the rest kept, is normalizing the text."""
    import unicodedata

    from packcli.tokenizer.fast import kernels as fast_kernels
    from packcli.tokenizer.fast.backend import (
        _lead_pairs,
        _loud_bytes,
        _nfc_table,
        _utf8,
    )

    nfc, pairs = _nfc_table(), _lead_pairs(_nfc_table())
    want = [(i, s, e, len(t[:s].encode()), len(t[:e].encode()))
            for i, t in enumerate(texts) for s, e in _quick_check_runs(t, nfc)]
    joined, byte_start = _utf8(texts)
    utf8 = np.frombuffer(joined, dtype=np.uint8)
    got = [(i, s, e, b0 - byte_start[i], b1 - byte_start[i])
           for i, s, e, b0, b1 in fast_kernels.nfc_runs(utf8, byte_start, nfc, pairs, _loud_bytes(pairs)).tolist()]
    assert got == want
    for i, text in enumerate(texts):
        runs = [(s, e) for k, s, e, _, _ in got if k == i]
        pieces, at = [], 0
        for s, e in runs:
            pieces += [text[at:s], unicodedata.normalize("NFC", text[s:e])]
            at = e
        assert "".join(pieces) + text[at:] == unicodedata.normalize("NFC", text)


def test_lead_pairs_and_loud_bytes_mark_what_may_be_stepped_over():
    """Every code point (surrogates too: surrogatepass writes them) by the first two bytes of its UTF-8:
    a prefix may be stepped over only if all its code points have entry 0, and is whenever they do; a
    first byte counts as quiet for the 8-byte steps only if every code point it starts has entry 0."""
    from packcli.tokenizer.fast.backend import _lead_pairs, _loud_bytes, _nfc_table

    nfc = _nfc_table()
    cp = np.arange(0x80, 0x110000)
    width = np.where(cp < 0x800, 2, np.where(cp < 0x10000, 3, 4))
    b0 = np.select([width == 2, width == 3], [0xC0 | cp >> 6, 0xE0 | cp >> 12], 0xF0 | cp >> 18)
    b1 = 0x80 | (cp >> np.select([width == 2, width == 3], [0, 6], 12)) & 0x3F
    b1 = np.where(width == 2, 0x80 | cp & 0x3F, b1)
    key = b0 << 8 | b1
    some_nonzero = np.zeros(1 << 16, dtype=bool)
    np.logical_or.at(some_nonzero, key, nfc[cp] != 0)
    used = np.zeros(1 << 16, dtype=bool)
    used[key] = True
    wrong = (_lead_pairs(nfc) != ~some_nonzero) & used  # prefixes valid UTF-8 never starts with do not matter
    assert np.flatnonzero(wrong).tolist() == [] and used.sum() > 3000
    assert _lead_pairs(nfc)[0xE4 << 8 | 0xB8] and not _lead_pairs(nfc)[0xCC << 8 | 0x81]  # 中 steps, U+0301 not
    loud = _loud_bytes(_lead_pairs(nfc))  # a quiet first byte starts only code points with entry 0
    quiet_but_not = [b for b in range(0xC2, 0xF5) if not loud[b] and some_nonzero[b << 8:(b + 1) << 8].any()]
    assert quiet_but_not == [] and not loud[:0xC0].any()  # ASCII and continuation bytes are quiet
    assert not loud[[0xC3, 0xD0, 0xE4, 0xE9]].any() and loud[[0xCC, 0xE0, 0xE3]].all()  # é, Cyrillic, CJK; U+0301,
    # Devanagari, kana (U+3099)


def test_nfc_table_marks_what_the_quick_check_needs():
    """Spot checks of `_nfc_table` (entries: combining class, plus 256 where the quick check is not Yes)."""
    from packcli.tokenizer.fast.backend import _nfc_table

    nfc = _nfc_table()
    assert nfc[ord("a")] == nfc[ord("\u00e9")] == nfc[ord("\u4e16")] == nfc[0x1F600] == 0  # starters, NFC alone
    assert nfc[0x0316] == 220 and nfc[0x0E38] == 103 and nfc[0x05B0] == 10  # combining; compose with nothing
    assert nfc[0x0301] == 256 + 230 and nfc[0x0323] == 256 + 220  # Maybe: compose with what precedes (á, ạ)
    assert nfc[0x093C] == 256 + 7  # the nukta: most of its compositions are excluded, not ऩ
    assert nfc[0x1161] == nfc[0x11A8] == 256  # Hangul vowel and final consonant
    assert nfc[0x212B] == nfc[0x0958] == 256 and nfc[0x0340] == 256 + 230  # No: NFC changes them alone
    assert nfc[0x0378] == nfc[0xD800] == nfc[0x10FFFF] == 256 | 512  # unassigned or surrogate here
    assert nfc[0x031B] == 256 + 216  # the horn of ơ and ư, which come before it (a bug once: the flag was lost)


def test_nfc_table_flags_every_character_nfc_may_change_or_compose_into_what_precedes_it():
    """The quick check's premise, over every code point, in a loop of its own: flagged are exactly the
    characters NFC changes alone, the last of every composition NFC makes (whatever the order of the
    code points), the Hangul vowels and final consonants, and code points unassigned here."""
    import unicodedata

    from packcli.tokenizer.fast.backend import _nfc_table

    must = np.zeros(0x110000, dtype=bool)
    for c in range(0x110000):
        ch, d = chr(c), unicodedata.decomposition(chr(c))
        if unicodedata.category(ch) in ("Cn", "Cs") or unicodedata.normalize("NFC", ch) != ch:
            must[c] = True
        elif d and not d.startswith("<"):
            must[int(d.split()[-1], 16)] = True
    must[0x1161:0x1176] = must[0x11A8:0x11C3] = True
    flagged = _nfc_table() > 0xFF
    assert np.flatnonzero(must != flagged).tolist() == []


def test_unknown_backend_is_an_input_error():
    with pytest.raises(InputError, match="unknown"):
        load_tokenizer(FIXTURE_JSON, backend="fastest")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ in `pack` and `verify`

def pack_with(tmp_path: Path, inputs, name: str, **kw):
    return pack_corpus(PackConfig(inputs=tuple(inputs), tokenizer=str(FIXTURE_JSON.parent), out=tmp_path / name,
                                  capacity=512, packs_per_shard=8, **kw))


def test_pack_gives_the_same_bytes_with_either_backend_and_says_which_ran(tmp_path, corpus_files):
    hf = pack_with(tmp_path, corpus_files, "hf", tokenizer_backend="tokenizers")
    fast = pack_with(tmp_path, corpus_files, "fast", tokenizer_backend="fastokens", paranoid_tokenizer=True)
    auto = pack_with(tmp_path, corpus_files, "auto")  # the default
    assert hf.manifest["manifest_sha256"] == fast.manifest["manifest_sha256"] == auto.manifest["manifest_sha256"]
    assert artifact_bytes(tmp_path / "hf", hf.manifest) == artifact_bytes(tmp_path / "fast", fast.manifest)
    ran = {k: s.manifest["unhashed"]["tokenization"] for k, s in (("hf", hf), ("fast", fast), ("auto", auto))}
    assert ran["hf"]["backend"] == "tokenizers" and ran["hf"]["guard"]["examples"] == 0
    assert (ran["fast"]["backend"], ran["fast"]["version"]) == ("fastokens", metadata.version("fastokens"))
    counts = fast.manifest["counts"]
    encoded = counts["packed"] + counts["truncated"] + counts["dropped"]
    assert ran["fast"]["paranoid"] and ran["fast"]["guard"]["checked"] == ran["fast"]["guard"]["examples"] >= encoded
    assert ran["auto"]["backend"] == "fastokens" and ran["auto"]["reason"].startswith("auto: fastokens")
    assert 0 < ran["auto"]["guard"]["checked"] < ran["auto"]["guard"]["examples"]  # a sample, not all


def drop_last_token_of_third_example(monkeypatch) -> None:
    real = FastBackend.encode

    def encode(self, texts, spans, *, add_special_tokens):
        out = list(real(self, texts, spans, add_special_tokens=add_special_tokens))
        if len(out) > 2:
            e = out[2]
            out[2] = Encoded(e.input_ids[:-1], e.labels[:-1], e.offsets[:-1])
        return EncodedBatch.of(out)
    monkeypatch.setattr(FastBackend, "encode", encode)


def test_a_fast_backend_error_stops_pack_naming_file_and_line(tmp_path, corpus_files, monkeypatch):
    drop_last_token_of_third_example(monkeypatch)
    source = corpus_files[0]  # openai.jsonl: every line a good chat record, so the third example is line 3
    with pytest.raises(TokenizerMismatchError) as info:
        pack_with(tmp_path, [source], "o", tokenizer_backend="fastokens", paranoid_tokenizer=True)
    assert info.value.message.startswith(f"{source}:3: fastokens and tokenizers disagree: input_ids differ")
    assert info.value.exit_code == 1
    assert not (tmp_path / "o").exists() and not list(tmp_path.rglob(MANIFEST_NAME))


def test_verify_reconstructs_with_the_reference_so_an_unsampled_fault_cannot_pass(tmp_path, corpus_files, monkeypatch):
    """The guard's sample is switched off, so the broken backend's output lands in the artifact; verify,
    which always re-tokenizes with tokenizers, must report exactly the corrupted examples."""
    from packcli.verify import verify_artifact

    drop_last_token_of_third_example(monkeypatch)
    monkeypatch.setattr("packcli.tokenizer.guard.guard_sample", lambda texts, paranoid=False: [])
    pack_with(tmp_path, corpus_files[:1], "o", tokenizer_backend="fastokens")
    monkeypatch.undo()
    report = verify_artifact(tmp_path / "o")
    check = next(c for c in report.checks if c.name == "reconstruction")
    assert not check.ok and {v.line for v in check.violations} == {3}
    assert all(v.source == corpus_files[0] for v in check.violations)


def test_verify_counts_every_corrupted_example_and_explains_the_first_few(tmp_path, corpus_files, monkeypatch):
    """Every example's last token replaced (label kept consistent, so only reconstruction can tell), in
    worker processes: all are counted, and the first ``max_violations`` name the differing position."""
    from packcli.verify import verify_artifact

    real = FastBackend.encode

    def encode(self, texts, spans, *, add_special_tokens):
        out = []
        for e in real(self, texts, spans, add_special_tokens=add_special_tokens):
            ids, labels = e.input_ids.copy(), e.labels.copy()
            ids[-1] = (ids[-1] + 1) % 200
            labels[-1] = ids[-1] if labels[-1] != IGNORE_INDEX else IGNORE_INDEX
            out.append(Encoded(ids, labels, e.offsets))
        return EncodedBatch.of(out)
    monkeypatch.setattr(FastBackend, "encode", encode)
    monkeypatch.setattr("packcli.tokenizer.guard.guard_sample", lambda texts, paranoid=False: [])
    packed = pack_with(tmp_path, corpus_files[:1], "o", tokenizer_backend="fastokens").manifest["counts"]["packed"]
    monkeypatch.undo()
    report = verify_artifact(tmp_path / "o", max_violations=2, workers=2)
    check = next(c for c in report.checks if c.name == "reconstruction")
    assert check.count >= packed and len(check.violations) == 2  # explained ones count tokens and labels
    assert all("differ from a fresh tokenization at position" in v.message for v in check.violations), check.violations
    assert next(c for c in report.checks if c.name == "pack_layout").ok  # a consistent forgery


def test_a_rerun_on_the_other_backend_reuses_no_unit(tmp_path, corpus_files, monkeypatch):
    """After a mismatch the advice is to re-run with --tokenizer-backend tokenizers: that must re-tokenize everything."""
    import packcli.job.run as pipeline
    from packcli.prepare import Preparer

    monkeypatch.setattr(pipeline, "apply_overlong", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        pack_with(tmp_path, corpus_files, "o", tokenizer_backend="fastokens", lines_per_unit=25)
    monkeypatch.undo()
    assert list((tmp_path / ".packcli-work-o").glob("unit-*.json"))
    calls = []
    real = Preparer.prepare
    monkeypatch.setattr(Preparer, "prepare", lambda self, batch, **kw: calls.append(len(batch)) or real(self, batch, **kw))
    summary = pack_with(tmp_path, corpus_files, "o", tokenizer_backend="tokenizers", lines_per_unit=25)
    assert sum(calls) == summary.manifest["counts"]["records"]

