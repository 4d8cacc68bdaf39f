"""Shared cases for the tokenizer tests: tokenizer variants, random text, a reference/fast pair, broken backends."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES
from hypothesis import strategies as st

from packcli.config import PackConfig
from packcli.contract import IGNORE_INDEX
from packcli.job.run import pack_corpus
from packcli.tokenizer.fast.backend import FastBackend
from packcli.tokenizer.guard import encode_batch
from packcli.tokenizer.load import load_tokenizer
from packcli.tokenizer.reference import ReferenceBackend, labels_from_char_spans, labels_from_spans
from packcli.tokenizer.types import Encoded, EncodedBatch, GuardStats

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


def pair(path: Path):
    fast = load_tokenizer(path, backend="fastokens")
    # the reference with offsets (compared too): the same file, loaded once
    return dataclasses.replace(fast, backend=ReferenceBackend(fast.tokenizer), guard=GuardStats()), fast


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


def pack_with(tmp_path: Path, inputs, name: str, **kw):
    return pack_corpus(PackConfig(inputs=tuple(inputs), tokenizer=str(FIXTURE_JSON.parent), out=tmp_path / name,
                                  capacity=512, packs_per_shard=8, **kw))


def drop_last_token_of_third_example(monkeypatch) -> None:
    real = FastBackend.encode

    def encode(self, texts, spans, *, add_special_tokens):
        out = list(real(self, texts, spans, add_special_tokens=add_special_tokens))
        if len(out) > 2:
            e = out[2]
            out[2] = Encoded(e.input_ids[:-1], e.labels[:-1], e.offsets[:-1])
        return EncodedBatch.of(out)
    monkeypatch.setattr(FastBackend, "encode", encode)


def assert_all_go_to_the_reference(ref, fast, monkeypatch, broken, texts, spans) -> None:
    """With ``broken`` in place of fastokens, every text goes to the reference, so the results are still exact."""
    monkeypatch.setattr(fast.backend, "fast", broken)
    before = fast.backend.reference_fallbacks
    out = fast.backend.encode(texts, spans, add_special_tokens=False)
    assert fast.backend.reference_fallbacks - before == len(texts)
    for got, want in zip(out, encode_batch(ref, texts, spans, [False] * len(texts))):
        assert got.input_ids.tolist() == want.input_ids.tolist() and got.labels.tolist() == want.labels.tolist()


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
