"""numba kernels of the fast tokenizer backend: character offsets from token ids, labels from spans,
and for NFC tokenizers the byte-for-byte spelling check and the offsets of texts NFC changed.

They replace some thirty whole-batch numpy passes (each allocating an array the size of the batch)
with one loop per example, which took the backend's work after fastokens from 3x fastokens' own time
to a fraction of it (docs/tokenizer-backends.md). Both compute exactly what the reference computes:
`offsets` the offsets ``tokenizers`` reports for a byte-level BPE, `labels` the formula of
`packcli.tokenization.labels_from_spans`, token by token, with no monotonicity assumed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

IGNORE = -100  # packcli.tokenization.IGNORE_INDEX (not imported: keeps this module import-light)


@njit(cache=True, nogil=True)
def offsets(ids, bounds, token_chars, token_cont, prefix, suffix, add_special):  # noqa: ANN001, ANN201
    """Per token: character start and end within its example (tokens x 2, int32: half the fresh memory
    of int64, which this machine faults in at about 7 us a page), and whether the post-processor added it.

    Per example: whether the post-processor's tokens are where they should be (``ok``), and how many
    characters its tokens spell (the caller compares that with the text's length).
    """
    n_tok, n = len(ids), len(bounds) - 1
    off = np.zeros((n_tok, 2), np.int32)
    added, ok, chars = np.zeros(n_tok, np.bool_), np.ones(n, np.bool_), np.zeros(n, np.int64)
    n_pre, n_suf = len(prefix), len(suffix)
    for i in range(n):
        a, b = bounds[i], bounds[i + 1]
        if add_special and n_pre + n_suf:
            if b - a < n_pre + n_suf:
                ok[i] = False
                continue
            for k in range(n_pre):
                ok[i] &= ids[a + k] == prefix[k]
            for k in range(n_suf):
                ok[i] &= ids[b - n_suf + k] == suffix[k]
            if not ok[i]:
                continue
            added[a:a + n_pre] = True
            added[b - n_suf:b] = True
        before = 0  # characters that started before the token
        for t in range(a, b):
            if added[t]:
                continue  # (0, 0), as tokenizers reports a post-processor token
            c = token_chars[ids[t]]
            off[t, 0], off[t, 1] = before - token_cont[ids[t]], before + c
            before += c
        chars[i] = before
    return off, added, ok, chars


@njit(cache=True, nogil=True)
def labels(ids, bounds, off, added, span_ptr, span_s, span_e, todo):  # noqa: ANN001, ANN201
    """Labels of the examples marked ``todo``: `labels_from_spans` (added tokens supervised under a span
    starting at 0; the first label ignored).

    A token overlaps span [s, e) when ``start < e and end > s``. When an example's spans are in order
    (each ``s <= e``, each ending before the next starts), as a template's are, only one span can
    decide it: the first whose end is past the token's start (the ones before end at or before it, and
    every later one starts at or after that span's start). So a pointer that follows the tokens
    finds it, moving back if a token starts earlier than the one before. Other spans are tried one
    by one. Spans and offsets outside the text need no care: they follow the same formula.
    """
    out = np.full(len(ids), IGNORE, np.int32)
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        if not todo[i] or a == b:
            continue
        p, q = span_ptr[i], span_ptr[i + 1]
        ordered, zero_start = True, False
        for k in range(p, q):
            ordered &= span_s[k] <= span_e[k] and (k == p or span_e[k - 1] <= span_s[k])
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
    return out


@njit(cache=True, nogil=True, inline="always")
def _word(text, p):  # noqa: ANN001, ANN202
    """``text[p:p + 8]`` as a little-endian integer (LLVM makes the eight loads one)."""
    w = np.uint64(0)
    for j in range(8):
        w |= np.uint64(text[p + j]) << np.uint64(8 * j)
    return w


@njit(cache=True, nogil=True)
def spells(ids, bounds, added, nbytes, word, spelling, spelling_start, text, clen, chars):  # noqa: ANN001, ANN201
    """Per example: whether its tokens' bytes are exactly its text's UTF-8 bytes.

    ``text`` is the batch's texts' UTF-8, end to end; ``clen`` each text's length in characters, which
    says where it ends (a character starts at every byte that is not a continuation byte); ``chars``
    how many characters start in its tokens' bytes (from `offsets`), which is how many the compared
    bytes hold when they match, so the loop over bytes only compares. A token of at most 8 bytes (all
    but a few) is one comparison of integers: ``word`` holds its bytes, and the text's next 8 bytes
    are masked to its length; a longer one is compared byte by byte. Tokens the post-processor added
    spell nothing. Only a text that is not spelled is walked again to find where the next one starts.
    """
    n = len(bounds) - 1
    out = np.zeros(n, np.bool_)
    pos = 0
    for i in range(n):
        p, same = pos, chars[i] == clen[i]
        for t in range(bounds[i], bounds[i + 1]):
            if not same:
                break
            if added[t]:
                continue
            tid = ids[t]
            length = nbytes[tid]
            if p + length > len(text):
                same = False
            elif length <= 8 and p + 8 <= len(text):
                mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - 8 * length)
                same = (_word(text, p) & mask) == word[tid]
            else:
                s = spelling_start[tid]
                for j in range(length):
                    if spelling[s + j] != text[p + j]:
                        same = False
                        break
            p += length
        if same and (p == len(text) or (text[p] & 0xC0) != 0x80):
            out[i], pos = True, p
            continue
        seen = 0
        while pos < len(text) and (seen < clen[i] or (text[pos] & 0xC0) == 0x80):
            seen += (text[pos] & 0xC0) != 0x80
            pos += 1
    return out


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


@njit(cache=True, nogil=True)
def suspect_runs(text, byte_start, which, suspect):  # noqa: ANN001, ANN201
    """The runs of characters in ``suspect`` (by code point), each with the character before it, in
    the texts ``which``: (text, first character, last + 1), characters counted within the text.

    ``text`` is the batch's texts' UTF-8, end to end (as Python encodes it, so well formed), text
    ``i`` in ``byte_start[i]:byte_start[i + 1]``. Two passes: count the runs, then fill them in.
    """
    n_runs = 0
    for k in range(len(which)):
        in_run = False
        p = byte_start[which[k]]
        while p < byte_start[which[k] + 1]:
            cp, p = _code_point(text, p)
            if suspect[cp] and not in_run:
                n_runs += 1
            in_run = suspect[cp]
    ex, start, stop = np.empty(n_runs, np.int64), np.empty(n_runs, np.int64), np.empty(n_runs, np.int64)
    r = 0
    for k in range(len(which)):
        in_run, c = False, 0
        p = byte_start[which[k]]
        while p < byte_start[which[k] + 1]:
            cp, p = _code_point(text, p)
            if suspect[cp] and not in_run:
                ex[r], start[r], in_run = which[k], max(c - 1, 0), True
            elif not suspect[cp] and in_run:
                stop[r], r, in_run = c, r + 1, False
            c += 1
        if in_run:
            stop[r], r = c, r + 1
    return ex, start, stop


@njit(cache=True, nogil=True)
def aligned_offsets(ids, bounds, added, nbytes, which, text, byte_base, char_base, run_ptr, run_bytes, run_chars,
                    aux_ptr, aux):  # noqa: ANN001, ANN201
    """Offsets of the tokens of the examples ``which`` (texts that NFC changed), and whether each adds up.

    The tokens spell the normalized text: the text's own bytes, except that each run (``run_bytes``,
    ``run_chars``: its byte and character range in ``text``) is replaced by its normalized bytes, each
    with the original characters it comes from (``aux[aux_ptr[r]:aux_ptr[r + 1]]``: first, last + 1,
    from the aligner). A byte outside the runs comes from the character it is in. So one walk per text,
    token by token along the normalized bytes, gives each token (the first character of its first
    byte, the last of its last), relative to the text's start (``char_base``). ``text`` is the texts of
    ``which`` end to end in UTF-8 (``byte_base``: where each starts); ``run_ptr`` each text's runs. A text
    whose token bytes are not exactly its normalized bytes is not good (the reference encodes it).
    """
    n_tok = 0
    for k in range(len(which)):
        n_tok += bounds[which[k] + 1] - bounds[which[k]]
    off = np.zeros((n_tok, 2), np.int32)
    good = np.zeros(len(which), np.bool_)
    o = 0
    for k in range(len(which)):
        a, b = bounds[which[k]], bounds[which[k] + 1]
        p, end, cur, base = byte_base[k], byte_base[k + 1], char_base[k] - 1, char_base[k]
        r, r_end, q, in_run, ok = run_ptr[k], run_ptr[k + 1], 0, False, True
        first = last = 0
        for t in range(a, b):
            if added[t]:
                continue  # (0, 0)
            for j in range(nbytes[ids[t]]):
                while not in_run and r < r_end and p == run_bytes[r, 0]:  # a run starts here
                    if aux_ptr[r] == aux_ptr[r + 1]:  # normalized to nothing: skip it
                        p, cur, r = run_bytes[r, 1], run_chars[r, 1] - 1, r + 1
                    else:
                        in_run, q = True, aux_ptr[r]
                if in_run:
                    f, l = aux[q, 0], aux[q, 1]
                    q += 1
                    if q == aux_ptr[r + 1]:  # the run is done: back to the text after it
                        in_run, p, cur, r = False, run_bytes[r, 1], run_chars[r, 1] - 1, r + 1
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
            off[o + t - a, 0], off[o + t - a, 1] = first - base, last - base
        while ok and not in_run and r < r_end and p == run_bytes[r, 0] and aux_ptr[r] == aux_ptr[r + 1]:
            p, r = run_bytes[r, 1], r + 1
        good[k] = ok and not in_run and r == r_end and p == end
        o += b - a
    return off, good
