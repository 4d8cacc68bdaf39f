"""Tokenize rendered text behind a pluggable backend, turn character spans into labels, guard exactness.

Labels follow the HF convention: unshifted, ``IGNORE_INDEX`` where a token carries no loss, and the
first token of every example always ignored. That first label is never used when the example is
trained alone (nothing precedes it), so masking it makes a packed example identical to the example
alone: the last token of one example can never learn to predict the first token of the next.

A token is supervised when its character span overlaps a supervised character span, which is what
HF's ``char_to_token`` walk over the generation indices yields for byte-level tokenizers.

Two backends implement `TokenizerBackend`: `ReferenceBackend` (HF ``tokenizers``: labels from the
library's ``char_to_token`` at span edges, or from its offsets; what ``verify`` always uses) and `packcli.fast_tokenizer.FastBackend` (``fastokens`` ids,
offsets recovered from the ids; 14-27x less CPU: docs/tokenizer-backends.md). Speed may not cost
exactness: every `encode_batch` on a non-reference backend re-encodes a deterministic sample (the
first example of the batch, every example whose token ids hash to 0 mod `GUARD_PERIOD`, or all of them
under ``paranoid``) with the reference and raises `TokenizerMismatchError` on any difference in ids
or labels. The trade-off: a sampled check (an eighth of the fast backend's time at 1/256), not a proof
per example; the rest of the evidence is the self-check at load time, tests/test_tokenizer_backends.py
and the full-corpus comparisons in docs/tokenizer-backends.md.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import numpy.typing as npt

from packcli.errors import InputError, PackcliError

if TYPE_CHECKING:
    from packcli.fast_tokenizer import FastLoad

IGNORE_INDEX = -100
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.json.gz")
GUARD_PERIOD = 256  # an example is cross-checked when its ids hash to 0 mod GUARD_PERIOD (and index 0 of a batch)
BackendChoice = Literal["auto", "hf", "fast"]
BACKEND_CHOICES: tuple[str, ...] = ("auto", "hf", "fast")


@dataclass(slots=True, eq=False)
class Encoded:
    """One tokenized example: token ids and labels, both int32 of the same length.

    ``offsets`` (tokens x 2, character start/end; int64 from the reference, int32 from the fast
    backend) is what the labels were computed from, when they were (None when the reference found the
    spans with ``char_to_token``); the guard compares it across backends. Nothing downstream stores
    it. Not frozen: a batch builds tens of thousands of these, and a frozen dataclass's ``__init__``
    costs half as much again.
    """

    input_ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    offsets: npt.NDArray[np.integer] | None = field(default=None, repr=False, compare=False)

    @property
    def supervised(self) -> int:
        return int(np.count_nonzero(self.labels != IGNORE_INDEX))


@dataclass(eq=False)
class EncodedBatch(Sequence[Encoded]):
    """A batch's examples end to end: example ``i`` is ``ids[bounds[i]:bounds[i + 1]]`` (and the same
    rows of ``labels`` and ``offsets``), ``offsets`` None unless every example has them.

    Why flat: the fast backend computes whole chunks at once, and ``pack`` writes a batch's tokens at
    once; one `Encoded` per example in between cost a tenth of the fast backend's time in objects
    nothing kept. Indexing gives an `Encoded` (views) for code that looks at examples one by one.
    """

    ids: npt.NDArray[np.int32]
    labels: npt.NDArray[np.int32]
    bounds: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.integer] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - int -> Encoded, slice -> EncodedBatch
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise ValueError("an EncodedBatch slices with step 1 only")
            stop = max(start, stop)
            a, b = int(self.bounds[start]), int(self.bounds[stop])
            return EncodedBatch(self.ids[a:b], self.labels[a:b], self.bounds[start:stop + 1] - a,
                                None if self.offsets is None else self.offsets[a:b])
        k = range(len(self))[i]  # negative indices; IndexError past the end
        a, b = int(self.bounds[k]), int(self.bounds[k + 1])
        return Encoded(self.ids[a:b], self.labels[a:b], None if self.offsets is None else self.offsets[a:b])

    def __iter__(self) -> Iterator[Encoded]:
        offsets = self.offsets
        for a, b in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist()):
            yield Encoded(self.ids[a:b], self.labels[a:b], None if offsets is None else offsets[a:b])

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        return np.diff(self.bounds)

    @property
    def supervised(self) -> npt.NDArray[np.int64]:
        """Supervised tokens per example."""
        counts = np.zeros(len(self.ids) + 1, dtype=np.int64)
        np.cumsum(self.labels != IGNORE_INDEX, out=counts[1:])
        return counts[self.bounds[1:]] - counts[self.bounds[:-1]]

    @classmethod
    def of(cls, examples: Sequence[Encoded]) -> EncodedBatch:
        """The examples end to end (copies); offsets only if every example has them."""
        bounds = np.zeros(len(examples) + 1, dtype=np.int64)
        np.cumsum([len(e.input_ids) for e in examples], out=bounds[1:])
        if not examples:
            return cls(np.zeros(0, np.int32), np.zeros(0, np.int32), bounds, np.zeros((0, 2), np.int64))
        offsets = [e.offsets for e in examples]
        return cls(np.concatenate([e.input_ids for e in examples]), np.concatenate([e.labels for e in examples]),
                   bounds, None if any(o is None for o in offsets) else np.concatenate(offsets))


class TokenizerBackend(Protocol):
    """Texts -> ids and labels. ``name``/``version`` identify the library for the manifest."""

    name: str
    version: str
    reference_fallbacks: int  # examples it handed to the reference because it could not do them exactly

    def encode(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
               add_special_tokens: bool) -> EncodedBatch: ...


class ReferenceBackend:
    """HF ``tokenizers``: ids from the library; labels from its offsets or its ``char_to_token``.

    ``offsets=False`` (what the pipeline runs) skips converting every token's offsets to Python,
    which cost a quarter of the reference path's time: on a chat example (no tokens added by the
    post-processor, every span inside the text) the supervised tokens are found by
    `labels_from_char_spans` from the span edges alone. Anything else takes the offsets path, and the
    guard and the fast backend's fallback ask for offsets (they compare or return them).
    """

    name = "tokenizers"
    reference_fallbacks = 0

    def __init__(self, tokenizer: object, *, offsets: bool = True) -> None:
        import tokenizers

        self.tokenizer = tokenizer
        self.offsets = offsets
        self.version = tokenizers.__version__

    def encode(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
               add_special_tokens: bool) -> EncodedBatch:
        # encode_batch runs on every core; add_special_tokens is always explicit (defaults differ by library)
        result = []
        for enc, sp in zip(self.tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens), spans):
            ids = np.asarray(enc.ids, dtype=np.int32)
            if not (self.offsets or add_special_tokens):
                labels = labels_from_char_spans(enc, ids, sp)
                if labels is not None:
                    result.append(Encoded(ids, labels))
                    continue
            offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            special = np.asarray(enc.special_tokens_mask, dtype=bool) if add_special_tokens else None
            result.append(Encoded(ids, labels_from_spans(ids, offsets, sp, added=special), offsets))
        return EncodedBatch.of(result)


def labels_from_char_spans(enc, ids: npt.NDArray[np.int32],  # noqa: ANN001 - a tokenizers.Encoding
                           spans: Sequence[tuple[int, int]]) -> npt.NDArray[np.int32] | None:
    """`labels_from_spans` from the span edges alone, or None where that is not the same thing.

    Token offsets along a text are non-decreasing, so the tokens overlapping span [s, e) (start < e
    and end > s) are one index range: from the token holding character s back over any earlier
    token that also ends after s (a character split over byte tokens), to the token holding e - 1
    forward over any later one that starts before e. None (use offsets) for an empty, inverted or
    out-of-range span, or an edge character that maps to no token.
    """
    n = len(ids)
    mask = np.zeros(n, dtype=bool)
    for s, e in spans:
        if not 0 <= s < e:
            return None
        first, last = enc.char_to_token(s), enc.char_to_token(e - 1)
        if first is None or last is None:
            return None
        while first > 0 and enc.token_to_chars(first - 1)[1] > s:
            first -= 1
        while last + 1 < n and enc.token_to_chars(last + 1)[0] < e:
            last += 1
        mask[first:last + 1] = True
    labels = np.where(mask, ids, IGNORE_INDEX).astype(np.int32)
    if n:
        labels[0] = IGNORE_INDEX
    return labels


@dataclass
class GuardStats:
    """What the exactness guard did in this process (mutable counters; record them in the manifest)."""

    examples: int = 0  # examples encoded by a non-reference backend
    checked: int = 0  # of those, re-encoded by the reference and found identical (ids and labels)
    offset_mismatches: int = 0  # sampled examples with equal ids/labels but different offsets
    disabled_reason: str | None = None  # set on the first offset mismatch: the reference does the rest


class TokenizerMismatchError(PackcliError):
    """The accelerated backend and the reference disagree on an example: a bug, so the run stops."""

    exit_code = 1

    def __init__(self, batch_index: int, what: str, position: int, fast: list[int], reference: list[int],
                 backend: str, where: str | None = None) -> None:
        self.batch_index, self.what, self.position = batch_index, what, position
        self.fast, self.reference, self.backend, self.where = fast, reference, backend, where
        at = where or f"example {batch_index} of the batch"
        super().__init__(f"{at}: {backend} and tokenizers disagree: {what} differ at token {position} "
                         f"({backend} {fast} vs tokenizers {reference})",
                         "re-run with the reference backend (backend='hf' / --tokenizer-backend hf) and "
                         "report this record; nothing was written")
        self.args = (batch_index, what, position, fast, reference, backend, where)  # picklable: Ray sends it back

    def located(self, where: str) -> TokenizerMismatchError:
        """The same error with ``where`` (e.g. ``chat.jsonl:1832``) in place of the batch index."""
        return TokenizerMismatchError(self.batch_index, self.what, self.position, self.fast, self.reference,
                                      self.backend, where)


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer: its identity (content hash), special-token strings, and the backend that encodes.

    ``tokenizer`` is always the reference ``tokenizers.Tokenizer``; ``backend`` is what `encode_batch`
    runs (``backend_name``/``backend_version`` pin it; ``backend_reason`` says why it was chosen).
    """

    tokenizer: object = field(repr=False)
    source: str
    sha256: str
    bos_token: str | None
    eos_token: str | None
    config: dict | None = field(default=None, repr=False)
    backend: TokenizerBackend | None = field(default=None, repr=False)
    backend_reason: str = "requested"
    paranoid: bool = False
    guard: GuardStats = field(default_factory=GuardStats, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend is None:
            object.__setattr__(self, "backend", ReferenceBackend(self.tokenizer, offsets=False))

    @property
    def version(self) -> str:
        import tokenizers

        return tokenizers.__version__

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def backend_version(self) -> str:
        return self.backend.version

    @property
    def guard_checked(self) -> int:
        return self.guard.checked

    def guard_counts(self) -> dict[str, int]:
        """The guard's counters so far in this process, plus the backend's fallbacks to the reference."""
        return {"examples": self.guard.examples, "checked": self.guard.checked,
                "offset_mismatches": self.guard.offset_mismatches,
                "reference_fallbacks": self.backend.reference_fallbacks}


def load_tokenizer(path: str | Path, *, backend: BackendChoice = "hf", paranoid: bool = False) -> LoadedTokenizer:
    """Load a ``tokenizer.json`` (or ``.json.gz``), or a directory holding one and its config.

    Padding and truncation configured inside the file are switched off: some published files pad
    every sequence to 128 tokens, which would silently corrupt lengths and labels.

    The sha256 is taken over the decompressed JSON so a ``.gz`` and a plain copy pin the same tokenizer.

    Args:
        path: the file or its directory.
        backend: ``hf`` (the reference, the default: ``verify`` must reconstruct with it), ``fast``
            (fastokens; an error if it cannot be exact for this file), or ``auto`` (fastokens where
            the file is supported and passes the self-check, else the reference, with the reason in
            ``backend_reason``).
        paranoid: cross-check every example against the reference, not a sample.

    Raises:
        InputError: missing, unreadable or corrupt tokenizer; ``backend="fast"`` on a file fastokens
            cannot encode exactly; an unknown ``backend``.
    """
    from tokenizers import Tokenizer

    if backend not in BACKEND_CHOICES:
        raise InputError(f"tokenizer backend {backend!r}: unknown", f"use one of {', '.join(BACKEND_CHOICES)}")
    path = Path(path)
    file = _find_tokenizer_file(path)
    pending = None
    try:
        raw = gzip.decompress(file.read_bytes()) if file.name.endswith(".gz") else file.read_bytes()
        text = raw.decode("utf-8")
        if backend != "hf":  # fastokens parses on a thread while tokenizers does (packcli.fast_tokenizer.FastLoad)
            from packcli.fast_tokenizer import FastLoad

            pending = FastLoad(text, require_pin=backend == "auto")
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # gzip, UTF-8 and tokenizers (which raises a bare Exception) errors alike
        raise InputError(f"{file}: not a valid tokenizer.json ({type(exc).__name__}: {str(exc)[:200]})",
                         "pass a Hugging Face tokenizer.json, or a directory containing one") from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()
    chosen, reason = _choose_backend(pending, tokenizer, file)
    config = _read_config(file.parent / "tokenizer_config.json")
    return LoadedTokenizer(
        tokenizer=tokenizer, source=str(file), sha256=hashlib.sha256(raw).hexdigest(),
        bos_token=_token_text(config, "bos_token"), eos_token=_token_text(config, "eos_token"), config=config,
        backend=chosen, backend_reason=reason, paranoid=paranoid,
    )


def _choose_backend(pending: FastLoad | None, tokenizer: object, file: Path) -> tuple[TokenizerBackend, str]:
    """The reference when ``pending`` is None (``hf``), else the fast backend, or the reference with the
    reason under ``auto`` (``pending`` pins the fastokens version exactly then)."""
    reference = ReferenceBackend(tokenizer, offsets=False)
    if pending is None:
        return reference, "requested"
    from packcli.fast_tokenizer import UnsupportedTokenizer, load_fast_backend

    auto = pending.require_pin
    try:
        return load_fast_backend(pending, ReferenceBackend(tokenizer)), (
            "auto: fastokens supports this file and passed the self-check" if auto else "requested")
    except UnsupportedTokenizer as exc:
        if not auto:
            raise InputError(f"{file}: the fastokens backend cannot encode this tokenizer exactly: {exc}",
                             "use --tokenizer-backend auto (falls back to tokenizers) or hf") from exc
        return reference, f"auto: tokenizers, because {exc}"


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
    """Tokenize a batch with the tokenizer's backend and compute labels from char spans.

    Records that want special tokens added by the tokenizer's post-processor (plain text and
    prompt/completion) and those that render their own (chat) are encoded in two sub-batches.

    Raises:
        TokenizerMismatchError: a non-reference backend disagrees with the reference on a checked
            example; ``batch_index`` says which (see the module docstring for the sample).
    """
    guard = tokenizer.guard
    backend = tokenizer.backend if guard.disabled_reason is None else ReferenceBackend(tokenizer.tokenizer, offsets=False)
    result = _encode_split(backend, texts, spans, add_special_tokens)
    if not isinstance(backend, ReferenceBackend):
        guard.examples += len(texts)
        result = _check_sample(tokenizer, texts, spans, add_special_tokens, result)
    return result


def _encode_split(backend: TokenizerBackend, texts, spans, add_special_tokens) -> EncodedBatch:
    flags = set(map(bool, add_special_tokens))
    if len(flags) == 1:  # the usual batch: all chat, or all plain text
        return backend.encode(texts, spans, add_special_tokens=flags.pop())
    result: list[Encoded | None] = [None] * len(texts)
    for flag in (False, True):
        idx = [i for i, want in enumerate(add_special_tokens) if bool(want) is flag]
        if idx:
            encoded = backend.encode([texts[i] for i in idx], [spans[i] for i in idx], add_special_tokens=flag)
            for i, enc in zip(idx, encoded):
                result[i] = enc
    return EncodedBatch.of(result)  # type: ignore[arg-type]


def guard_sample(encoded: EncodedBatch, *, paranoid: bool = False) -> list[int]:
    """Indices the guard checks: the first, and those whose token ids hash to 0 mod `GUARD_PERIOD`.

    Deterministic: the same text, hence the same ids, is checked on every run wherever it sits in the
    batch. The ids are hashed rather than the text because they are already in memory, end to end:
    one numba loop over the batch (`packcli.fast_kernels.example_hashes`); the text would first have
    to be encoded to UTF-8, which cost 8% of the fast backend's time.
    """
    if paranoid:
        return list(range(len(encoded)))
    if not len(encoded):
        return []
    from packcli.fast_kernels import example_hashes  # numba: only runs that have a non-reference backend

    hashes = example_hashes(encoded.ids, encoded.bounds)
    return [0, *(np.flatnonzero(hashes[1:] % GUARD_PERIOD == 0) + 1).tolist()]


def _check_sample(tokenizer: LoadedTokenizer, texts, spans, add_special_tokens, result: EncodedBatch) -> EncodedBatch:
    """Re-encode the sample with the reference; raise on ids/labels.

    Ids and labels are compared with what the reference backend writes (``offsets=False``), offsets,
    which only the labels come from, on the batch's first example (every one under ``paranoid``): asking
    ``tokenizers`` for every sampled example's offsets cost a third more, and the guard is already an
    eighth of the fast backend's time. On an offset difference the reference encodes this batch
    again, whole, and the rest of the run (`GuardStats.disabled_reason`).
    """
    sample = guard_sample(result, paranoid=tokenizer.paranoid)
    if not sample:
        return result
    with_offsets = len(sample) if tokenizer.paranoid else 1
    expected: list[Encoded] = []
    for part, offsets in ((sample[:with_offsets], True), (sample[with_offsets:], False)):
        if part:
            expected += _encode_split(ReferenceBackend(tokenizer.tokenizer, offsets=offsets), [texts[i] for i in part],
                                      [spans[i] for i in part], [add_special_tokens[i] for i in part])
    for k, (i, ref) in enumerate(zip(sample, expected)):
        got = result[i]
        for what in ("input_ids", "labels"):
            pos = first_difference(getattr(got, what), getattr(ref, what))
            if pos is not None:
                raise TokenizerMismatchError(i, what, pos, _around(getattr(got, what), pos),
                                             _around(getattr(ref, what), pos), tokenizer.backend_name)
        if k < with_offsets and (got.offsets is None
                                 or first_difference(got.offsets.ravel(), ref.offsets.ravel()) is not None):
            tokenizer.guard.offset_mismatches += 1
            tokenizer.guard.disabled_reason = (f"offsets differed from tokenizers on a checked example "
                                               f"(token ids hash {token_hash(got.input_ids)}); "
                                               "the reference encoded the rest of the run")
            tokenizer.guard.checked += len(sample)
            return _encode_split(ReferenceBackend(tokenizer.tokenizer), texts, spans, add_special_tokens)
    tokenizer.guard.checked += len(sample)
    return result


def first_difference(a: npt.NDArray, b: npt.NDArray) -> int | None:
    """Index of the first element where ``a`` and ``b`` differ (a length difference counts), else None."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    if len(diff):
        return int(diff[0])
    return None if len(a) == len(b) else n


def _around(values: npt.NDArray, pos: int, width: int = 3) -> list[int]:
    """The values at ``pos`` and the next few (empty past the end), for the error message."""
    return [int(v) for v in values[pos:pos + width]]


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
