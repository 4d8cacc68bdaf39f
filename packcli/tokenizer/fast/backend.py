"""The accelerated tokenizer backend: ``fastokens`` ids, with character offsets recovered from the ids.

fastokens (a Rust BPE, docs/tokenizer-backends.md) returns token ids but no offsets, and labels need
offsets. In a byte-level BPE every token stands for a fixed run of the text's UTF-8 bytes, so the
offsets follow from the ids: per token id, a table holds how many characters start in its bytes and
whether its first byte continues a character; a cumulative sum over the batch gives the offsets.

    text      "hé 😀"            UTF-8  68 | c3 a9 | 20 f0 9f | 98 | 80
    chars starting in the token   1      1        2        0    0     cumulative 1 2 4 4 4
    starts mid-character          no     no       no       yes  yes
    offsets                       (0,1)  (1,2)    (2,4)    (3,4) (3,4)

which is what ``tokenizers`` reports (a token that cuts a character covers the whole character).
Labels then follow from the offsets by the reference's own formula. Both steps are numba loops
(`packcli.tokenizer.fast.offsets`): no Python runs per token.

An NFC normalizer is the one wrinkle: on text that is not already NFC the tokens spell the normalized
text, and ``tokenizers`` maps them back with its own alignment (``e`` + U+0301 -> ``é`` at (0, 1)).
NFC acts only on short runs: a stretch of combining marks and characters that may compose, with the
character before it (`packcli.tokenizer.fast.offsets.nfc_runs`, one pass over the batch's UTF-8 with
Unicode's NFC quick check, `_nfc_table`). Each run normalizes on its own, so a text whose runs all
pass the quick check is NFC and keeps the identity map (if its tokens hold as many characters and
bytes as it does). The runs that fail go through an *aligner*: the tokenizer's normalizer over a
no-merge byte BPE, one token per normalized byte, each carrying ``tokenizers``' own offsets, run by
distinct run (`RunAlignments`). The rest of the text keeps the identity map. Since the runs are
known before fastokens runs, it gets the text already normalized (each run NFC changes replaced by
the normalizer's output) and no normalizer of its own.

Trade-off: this is exact only for what it was built for, so a tokenizer file is accepted only if it
is a byte-level BPE, normalizer absent or NFC, no prefix space, no offset trimming, no stripping added
tokens (`unsupported_reason`), and a probe set gives identical ids, labels and offsets on both
libraries (`self_check`). An example whose characters do not add up is encoded by the reference, and
`packcli.tokenizer.guard.encode_batch` cross-checks a sample of every batch (the guard).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from itertools import chain

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from packcli.tokenizer.fast import offsets as fast_kernels
from packcli.tokenizer.reference import ReferenceBackend
from packcli.tokenizer.types import EncodedBatch

CHUNK = 1024  # texts per fastokens call in `FastBackend.encode`


@dataclass(frozen=True)
class TokenTables:
    """Per token id, packed by `packcli.tokenizer.fast.offsets.pack_tokens`: its UTF-8 length, how many characters
    start in it, whether it starts mid-character."""

    tokens: npt.NDArray[np.int32]


class FastBackend:
    """`packcli.tokenizer.types.TokenizerBackend` on fastokens; hands what it cannot take to ``reference``."""

    name = "fastokens"

    def __init__(self, fast: object, reference: ReferenceBackend, aligner: object | None, *,
                 tables: TokenTables, added_texts: Sequence[str], prefix: Sequence[int],
                 suffix: Sequence[int]) -> None:
        self.fast, self.reference = fast, reference
        self.added_texts = tuple(added_texts)
        self.added_ends = {t[-1] for t in added_texts if t}
        self.alignments = RunAlignments(aligner, watch=self.added_ends) if aligner is not None else None  # no NFC
        if aligner is not None:
            self.nfc = _nfc_table()
            self.nfc_lead_pairs = _lead_pairs(self.nfc)
            self.nfc_loud = _loud_bytes(self.nfc_lead_pairs)
        self.version = metadata.version("fastokens")
        self.tables = tables
        self.prefix = np.asarray(prefix, dtype=np.int64)
        self.suffix = np.asarray(suffix, dtype=np.int64)
        self.reference_fallbacks = 0  # examples whose token bytes did not add up: encoded by the reference
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="packcli-fastokens")

    def encode(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
               add_special_tokens: bool) -> EncodedBatch:
        """In chunks of `CHUNK` texts, fastokens encoding one chunk on a thread (it releases the GIL) while
        this one finds the next chunk's NFC runs and finishes the one before: the work around fastokens
        is mostly single-threaded, so without the overlap one core idles through it."""
        texts = list(texts)
        parts = [slice(k, k + CHUNK) for k in range(0, len(texts), CHUNK)]
        rows = BatchRows(len(texts))
        done: list[npt.NDArray[np.bool_]] = []
        chunk = self._normalize(texts[parts[0]]) if parts else None
        ahead = self._ahead.submit(self.fast.encode_batch_flat, chunk.texts, add_special_tokens=add_special_tokens
                                   ) if parts else None
        for k, part in enumerate(parts):
            following = self._normalize(texts[parts[k + 1]]) if k + 1 < len(parts) else None
            raw = ahead.result()
            if following is not None:
                ahead = self._ahead.submit(self.fast.encode_batch_flat, following.texts,
                                           add_special_tokens=add_special_tokens)
            done.append(self._encode_fast(texts[part], spans[part], add_special_tokens, raw, chunk, rows)[1])
            chunk = following
        out = rows.batch()
        rest = np.flatnonzero(~np.concatenate(done)) if done else []
        if len(rest):
            self.reference_fallbacks += len(rest)
            rest = rest.tolist()
            again = self.reference.encode([texts[i] for i in rest], [spans[i] for i in rest],
                                          add_special_tokens=add_special_tokens)
            examples = list(out)
            for i, enc in zip(rest, again):
                examples[i] = enc
            out = EncodedBatch.of(examples)
        return out

    def _normalize(self, texts: list[str]) -> NormalizedChunk:
        """The texts as fastokens gets them: for an NFC tokenizer, each run NFC changes replaced by the
        normalizer's output (fastokens has no normalizer of its own here: see `FastLoad`)."""
        if self.alignments is None:
            return NormalizedChunk(texts)
        joined, byte_start = _utf8(texts)
        utf8 = np.frombuffer(joined, dtype=np.uint8)
        runs = fast_kernels.nfc_runs(utf8, byte_start, self.nfc, self.nfc_lead_pairs, self.nfc_loud)
        memo = self.alignments
        # Sliced from two flat lists, not from a list of pairs: thousands of small lists a chunk would
        # set off the garbage collector again and again.
        entries = memo.entries([joined[a:b] for a, b in zip(runs[:, 3].tolist(), runs[:, 4].tolist())])
        changes = ~memo.identity[entries]
        runs, entries = runs[changes], entries[changes]
        normalized = list(texts)
        which, first_run = np.unique(runs[:, 0], return_index=True)
        run_ptr = np.append(first_run, len(runs))
        if len(which):
            out, out_start = fast_kernels.substitute(utf8, byte_start, which, run_ptr, runs, entries, memo.out_ptr,
                                                     memo.out_bytes)
            out = out.tobytes()
            for i, a, b in zip(which.tolist(), out_start[:-1].tolist(), out_start[1:].tolist()):
                normalized[i] = out[a:b].decode()
        return NormalizedChunk(normalized, utf8, byte_start, runs, entries, memo.watched[entries], which, run_ptr,
                               memo.ptr, memo.aux)

    def _encode_fast(self, texts: list[str], spans: Sequence[Sequence[tuple[int, int]]],
                     add_special_tokens: bool, raw: tuple[bytes, bytes] | None = None,
                     chunk: NormalizedChunk | None = None,
                     rows: BatchRows | None = None) -> tuple[EncodedBatch, npt.NDArray[np.bool_]]:
        """Ids from fastokens (``raw``: its ``encode_batch_flat`` output over ``chunk.texts``, if already
        there: both or neither), offsets from the token tables, labels from offsets, written into the
        next rows of ``rows`` if given; and whether each example is exact (where not, its rows are not
        to be used)."""
        n = len(texts)
        if raw is None:
            chunk = self._normalize(texts)
            raw = self.fast.encode_batch_flat(chunk.texts, add_special_tokens=add_special_tokens)
        raw_ids, raw_bounds = raw
        bounds = np.frombuffer(raw_bounds, dtype="<u8").astype(np.int64)
        counts = np.fromiter(map(len, spans), dtype=np.int64, count=n)
        span_ptr = np.concatenate(([0], np.cumsum(counts)))
        s, e = np.fromiter(chain.from_iterable(chain.from_iterable(spans)), dtype=np.int64,
                           count=2 * int(span_ptr[-1])).reshape(-1, 2).T.copy()
        ids, offsets, labels = (BatchRows(n) if rows is None else rows).take(bounds)
        added, ok, chars, nbytes, labelled, bad = fast_kernels.offsets_labels(
            np.frombuffer(raw_ids, dtype="<u4"), bounds, self.tables.tokens, self.prefix, self.suffix,
            add_special_tokens, span_ptr, s, e, ids, offsets, labels)
        if bad >= 0:
            raise RuntimeError(f"fastokens returned token id {bad} outside the vocabulary")  # a bug
        clen = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        if self.alignments is None:  # no normalizer: the tokens spell the text
            ok &= chars == clen
        else:  # NFC: the identity map holds where NFC changes nothing; the aligner covers the rest
            changed = np.zeros(n, dtype=bool)
            changed[chunk.which] = True
            ok &= changed | ((chars == clen) & (nbytes == np.diff(chunk.byte_start)))
            ok[chunk.which] &= self._align(chunk, texts, ids, bounds, added, offsets)
            labelled &= ~changed  # their offsets are the aligner's now
        fast_kernels.labels(ids, bounds, offsets, added, span_ptr, s, e, ok & ~labelled, labels)
        return EncodedBatch(ids, labels, bounds, offsets), ok

    def _align(self, chunk: NormalizedChunk, texts: list[str], ids, bounds, added, offsets) -> npt.NDArray[np.bool_]:
        """Whether each text NFC changes (``chunk.which``) adds up; their offsets are written into ``offsets``.

        Each run normalizes on its own: the aligner maps the runs NFC changes (most that fail the quick
        check do not: Bengali ``ন`` + ``া`` may compose with nothing), the identity map covers the rest
        (`packcli.tokenizer.fast.offsets.aligned_offsets` walks both). An added token is cut out before
        normalizing, so a text with a run holding a character that may end one (``<|im_end|>`` +
        U+0338 would compose ``>`` into ``≯``) goes to the reference instead.
        """
        good = fast_kernels.aligned_offsets(ids, bounds, added, self.tables.tokens, offsets, chunk.which, chunk.utf8,
                                            chunk.byte_start, chunk.run_ptr, chunk.runs, chunk.entries, chunk.entry_ptr,
                                            chunk.entry_aux)
        cut = {i for i, s, e in chunk.runs[chunk.watched, :3].tolist()
               if any(texts[i][j] in self.added_ends and _ends_added(texts[i], j, self.added_texts)
                      for j in range(s, e))}
        return good & ~np.isin(chunk.which, list(cut))


