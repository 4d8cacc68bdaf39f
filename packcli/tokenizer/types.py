"""What every tokenizer backend produces: examples as token ids and labels, one by one or end to end.

Labels follow the HF convention: unshifted, ``IGNORE_INDEX`` where a token carries no loss, and the
first token of every example always ignored. That first label is never used when the example is
trained alone (nothing precedes it), so masking it makes a packed example identical to the example
alone: the last token of one example can never learn to predict the first token of the next.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from packcli.contract import IGNORE_INDEX
from packcli.errors import PackcliError


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
                         "re-run with the reference backend (`backend='tokenizers'`) and "
                         "report this record; nothing was written")
        self.args = (batch_index, what, position, fast, reference, backend, where)  # picklable: Ray sends it back

    def located(self, where: str) -> TokenizerMismatchError:
        """The same error with ``where`` (e.g. ``chat.jsonl:1832``) in place of the batch index."""
        return TokenizerMismatchError(self.batch_index, self.what, self.position, self.fast, self.reference,
                                      self.backend, where)
