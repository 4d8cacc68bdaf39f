"""The reference backend: HF ``tokenizers``, and the labels formula every backend must reproduce.

A token is supervised when its character span overlaps a supervised character span, which is what
HF's ``char_to_token`` walk over the generation indices yields for byte-level tokenizers. ``verify``
always re-tokenizes with this backend, so a fault in the fast backend cannot verify itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from packcli.contract import IGNORE_INDEX
from packcli.tokenizer.types import Encoded, EncodedBatch


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
