"""Whether fastokens can encode a ``tokenizer.json`` exactly, and loading it if so.

The fast backend (`packcli.tokenizer.fast.backend`) derives offsets from token bytes, which is exact
only for a byte-level BPE without a prefix space, offset trimming or stripping added tokens, and a
normalizer that is absent or NFC (`unsupported_reason`). A file that passes that test is parsed by
fastokens on a thread while ``tokenizers`` parses it too (`FastLoad`), and the built backend must then
agree with the reference on a probe set of texts (`self_check`) before it is used.
"""

from __future__ import annotations

import json
import re
import threading
from importlib import metadata

import numpy as np

from packcli.tokenizer.fast import offsets as fast_kernels
from packcli.tokenizer.fast.backend import FastBackend, TokenTables, _nfc_table
from packcli.tokenizer.reference import ReferenceBackend

_BYTE_ALPHABET_END = 512  # GPT-2's byte-level alphabet maps bytes to code points below this
FASTOKENS_PIN = "0.3.5"  # the release docs/tokenizer-backends.md measured; `auto` uses no other
# Texts both libraries must agree on (ids, labels, offsets) before this backend is used.
PROBE_TEXTS = (
    "Hello, world! The quick brown fox jumps over the lazy dog 1234567890.",
    "<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\nIt's 4.<|im_end|>\n",
    "<|im_ <|im_start <s></s> <|endoftext|>x<|begin_of_text|><|eot_id|> <think>\n</think>",
    "   leading spaces, trailing tabs\t\t\n\n\r\n  \u00a0\u3000 mixed   whitespace   ",
    "Grüße, señor. Привет, мир! 你好，世界。こんにちは。안녕하세요. مرحبا بالعالم. नमस्ते दुनिया",
    "emoji 😀👩🏽‍💻🇫🇷 math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd \ufffd \x00\x01\x7f",
    "decomposed: Ba\u0323n Tie\u0302\u0301ng Vie\u0323\u0302t, e\u0301te\u0301, \u1100\u1161\u11a8, x\u0301\u0323",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\n\n" + "#" * 300,
    "",
    " ",
)


class UnsupportedTokenizer(Exception):
    """fastokens cannot give exact ids, labels and offsets for this tokenizer file (the reason)."""