class BatchRows:
    """A batch's ids, offsets and labels as `FastBackend.encode` fills them, chunk by chunk: the kernels
    write each chunk's tokens straight into its rows, instead of into arrays of their own that are then
    joined (a copy the size of the batch, for nothing). When a chunk does not fit, the arrays grow by
    copying, to what the tokens per text so far suggest for the whole batch, an eighth more, and at
    least twice the size; the batch is views of them."""

    def __init__(self, texts: int) -> None:
        self.texts, self.done, self.used = texts, 0, 0
        self.ids, self.labels = np.zeros(0, np.int32), np.zeros(0, np.int32)
        self.offsets = np.zeros((0, 2), np.int32)
        self.bounds = [np.zeros(1, np.int64)]

    def take(self, bounds: npt.NDArray[np.int64]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ids, offsets and labels rows of the next ``len(bounds) - 1`` texts, whose tokens end at
        ``bounds[1:]`` (counted from 0)."""
        a, b = self.used, self.used + int(bounds[-1])
        self.done += len(bounds) - 1
        if b > len(self.ids):  # tokens, so at least one text done
            size = b * max(self.texts, self.done) // self.done * 9 // 8
            self.ids, self.labels, self.offsets = (_room(x, size) for x in (self.ids, self.labels, self.offsets))
        self.bounds.append(bounds[1:] + a)
        self.used = b
        return self.ids[a:b], self.offsets[a:b], self.labels[a:b]

    def batch(self) -> EncodedBatch:
        """Every row taken so far."""
        n = self.used
        return EncodedBatch(self.ids[:n], self.labels[:n], np.concatenate(self.bounds), self.offsets[:n])


@dataclass
class NormalizedChunk:
    """A chunk of texts as fastokens encodes them, and where they differ from the originals: the runs NFC
    changes (rows of `packcli.tokenizer.fast.offsets.nfc_runs`), their memo entries and whether each holds a
    character that may end an added token (``watched``), the texts holding them (``which``, their
    runs at ``run_ptr[k]:run_ptr[k + 1]``), and the memo's arrays as they were when the entries were
    made (a later chunk may start the memo again before this one is finished). Only ``texts`` for a
    tokenizer without a normalizer."""

    texts: list[str]
    utf8: npt.NDArray[np.uint8] | None = None
    byte_start: npt.NDArray[np.int64] | None = None
    runs: npt.NDArray[np.int64] | None = None
    entries: npt.NDArray[np.int64] | None = None
    watched: npt.NDArray[np.bool_] | None = None
    which: npt.NDArray[np.int64] | None = None
    run_ptr: npt.NDArray[np.int64] | None = None
    entry_ptr: npt.NDArray[np.int64] | None = None
    entry_aux: npt.NDArray[np.int32] | None = None


class RunAlignments:
    """``tokenizers``' normalization of NFC runs, by the run's UTF-8, kept across batches.

    The aligner is the tokenizer's normalizer over a no-merge byte BPE (`_aligner`): one token per
    normalized byte, each carrying ``tokenizers``' own offsets into the run. Text repeats its runs
    (the same few decomposed letters, the same vowel signs), so each distinct run is encoded once:
    ``out_bytes[out_ptr[e]:out_ptr[e + 1]]`` is entry ``e``'s normalized UTF-8 (keyed by the run's),
    ``aux[ptr[e]:ptr[e + 1]]`` its offsets, and ``identity[e]`` says that the normalizer left it as it
    was, ``watched[e]`` that it holds a character of ``watch`` (one that may end an added token, for
    `FastBackend._align`). Past ``limit`` rows the memo starts again, in new arrays (so a chunk's
    entries stay valid with the arrays it was given), and adversarial text (every run new) costs
    time, not memory.
    """

    def __init__(self, aligner: object, limit: int = 1 << 20, watch: Iterable[str] = ()) -> None:
        self.aligner, self.limit, self.watch = aligner, limit, frozenset(watch)
        self._start()

    def _start(self) -> None:
        self.index: dict[bytes, int] = {}
        self.out_bytes = np.zeros(4096, dtype=np.uint8)
        self.out_ptr = np.zeros(1025, dtype=np.int64)
        self.aux = np.zeros((1024, 2), dtype=np.int32)
        self.ptr = np.zeros(1025, dtype=np.int64)
        self.identity = np.zeros(1024, dtype=bool)
        self.watched = np.zeros(1024, dtype=bool)

    def entries(self, runs: list[bytes]) -> npt.NDArray[np.int64]:
        """The entry of each run (its UTF-8), encoding the runs not seen before."""
        if self.ptr[len(self.index)] > self.limit:
            self._start()
        keys = [run for run in dict.fromkeys(runs) if run not in self.index]
        if keys:
            new = [key.decode() for key in keys]
            rows = [np.asarray(enc.offsets, dtype=np.int32).reshape(-1, 2)
                    for enc in self.aligner.encode_batch(new, add_special_tokens=False)]
            count, used = len(self.index), int(self.ptr[len(self.index)])
            ends = used + np.cumsum([len(r) for r in rows])
            self.aux = _room(self.aux, int(ends[-1]))
            self.ptr = _room(self.ptr, count + len(new) + 1)
            self.identity = _room(self.identity, count + len(new))
            self.watched = _room(self.watched, count + len(new))
            self.aux[used:ends[-1]] = np.concatenate(rows)
            self.ptr[count + 1:count + len(new) + 1] = ends
            normalized = [out.encode() for out in map(self.aligner.normalizer.normalize_str, new)]
            self.identity[count:count + len(new)] = [out == key for out, key in zip(normalized, keys)]
            self.watched[count:count + len(new)] = [not self.watch.isdisjoint(run) for run in new]
            done = int(self.out_ptr[count])
            out_ends = done + np.cumsum([len(out) for out in normalized])
            self.out_ptr = _room(self.out_ptr, count + len(new) + 1)
            self.out_bytes = _room(self.out_bytes, int(out_ends[-1]))
            self.out_bytes[done:out_ends[-1]] = np.frombuffer(b"".join(normalized), dtype=np.uint8)
            self.out_ptr[count + 1:count + len(new) + 1] = out_ends
            self.index.update(zip(keys, range(count, count + len(new))))
        return np.fromiter(map(self.index.__getitem__, runs), dtype=np.int64, count=len(runs))


def _room(array: np.ndarray, size: int) -> np.ndarray:
    """``array``, or a copy twice as long or more, so that it holds ``size`` rows. The rows past the
    copy are not cleared: every caller writes a row before reading it, and clearing them would cost
    more than the rest of `BatchRows.take`."""
    if size <= len(array):
        return array
    grown = np.empty((max(size, 2 * len(array)), *array.shape[1:]), dtype=array.dtype)
    grown[:len(array)] = array
    return grown


def _utf8(texts: Sequence[str]) -> tuple[bytes, npt.NDArray[np.int64]]:
    """The texts' UTF-8, end to end, and where each starts (one more: the end).

    By pyarrow, which converts each text with CPython's ``PyUnicode_AsUTF8AndSize``: that keeps the
    UTF-8 in the str object, where fastokens (which calls it too) finds it instead of encoding the
    text a second time (``str.encode`` keeps nothing; docs/tokenizer-backends.md). Only the speed
    rests on the cache; a text
    that cannot be encoded (a lone surrogate) raises UnicodeEncodeError here as it would in fastokens.
    """
    _, starts, data = pa.array(texts, pa.large_string()).buffers()
    return (b"" if data is None else data.to_pybytes()), np.frombuffer(starts, np.int64)[:len(texts) + 1]


@functools.cache
def _nfc_table() -> npt.NDArray[np.uint16]:
    """Per code point, what `packcli.tokenizer.fast.offsets.nfc_runs` needs of Unicode's NFC quick check: the
    canonical combining class, plus 256 where the check is not Yes: NFC_QC=No (NFC changes the
    character alone), Maybe (it composes with the character before it: the second of a composition
    that is not excluded, or a Hangul vowel or final consonant), or the code point is unassigned or
    a surrogate here (256 | 512).

    Python's tables may be newer or older than ``tokenizers``' (those of tokenizers 0.23.3 are older
    than Python 3.11's: U+07FD has class 220 here, none there). Runs are normalized by
    ``tokenizers``' own normalizer, so what matters is that a run boundary here is one there too.
    Unicode's stability policy keeps an assigned character's class and decomposition in every
    version and adds no composition of characters already assigned, so a newer Unicode can only make
    an assigned character Maybe as the second of a composition whose first is new: unassigned here,
    so `packcli.tokenizer.fast.offsets.nfc_runs` keeps the character after it in its run (the 512).
    Built once per process, while fastokens parses, for NFC tokenizers only."""
    table = np.fromiter(map(unicodedata.combining, map(chr, range(0x110000))), dtype=np.uint16, count=0x110000)
    for c in range(0x110000):  # after the classes: a flag may be set on a code point not reached yet
        ch = chr(c)
        if unicodedata.category(ch) in ("Cn", "Cs"):
            table[c] |= 256 | 512
            continue
        d = unicodedata.decomposition(ch)
        if d and d[0] != "<":
            if unicodedata.normalize("NFC", ch) != ch:
                table[c] |= 256
            else:
                table[int(d.split()[-1], 16)] |= 256
    table[0x1161:0x1176] |= 256  # Hangul vowels and final consonants compose by rule, not by a mapping
    table[0x11A8:0x11C3] |= 256
    return table


def _lead_pairs(nfc: npt.NDArray[np.uint16]) -> npt.NDArray[np.bool_]:
    """Per first two bytes ``b0 << 8 | b1`` of a UTF-8 sequence: whether every code point they may start
    has entry 0 in ``nfc`` (`_nfc_table`), so `packcli.tokenizer.fast.offsets.nfc_runs` may step over the character
    without decoding it. Two bytes fix one code point of two bytes, 64 of three, 4,096 of four."""
    pairs = np.zeros(1 << 16, dtype=np.bool_)
    for b0 in range(0xC2, 0xF5):
        width, high = (1, (b0 & 0x1F) << 6) if b0 < 0xE0 else (64, (b0 & 0x0F) << 12) if b0 < 0xF0 else (
            4096, (b0 & 0x07) << 18)
        for b1 in range(0x80, 0xC0):
            first = high | (b1 & 0x3F) * width
            pairs[b0 << 8 | b1] = first + width <= len(nfc) and not nfc[first:first + width].any()
    return pairs


def _loud_bytes(lead_pairs: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """Per byte: 1 where it is the first byte of a UTF-8 sequence that some code point with a nonzero
    entry starts with (some `_lead_pairs` prefix of it is not clear), so that
    `packcli.tokenizer.fast.offsets.nfc_runs` may step over eight bytes at once only where none of them is;
    ASCII and continuation bytes are 0, and so are bytes that never start valid UTF-8."""
    loud = np.zeros(256, dtype=np.uint8)
    for b0 in range(0xC2, 0xF5):
        loud[b0] = not lead_pairs[b0 << 8 | 0x80:b0 << 8 | 0xC0].all()
    return loud


def _ends_added(text: str, at: int, added: Sequence[str]) -> bool:
    """Whether ``text[:at + 1]`` ends with an added token's text (then it may have been one)."""
    return any(text.endswith(a, 0, at + 1) for a in added)
