"""Tokenize rendered text with HF ``tokenizers`` and turn character spans into labels.

Labels follow the HF convention: unshifted, ``IGNORE_INDEX`` where a token carries no loss, and the
first token of every example always ignored. That first label is never used when the example is
trained alone (nothing precedes it), so masking it makes a packed example identical to the example
alone: the last token of one example can never learn to predict the first token of the next.

A token is supervised when its character span overlaps a supervised character span, which is what
HF's ``char_to_token`` walk over the generation indices yields for byte-level tokenizers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.errors import InputError

IGNORE_INDEX = -100
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.json.gz")


@dataclass(frozen=True)
class Encoded:
    """One tokenized example: token ids and labels, both int32 of the same length."""

    input_ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]

    @property
    def supervised(self) -> int:
        return int(np.count_nonzero(self.labels != IGNORE_INDEX))


@dataclass(frozen=True)
class LoadedTokenizer:
    """A ``tokenizers.Tokenizer`` with its identity (content hash) and special-token strings."""

    tokenizer: object = field(repr=False)
    source: str
    sha256: str
    bos_token: str | None
    eos_token: str | None
    config: dict | None = field(default=None, repr=False)

    @property
    def version(self) -> str:
        import tokenizers

        return tokenizers.__version__


def load_tokenizer(path: str | Path) -> LoadedTokenizer:
    """Load a ``tokenizer.json`` (or ``.json.gz``), or a directory holding one and its config.

    Padding and truncation configured inside the file are switched off: some published files pad
    every sequence to 128 tokens, which would silently corrupt lengths and labels.

    The sha256 is taken over the decompressed JSON so a ``.gz`` and a plain copy pin the same tokenizer.

    Raises:
        InputError: missing, unreadable or corrupt tokenizer.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    file = _find_tokenizer_file(path)
    try:
        raw = gzip.decompress(file.read_bytes()) if file.name.endswith(".gz") else file.read_bytes()
        tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as exc:  # gzip, UTF-8 and tokenizers (which raises a bare Exception) errors alike
        raise InputError(f"{file}: not a valid tokenizer.json ({type(exc).__name__}: {str(exc)[:200]})",
                         "pass a Hugging Face tokenizer.json, or a directory containing one") from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()
    config = _read_config(file.parent / "tokenizer_config.json")
    return LoadedTokenizer(
        tokenizer=tokenizer, source=str(file), sha256=hashlib.sha256(raw).hexdigest(),
        bos_token=_token_text(config, "bos_token"), eos_token=_token_text(config, "eos_token"), config=config,
    )


def _find_tokenizer_file(path: Path) -> Path:
    if path.is_dir():
        for name in TOKENIZER_FILES:
            if (path / name).is_file():
                return path / name
        raise InputError(f"{path}: no tokenizer.json in this directory", "pass the tokenizer.json file itself")
    if not path.is_file():
        raise InputError(f"tokenizer {path}: no such file", "pass a tokenizer.json file or its directory")
    return path


def _read_config(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc
    return config if isinstance(config, dict) else None


def _token_text(config: dict | None, key: str) -> str | None:
    value = (config or {}).get(key)
    if isinstance(value, dict):  # older configs store AddedToken objects
        value = value.get("content")
    return value if isinstance(value, str) else None


def encode_batch(
    tokenizer: LoadedTokenizer, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]],
    add_special_tokens: Sequence[bool],
) -> list[Encoded]:
    """Tokenize a batch (on every core, via ``encode_batch``) and compute labels from char spans.

    Records that want special tokens added by the tokenizer's post-processor (plain text and
    prompt/completion) and those that render their own (chat) are encoded in two sub-batches.
    """
    result: list[Encoded | None] = [None] * len(texts)
    for flag in (False, True):
        idx = [i for i, want in enumerate(add_special_tokens) if want is flag]
        if not idx:
            continue
        encodings = tokenizer.tokenizer.encode_batch([texts[i] for i in idx], add_special_tokens=flag)
        for i, enc in zip(idx, encodings):
            ids = np.asarray(enc.ids, dtype=np.int32)
            offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            special = np.asarray(enc.special_tokens_mask, dtype=bool) if flag else None
            result[i] = Encoded(ids, labels_from_spans(ids, offsets, spans[i], added=special))
    return result  # type: ignore[return-value]


def labels_from_spans(
    ids: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64], spans: Sequence[tuple[int, int]],
    *, added: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.int32]:
    """Labels for one example: the token id where its characters overlap a span, else IGNORE_INDEX.

    ``added`` marks tokens the post-processor inserted (BOS/EOS with offsets (0, 0)); they are
    supervised only under a whole-text span, like the rest of the text.
    """
    starts, ends = offsets[:, 0], offsets[:, 1]
    mask = np.zeros(len(ids), dtype=bool)
    for s, e in spans:
        mask |= (starts < e) & (ends > s)
    if added is not None and any(s == 0 for s, _ in spans):
        mask |= added
    labels = np.where(mask, ids, IGNORE_INDEX).astype(np.int32)
    if len(labels):
        labels[0] = IGNORE_INDEX
    return labels


def token_hash(ids: npt.NDArray[np.int32]) -> str:
    """A short content hash of an example's token ids, stored in the seam table."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int32).tobytes(), digest_size=8).hexdigest()
