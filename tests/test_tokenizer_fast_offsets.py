"""The fast backend's numba kernels against short pure-Python references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packcli.tokenizer.reference import labels_from_spans

fastokens = pytest.importorskip("fastokens")


def _flat_spans(spans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each example's spans end to end, as the kernels take them: pointers, starts, ends."""
    span_ptr = np.concatenate(([0], np.cumsum([len(sp) for sp in spans]))).astype(np.int64)
    flat = np.array([x for sp in spans for pair in sp for x in pair], dtype=np.int64).reshape(-1, 2)
    return span_ptr, flat[:, 0].copy(), flat[:, 1].copy()


def _check_labels_kernel(examples) -> None:
    """The kernel against `labels_from_spans`, token by token; ``examples``: (tokens, spans) pairs."""
    from packcli.tokenizer.fast import offsets as fast_kernels

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
    from packcli.tokenizer.fast import offsets as fast_kernels

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

    from packcli.tokenizer.fast import offsets as fast_kernels
    from packcli.tokenizer.fast.backend import _lead_pairs, _loud_bytes, _nfc_table, _utf8

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
