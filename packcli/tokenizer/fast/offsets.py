"""numba kernels of the fast tokenizer backend: character offsets from token ids, labels from spans,
and for NFC tokenizers the runs of text NFC may change and the offsets of the texts that hold them.

They replace some thirty whole-batch numpy passes (each allocating an array the size of the batch)
with one loop per example, so the work after fastokens is small beside fastokens' own
(docs/tokenizer-backends.md). They compute exactly what the reference computes:
`offsets_labels` the offsets ``tokenizers`` reports for a byte-level BPE, and in the same pass the
labels of an example whose spans are in order; `labels` the formula of
`packcli.tokenizer.reference.labels_from_spans` for any example, token by token, with no monotonicity assumed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

IGNORE = -100  # packcli.contract.IGNORE_INDEX (not imported: keeps this module import-light)


FIELD_BITS = 12  # bits per field of a token's packed entry (`pack_tokens`)
FIELD_MAX = (1 << FIELD_BITS) - 1
PAST = np.int64(1) << 62  # a span edge past every offset: the span pointer's value once it has passed the last span


def pack_tokens(nbytes: np.ndarray, chars: np.ndarray, cont: np.ndarray) -> np.ndarray:
    """Per token id, one int32: characters that start in it (low `FIELD_BITS` bits), its UTF-8 length
    (the next `FIELD_BITS`), whether it starts mid-character (the bit above). One load per token in the
    kernels instead of one from each of three tables, which halved the time of `offsets_labels` and
    `aligned_offsets` (a Qwen3-sized vocabulary is 600 KB this way, 1.8 MB as three tables, and the
    cache holds 1 MB).

    Raises:
        ValueError: a token of more than `FIELD_MAX` bytes.
    """
    if len(nbytes) and int(nbytes.max()) > FIELD_MAX:
        raise ValueError(f"a token of {int(nbytes.max())} bytes (at most {FIELD_MAX} fit the kernels' table)")
    return (chars.astype(np.int32) | (nbytes.astype(np.int32) << FIELD_BITS)
            | (cont.astype(np.int32) << 2 * FIELD_BITS))


@njit(cache=True, nogil=True, inline="always")
def _in_order(span_s, span_e, p, q):  # noqa: ANN001, ANN202
    """Whether spans ``p:q`` are in order: each ``s <= e``, each ending before the next starts."""
    ordered = True
    for k in range(p, q):
        ordered &= span_s[k] <= span_e[k] and (k == p or span_e[k - 1] <= span_s[k])
    return ordered


@njit(cache=True, nogil=True)
def offsets_labels(raw, bounds, tokens, prefix, suffix, add_special, span_ptr, span_s, span_e, ids, off,  # noqa: ANN001, ANN201
                   labels):
    """One pass over fastokens' ids (``raw``, uint32; ``tokens`` from `pack_tokens`), writing per token
    into the caller's arrays: its id as int32 (``ids``); its character start and end within its example
    (``off``, tokens x 2, int32: half the memory of int64); its label where this pass can decide it
    (``labels``). Returns per token whether the post-processor added it; per example whether the
    post-processor's tokens are where they should be (``ok``), how many characters and bytes its tokens
    spell (the caller compares those with the text's lengths), and whether its labels are done
    (``labelled``); last, the first id past the vocabulary, or -1 (the pass stops there: the caller raises).

    Labels are done for an example with its spans in order (each ``s <= e``, each ending before the
    next starts) and no added token, as a template's are. Its offsets here never go back (a token
    starts where the one before ends, one character earlier if it starts mid-character, which a token
    that starts no character must), so a span pointer that only moves forward finds the one span that
    can decide each token (see `labels`). `labels` does the others, and those whose offsets change
    after this (`aligned_offsets`).
    """
    n_tok, n = len(raw), len(bounds) - 1
    added, ok, labelled = np.zeros(n_tok, np.bool_), np.ones(n, np.bool_), np.zeros(n, np.bool_)
    chars, nbytes = np.zeros(n, np.int64), np.zeros(n, np.int64)
    n_pre, n_suf, vocab = len(prefix), len(suffix), len(tokens)
    special = add_special and n_pre + n_suf > 0
    for i in range(n):
        a, b = bounds[i], bounds[i + 1]
        if special:
            fits = b - a >= n_pre + n_suf
            for k in range(n_pre if fits else 0):
                fits &= raw[a + k] == prefix[k]
            for k in range(n_suf if fits else 0):
                fits &= raw[b - n_suf + k] == suffix[k]
            ok[i] = fits  # if not, its rows are written all the same, and not used
            if fits:
                added[a:a + n_pre] = True
                added[b - n_suf:b] = True
        p, q = span_ptr[i], span_ptr[i + 1]
        ordered = not special and _in_order(span_s, span_e, p, q)
        # characters that started before the token; bytes; the span pointer and its span (none: past all)
        before, size, k = 0, 0, p
        span_start, span_end = (span_s[k], span_e[k]) if k < q else (PAST, PAST)
        for t in range(a, b):
            r = raw[t]
            if r >= vocab:
                return added, ok, chars, nbytes, labelled, np.int64(r)
            ids[t] = r
            if special and added[t]:
                off[t, 0], off[t, 1] = 0, 0  # as tokenizers reports a post-processor token
                continue
            v = tokens[r]
            c = v & FIELD_MAX
            start, end = before - (v >> 2 * FIELD_BITS), before + c
            off[t, 0], off[t, 1] = start, end
            before += c
            size += (v >> FIELD_BITS) & FIELD_MAX
            while span_end <= start:
                k += 1
                span_start, span_end = (span_s[k], span_e[k]) if k < q else (PAST, PAST)
            labels[t] = r if span_start < end else IGNORE
        if a < b:
            labels[a] = IGNORE
        chars[i], nbytes[i], labelled[i] = before, size, ordered
    return added, ok, chars, nbytes, labelled, np.int64(-1)


@njit(cache=True, nogil=True)
def labels(ids, bounds, off, added, span_ptr, span_s, span_e, todo, out):  # noqa: ANN001, ANN201
    """Write into ``out`` the labels of the examples marked ``todo`` (the other rows are left as they are):
    `labels_from_spans` (added tokens supervised under a span starting at 0; the first label ignored).

    A token overlaps span [s, e) when ``start < e and end > s``. When an example's spans are in order
    (each ``s <= e``, each ending before the next starts), as a template's are, only one span can
    decide it: the first whose end is past the token's start (the ones before end at or before it, and
    every later one starts at or after that span's start). So a pointer that follows the tokens
    finds it, moving back if a token starts earlier than the one before. Other spans are tried one
    by one. Spans and offsets outside the text need no care: they follow the same formula.
    """
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        if not todo[i] or a == b:
            continue
        out[a:b] = IGNORE
        p, q = span_ptr[i], span_ptr[i + 1]
        ordered, zero_start = _in_order(span_s, span_e, p, q), False
        for k in range(p, q):
            zero_start |= span_s[k] == 0
        k = p
        for t in range(a, b):
            st, en = off[t, 0], off[t, 1]
            hit = added[t] and zero_start
            if not hit and ordered:
                while k > p and span_e[k - 1] > st:
                    k -= 1
                while k < q and span_e[k] <= st:
                    k += 1
                hit = k < q and span_s[k] < en
            elif not hit:
                for j in range(p, q):
                    if st < span_e[j] and en > span_s[j]:
                        hit = True
                        break
            if hit:
                out[t] = ids[t]
        out[a] = IGNORE


@njit(cache=True, nogil=True, inline="always")
def _code_point(text, p):  # noqa: ANN001, ANN202
    """The code point whose UTF-8 starts at ``text[p]``, and where the next one starts."""
    b = np.int64(text[p])
    if b < 0x80:
        return b, p + 1
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (text[p + 1] & 0x3F), p + 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((text[p + 1] & 0x3F) << 6) | (text[p + 2] & 0x3F), p + 3
    return (((b & 0x07) << 18) | ((text[p + 1] & 0x3F) << 12) | ((text[p + 2] & 0x3F) << 6)
            | (text[p + 3] & 0x3F)), p + 4


@njit(cache=True, nogil=True, inline="always")
def _push(rows, r, i, c0, c1, b0, b1):  # noqa: ANN001, ANN202
    """``rows`` with row ``r`` set (grown twice as long when full)."""
    if r == len(rows):
        grown = np.empty((2 * len(rows), 5), np.int64)
        grown[:r] = rows
        rows = grown
    rows[r, 0], rows[r, 1], rows[r, 2], rows[r, 3], rows[r, 4] = i, c0, c1, b0, b1
    return rows


@njit(cache=True, nogil=True)
def nfc_runs(text, byte_start, nfc, lead_pairs, loud):  # noqa: ANN001, ANN201
    """The runs of the texts that NFC may change: rows (text, first character, last + 1, first byte,
    last + 1), characters counted within the text, bytes within ``text``.

    ``text`` is the texts' UTF-8, end to end (as Python encodes it, so well formed), text ``i`` in
    ``byte_start[i]:byte_start[i + 1]``. ``nfc`` per code point: its canonical combining class in the
    low byte, plus 256 where Unicode's NFC quick check is not Yes (or cannot say), plus 512 more for a
    code point unassigned here. A run is a maximal stretch of characters whose entry is not 0, with
    the character before it and the one after an unassigned code point (a newer Unicode may compose
    the two); it is kept only if it fails the quick check (a 256, or a nonzero class below the one
    before it), so a text with no run kept is NFC. The loop tracks bytes only. Outside a run it steps
    eight bytes at once where none of them is ``loud`` (a first byte that some code point with a nonzero
    entry starts with; ASCII and continuation bytes never are: ASCII is in a run only first, or after an
    unassigned code point, which is loud), which is most of CJK, Cyrillic, Latin and ASCII; such a step may end inside a character,
    whose last bytes are then stepped over one by one. Else it steps over a character without decoding
    it where ``lead_pairs[first byte << 8 | second]`` says every code point starting with those two
    bytes has entry 0, which is cheaper than decoding it. Characters are counted for the runs kept,
    from the one before.
    """
    rows = np.empty((64, 5), np.int64)
    r = 0
    for i in range(len(byte_start) - 1):
        p, end = byte_start[i], byte_start[i + 1]
        counted, chars = p, 0  # characters in text[byte_start[i]:counted]
        while p < end:
            if p + 8 <= end and (loud[text[p]] | loud[text[p + 1]] | loud[text[p + 2]] | loud[text[p + 3]]
                                 | loud[text[p + 4]] | loud[text[p + 5]] | loud[text[p + 6]]
                                 | loud[text[p + 7]]) == 0:
                p += 8
                continue
            if text[p] < 0xC0:  # ASCII, or the rest of a character that a step of eight went into
                p += 1
                continue
            if lead_pairs[(np.int64(text[p]) << 8) | text[p + 1]]:
                p += 2 if text[p] < 0xE0 else 3 if text[p] < 0xF0 else 4
                continue
            cp, nxt = _code_point(text, p)
            v = nfc[cp]
            if v == 0:
                p = nxt
                continue
            start = p  # the run: from the character before this one, if any
            if p > byte_start[i]:
                start -= 1
                while (text[start] & 0xC0) == 0x80:
                    start -= 1
            fails, last = False, 0
            while True:
                ccc = v & 0xFF
                fails |= v > 0xFF or (ccc != 0 and last > ccc)
                last = ccc
                glue = v >= 512  # unassigned here: the character after it may compose with it elsewhere
                p = nxt
                if p == end:
                    break
                cp, nxt = _code_point(text, p)
                v = nfc[cp]
                if v == 0 and not glue:
                    break
            if fails:
                for q in range(counted, start):
                    chars += (text[q] & 0xC0) != 0x80
                first = chars
                for q in range(start, p):
                    chars += (text[q] & 0xC0) != 0x80
                counted = p
                rows = _push(rows, r, i, first, chars, start, p)
                r += 1
    return rows[:r]


@njit(cache=True, nogil=True)
def substitute(text, byte_start, which, run_ptr, runs, run_entry, out_ptr, out_bytes):  # noqa: ANN001, ANN201
    """The UTF-8 of the texts ``which``, each run (rows of `nfc_runs`, text ``which[k]``'s at
    ``run_ptr[k]:run_ptr[k + 1]``) replaced by its entry's normalized bytes
    (``out_bytes[out_ptr[e]:out_ptr[e + 1]]``), end to end, and where each text starts (one more: the end)."""
    size = 0
    for k in range(len(which)):
        size += byte_start[which[k] + 1] - byte_start[which[k]]
        for r in range(run_ptr[k], run_ptr[k + 1]):
            size += out_ptr[run_entry[r] + 1] - out_ptr[run_entry[r]] - (runs[r, 4] - runs[r, 3])
    out, starts = np.empty(size, np.uint8), np.empty(len(which) + 1, np.int64)
    o = 0
    for k in range(len(which)):
        starts[k] = o
        p = byte_start[which[k]]
        for r in range(run_ptr[k], run_ptr[k + 1]):
            n = runs[r, 3] - p
            out[o:o + n] = text[p:runs[r, 3]]
            o += n
            a, b = out_ptr[run_entry[r]], out_ptr[run_entry[r] + 1]
            out[o:o + b - a] = out_bytes[a:b]
            o += b - a
            p = runs[r, 4]
        n = byte_start[which[k] + 1] - p
        out[o:o + n] = text[p:byte_start[which[k] + 1]]
        o += n
    starts[len(which)] = o
    return out, starts


@njit(cache=True, nogil=True)
def aligned_offsets(ids, bounds, added, tokens, off, which, text, byte_start, run_ptr, runs, run_entry, entry_ptr,
                    entry_aux):  # noqa: ANN001, ANN201
    """Write into ``off`` the offsets of the tokens of the texts ``which`` (texts that NFC changes), and
    say for each whether its tokens add up.

    The tokens spell the normalized text: the text's own bytes, except that each run (rows of
    `nfc_runs`, those of ``which[k]`` at ``run_ptr[k]:run_ptr[k + 1]``) is replaced by its normalized
    bytes, each with the run's characters it comes from (``entry_aux[entry_ptr[e]:entry_ptr[e + 1]]``
    for the run's entry ``e = run_entry[r]``: first, last + 1, counted from the run's start, from the
    aligner; never empty, as NFC removes no character). A byte outside the runs comes from the
    character it is in. So one walk per text, token by token along the normalized bytes, gives each
    token (the first character of its first byte, the last of its last); a token wholly outside the
    runs counts its characters from ``tokens`` (`pack_tokens`), as `offsets_labels` does for a text
    NFC leaves alone, instead of from the text's bytes (twice as fast). ``text``, ``byte_start``: as
    for `nfc_runs`. A text whose tokens do not add up to its normalized bytes, run by run, is not good
    (the reference encodes it).
    """
    good = np.zeros(len(which), np.bool_)
    for k in range(len(which)):
        a, b = bounds[which[k]], bounds[which[k] + 1]
        p, end, cur = byte_start[which[k]], byte_start[which[k] + 1], -1
        r, r_end, q, q_end, shift, in_run, ok = run_ptr[k], run_ptr[k + 1], 0, 0, 0, False, True
        first = last = 0
        for t in range(a, b):
            if added[t]:
                continue  # (0, 0)
            v = tokens[ids[t]]
            n = (v >> FIELD_BITS) & FIELD_MAX
            if not in_run and (r == r_end or runs[r, 3] >= p + n) and p + n <= end:  # no run in its bytes
                first = cur + 1 - (v >> 2 * FIELD_BITS)  # from its own characters (`pack_tokens`)
                cur += v & FIELD_MAX
                off[t, 0], off[t, 1] = first, cur + 1
                p += n
                continue
            for j in range(n):
                if not in_run and r < r_end and p == runs[r, 3]:  # a run starts here
                    e = run_entry[r]
                    in_run, q, q_end, shift = True, entry_ptr[e], entry_ptr[e + 1], runs[r, 1]
                if in_run:
                    f, l = entry_aux[q, 0] + shift, entry_aux[q, 1] + shift
                    q += 1
                    if q == q_end:  # the run is done: back to the text after it
                        in_run, p, cur, r = False, runs[r, 4], runs[r, 2] - 1, r + 1
                elif p < end:
                    cur += (text[p] & 0xC0) != 0x80
                    f, l = cur, cur + 1
                    p += 1
                else:
                    ok = False
                    break
                if j == 0:
                    first = f
                last = l
            if not ok:
                break
            off[t, 0], off[t, 1] = first, last
        good[k] = ok and not in_run and r == r_end and p == end
    return good


@njit(cache=True, nogil=True)
def example_hashes(ids, bounds):  # noqa: ANN001, ANN201
    """A 64-bit hash of each example's token ids (``ids[bounds[i]:bounds[i + 1]]``): FNV-1a over the
    ids, then MurmurHash3's finalizer, so that its low bits (the guard's sample) are as good as its high."""
    out = np.empty(len(bounds) - 1, np.uint64)
    prime, m1, m2 = np.uint64(0x100000001B3), np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
    for i in range(len(bounds) - 1):
        h = np.uint64(0xCBF29CE484222325) ^ np.uint64(bounds[i + 1] - bounds[i])
        for t in range(bounds[i], bounds[i + 1]):
            h = (h ^ np.uint64(np.uint32(ids[t]))) * prime
        h ^= h >> np.uint64(33)
        h *= m1
        h ^= h >> np.uint64(33)
        h *= m2
        h ^= h >> np.uint64(33)
        out[i] = h
    return out