def unsupported_reason(spec: dict) -> str | None:
    """Why byte-length offsets would not be exact for this ``tokenizer.json``; None when they are."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return f"model {model.get('type')!r} is not BPE"
    if model.get("dropout"):
        return "BPE dropout makes tokenization random"
    pre = spec.get("pre_tokenizer") or {}
    byte_level = [p for p in pre.get("pretokenizers", [pre]) if p.get("type") == "ByteLevel"]
    if not byte_level:
        return "not a byte-level BPE (no ByteLevel pre-tokenizer), so token bytes are not text bytes"
    if any(p.get("add_prefix_space") for p in byte_level):
        return "the ByteLevel pre-tokenizer adds a prefix space"
    norm = spec.get("normalizer")
    if norm and any(n.get("type") != "NFC" for n in norm.get("normalizers", [norm])):
        return f"normalizer {json.dumps(norm)[:80]} changes the text (only none or NFC is supported)"
    post = spec.get("post_processor") or {}
    for p in post.get("processors", [post] if post else []):
        if p.get("type") not in ("ByteLevel", "TemplateProcessing"):
            return f"post-processor {p.get('type')!r}"
        if p.get("type") == "ByteLevel" and p.get("trim_offsets"):
            return "the ByteLevel post-processor trims whitespace from offsets"
    for tok in spec.get("added_tokens") or []:
        if tok.get("lstrip") or tok.get("rstrip") or tok.get("single_word"):
            return f"added token {tok.get('content')!r} strips whitespace or matches single words only"
        if norm and (tok.get("normalized") or not tok.get("content", "").isascii()):
            return f"added token {tok.get('content')!r} is normalized or not ASCII (NFC alignment needs neither)"
    return None


class FastLoad:
    """fastokens parsing a ``tokenizer.json`` on a thread, started before the reference loads the file.

    fastokens releases the GIL while it parses (about 2 s for Qwen3's 151k merges), so ``tokenizers``,
    the token tables and the NFC table are built meanwhile: loading takes the longer of the two, not
    their sum. What cannot work (fastokens missing or another version under ``require_pin``, a file
    outside what byte-length offsets cover) is known before any thread starts.

    An NFC normalizer is left out of fastokens' copy: `FastBackend` hands it text already normalized
    (each run NFC changes replaced by ``tokenizers``' own normalization of it), so its normalizer
    would only pass over every text again to find nothing, about a fifth of its time on Qwen3.
    """

    def __init__(self, raw: str, *, require_pin: bool) -> None:
        self.require_pin, self.spec, self.error = require_pin, {}, None
        self._fast: object | None = None
        self._thread: threading.Thread | None = None
        try:
            self.spec = self._check(raw, require_pin)
        except UnsupportedTokenizer as exc:
            self.error = exc
            return
        self._thread = threading.Thread(target=self._parse, args=(_without_normalizer(raw, self.spec),),
                                        name="packcli-fastokens-load", daemon=True)
        self._thread.start()

    @staticmethod
    def _check(raw: str, require_pin: bool) -> dict:
        try:
            import fastokens  # noqa: F401 - is it installed?
        except ImportError as exc:
            raise UnsupportedTokenizer(f"fastokens is not installed ({exc})") from exc
        if require_pin and (version := metadata.version("fastokens")) != FASTOKENS_PIN:
            raise UnsupportedTokenizer(f"fastokens {version} is installed; packcli is validated with {FASTOKENS_PIN}")
        spec = json.loads(raw)
        if reason := unsupported_reason(spec):
            raise UnsupportedTokenizer(reason)
        return spec

    def _parse(self, text: str) -> None:
        import fastokens

        try:
            self._fast = fastokens.Tokenizer.from_json_str(text)
        except (ValueError, RuntimeError) as exc:
            self.error = UnsupportedTokenizer(f"fastokens cannot load it: {exc}")

    def result(self) -> object:
        """The loaded ``fastokens.Tokenizer`` (waits for the thread).

        Raises:
            UnsupportedTokenizer: why there is none.
        """
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self._fast


def _without_normalizer(raw: str, spec: dict) -> str:
    """``raw`` (the ``tokenizer.json`` parsed as ``spec``) with its normalizer set to null: the text of its
    value replaced where there is one key ``"normalizer"`` and its value is the top-level one (cheap),
    else the whole spec written again (several times slower for a Qwen3-sized file)."""
    if not spec.get("normalizer"):
        return raw
    found = list(re.finditer(r'"normalizer"\s*:\s*', raw))
    if len(found) == 1:
        value, end = json.JSONDecoder().raw_decode(raw, found[0].end())
        if value == spec["normalizer"]:
            return raw[:found[0].end()] + "null" + raw[end:]
    return json.dumps({**spec, "normalizer": None})


def load_fast_backend(load: FastLoad, reference: ReferenceBackend) -> FastBackend:
    """Build the fast backend for the ``tokenizer.json`` that ``load`` parses, or say why not.

    Raises:
        UnsupportedTokenizer: fastokens is missing (or not `FASTOKENS_PIN` under ``require_pin``), cannot
            load the file, the file is outside what byte-length offsets cover, or the self-check failed.
    """
    if load.error is not None:
        raise load.error
    hf, spec = reference.tokenizer, load.spec
    added = hf.get_added_tokens_decoder()
    tables = _token_tables(spec["model"]["vocab"], added)  # these three while fastokens parses
    aligner = _aligner(spec) if spec.get("normalizer") else None
    if aligner is not None:
        _nfc_table()
    fast = load.result()
    fast.no_padding()
    fast.no_truncation()
    backend = FastBackend(fast, reference, aligner, tables=tables, added_texts=[t.content for t in added.values()],
                          **_post_processor_tokens(hf))
    self_check(backend)
    fast_kernels.example_hashes(np.zeros(0, np.int32), np.zeros(1, np.int64))  # the guard's kernel: compiled now
    return backend


def _token_tables(model_vocab: dict[str, int], added: dict) -> TokenTables:
    """The `TokenTables` of a byte-level BPE: vocabulary tokens (``model.vocab`` of the file, already
    parsed: asking ``tokenizers`` for it again would convert it a second time) read through the byte-level
    alphabet, added tokens as their text. The vocabulary (150k tokens for Qwen3) is done in one pass
    of numpy over all its characters."""
    vocab = [(t, i) for t, i in model_vocab.items() if i not in added]
    size = max([*(i for _, i in vocab), *added, -1]) + 1
    tables = np.zeros((3, size), dtype=np.int32)
    if vocab:
        tokens = [t for t, _ in vocab]
        ids = np.fromiter((i for _, i in vocab), dtype=np.int64, count=len(vocab))
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))  # one character a byte
        if not lengths.all():
            raise UnsupportedTokenizer(f"vocabulary token {tokens[int(np.argmin(lengths))]!r} is empty")
        byte_of = np.full(_BYTE_ALPHABET_END, -1, dtype=np.int16)
        for b, c in _bytes_to_unicode().items():
            byte_of[ord(c)] = b
        chars = np.frombuffer("".join(tokens).encode("utf-32-le"), dtype="<u4")
        raw = np.where(chars < _BYTE_ALPHABET_END, byte_of[np.minimum(chars, _BYTE_ALPHABET_END - 1)], -1)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        if (raw < 0).any():
            bad = int(np.searchsorted(starts, int(np.flatnonzero(raw < 0)[0]), side="right")) - 1
            raise UnsupportedTokenizer(f"vocabulary token {tokens[bad]!r} is not in the byte-level alphabet")
        lead = (raw & 0xC0) != 0x80
        tables[0, ids] = lengths
        tables[1, ids] = np.add.reduceat(lead.astype(np.int64), starts)
        tables[2, ids] = ~lead[starts]
    for i, tok in added.items():
        text = tok.content.encode("utf-8")
        tables[:, i] = len(text), sum((b & 0xC0) != 0x80 for b in text), (text[0] & 0xC0) == 0x80 if text else 0
    if (tables[0] == 0).any():
        raise UnsupportedTokenizer("a token id has no bytes (a gap in the vocabulary?)")
    try:
        return TokenTables(fast_kernels.pack_tokens(tables[0], tables[1], tables[2]))
    except ValueError as exc:
        raise UnsupportedTokenizer(str(exc)) from None


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which ``tokenizers``' ByteLevel uses."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b if b in keep else next(extra)) for b in range(256)}


def _post_processor_tokens(hf) -> dict[str, list[int]]:
    """The ids the post-processor puts before and after one sequence (Llama 3: [BOS] and [])."""
    enc, plain = hf.encode("probe", add_special_tokens=True), hf.encode("probe", add_special_tokens=False)
    mask = enc.special_tokens_mask
    p = next((k for k, m in enumerate(mask) if not m), len(mask))
    s = next((k for k, m in enumerate(reversed(mask)) if not m), 0)
    if p + s != hf.num_special_tokens_to_add(False) or enc.ids[p:len(mask) - s] != plain.ids:
        raise UnsupportedTokenizer("the post-processor does more than add tokens around the sequence")
    return {"prefix": enc.ids[:p], "suffix": enc.ids[len(mask) - s:]}


def _aligner(spec: dict):
    """The tokenizer's normalizer over a no-merge byte BPE: one token per normalized byte, each carrying
    ``tokenizers``' offsets into the original text (runs hold no added tokens, so it has none)."""
    from tokenizers import Tokenizer
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet())
    model = {"type": "BPE", "vocab": {c: i for i, c in enumerate(alphabet)}, "merges": []}
    return Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": spec["normalizer"], "added_tokens": [],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "post_processor": None, "decoder": None, "model": model}))


def self_check(backend: FastBackend) -> None:
    """Raise `UnsupportedTokenizer` unless both libraries agree on ids, labels and offsets of the probes."""
    texts = list(PROBE_TEXTS)
    spans = [[(0, len(t))] if k % 2 else [(len(t) // 3, len(t) // 2), (2 * len(t) // 3, len(t))]
             for k, t in enumerate(texts)]
    for flag in (False, True):
        fast, ok = backend._encode_fast(texts, spans, flag)
        for text, f, good, r in zip(texts, fast, ok, backend.reference.encode(texts, spans, add_special_tokens=flag)):
            if not good:
                raise UnsupportedTokenizer(f"self-check: the fast path could not encode {text[:40]!r}")
            for what in ("input_ids", "labels", "offsets"):
                if not np.array_equal(getattr(f, what), getattr(r, what)):
                    raise UnsupportedTokenizer(f"self-check: {what} differ from tokenizers on {text[:40]!r}")
