"""Encoding a batch, and the guard that keeps a non-reference backend exact.

Speed may not cost exactness: every `encode_batch` on a non-reference backend re-encodes a
deterministic sample (the first example of the batch, every example whose token ids hash to 0 mod
`GUARD_PERIOD`, or all of them under ``paranoid``) with the reference and raises
`TokenizerMismatchError` on any difference in ids or labels. The trade-off: a sampled check (its
cost: docs/tokenizer-backends.md), not a proof per example; the rest of the evidence is the
self-check at load time (`packcli.tokenizer.fast.build.self_check`), the backend tests and the
full-corpus comparisons in docs/tokenizer-backends.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from packcli.contract import token_hash
from packcli.tokenizer.load import LoadedTokenizer
from packcli.tokenizer.reference import ReferenceBackend
from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerBackend, TokenizerMismatchError

GUARD_PERIOD = 256  # an example is cross-checked when its ids hash to 0 mod GUARD_PERIOD (and index 0 of a batch)


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
    one numba loop over the batch (`packcli.tokenizer.fast.offsets.example_hashes`); the text would first have
    to be encoded to UTF-8 again, an extra pass over every text.
    """
    if paranoid:
        return list(range(len(encoded)))
    if not len(encoded):
        return []
    from packcli.tokenizer.fast.offsets import example_hashes  # numba: only runs that have a non-reference backend

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
