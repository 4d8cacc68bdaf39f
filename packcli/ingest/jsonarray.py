"""JSON array sources: a ``.json`` file (plain, ``.gz`` or ``.zst``) whose top level is an array of records,
the layout Alpaca-style data sets ship; and telling a file's layout from its first bytes.

An array is read element by element, never whole: the stdlib's ``JSONDecoder.raw_decode`` parses one
element at a time from a buffer refilled in 1 MiB reads (grown geometrically for an element larger
than that, so a huge element costs linear time), and each element is handed on as its own bytes, so
everything after reading is what a JSONL line goes through. Elements are numbered from 0, as
``json.load(f)[i]`` addresses them, and a message says ``data.json:17`` for element 17.

A plain file is cut into spans like a JSONL file (`packcli.ingest.jsonl`): every ``per_unit``
elements or `UNIT_BYTES`, at the byte offset of an element, found by one scan of the file. A
compressed file is one span. The bytes are decoded with ``surrogateescape``, so an element with
invalid UTF-8 is handed on byte for byte and rejected alone, with the same reason as a JSONL line.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import IO

from packcli.errors import InputError
from packcli.ingest.jsonl import UNIT_BYTES, open_binary
from packcli.ingest.spans import InputFile, SourceKind, Span, read_errors

CHUNK = 1 << 20
SNIFF_BYTES = 1 << 16
_WHITESPACE = " \t\n\r"
_NUMBER_TAIL = "0123456789.eE+-"


class Layout(str, Enum):
    """What a JSON-named file holds, from its first bytes."""

    lines = "JSON Lines"
    array = "one JSON array"
    csv = "CSV"


def sniff_layout(path: str | Path) -> tuple[Layout, str]:
    """The file's layout, and for CSV its header (to name in a message).

    An array is a file whose first character is ``[`` and whose first line is not one complete JSON
    value followed by more lines (that is JSON Lines of arrays: each line is then rejected on its
    own, as not an object). CSV is a first line that is not JSON, with commas, tabs or semicolons
    that the second line repeats. Anything else is JSON Lines, checked line by line.

    Raises:
        InputError: the file cannot be read or decompressed.
    """
    with read_errors(path), open_binary(path) as handle:
        head = handle.read(SNIFF_BYTES)
        complete = not handle.read(1)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff" + _WHITESPACE)
    first, newline, rest = text.partition("\n")
    if text.startswith("["):
        if not newline and not complete:
            return Layout.array, ""  # a first line longer than the sniff: a minified array
        try:
            json.loads(first)
        except json.JSONDecodeError:
            return Layout.array, ""
        return (Layout.lines if rest.strip() else Layout.array), ""
    if text.startswith("{"):
        return Layout.lines, ""
    second = rest.partition("\n")[0]
    for separator in (",", "\t", ";"):
        if first.count(separator) and first.count(separator) == second.count(separator):
            return Layout.csv, ", ".join(c.strip().strip('"') for c in first.split(separator)[:5])
    return Layout.lines, ""


def iter_elements(handle: IO[bytes], path: str, *, offset: int = 0, first: int = 0, inside: bool = False,
                  chunk: int = CHUNK) -> Iterator[tuple[int, int, bytes]]:
    """(index, byte offset, raw bytes) of each element of the array ``handle`` holds.

    Args:
        offset: the byte offset ``handle`` is at (for the offsets it yields and its messages).
        first: the index of the first element read.
        inside: ``handle`` is at an element of the array (a span), not at its ``[``.
        chunk: bytes a read asks for (more to finish an element larger than half of that).

    Raises:
        InputError: the file is not one JSON array (a syntax error between or inside elements, or
            content after the array), naming the byte offset and the element.
    """
    decode = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape").decode
    raw_decode = json.JSONDecoder().raw_decode
    buf, pos, byte, eof = "", 0, offset, False
    index = first

    def fail(what: str) -> InputError:
        return InputError(f"{path}: not a JSON array of records: {what} at byte {byte} (element {index})",
                          "the file must be one JSON array, [{...}, {...}]; JSON Lines files are named .jsonl")

    def more(at_least: int = 0) -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        data = handle.read(max(chunk, at_least))
        eof = not data
        buf = buf[pos:] + decode(data, final=eof)
        pos = 0
        return True

    def skip() -> str:
        """The next character that is not whitespace ("" at the end), counting the bytes skipped."""
        nonlocal pos, byte
        while True:
            while pos < len(buf) and buf[pos] in _WHITESPACE:
                pos, byte = pos + 1, byte + 1
            if pos < len(buf) or not more():
                return buf[pos] if pos < len(buf) else ""

    if not inside:
        if skip() == "\ufeff":
            pos, byte = pos + 1, byte + 3
        if skip() != "[":
            raise fail("the file does not start with [")
        pos, byte = pos + 1, byte + 1
        if skip() == "]":
            pos, byte = pos + 1, byte + 1
            if skip():
                raise fail("content after the array")
            return
    while True:
        if not skip():
            raise fail("the file ends inside the array")
        while True:
            try:
                _, end = raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if more(2 * (len(buf) - pos)):
                    continue
                raise fail(f"{exc.msg}") from None
            # a number cut by the read ("0." of "0.5", "1e" of "1e5") parses short: read on while all that
            # follows it in the buffer could still belong to it
            tail = end
            while tail < len(buf) and buf[tail] in _NUMBER_TAIL:
                tail += 1
            if eof or tail < len(buf) or not more(2 * (len(buf) - pos)):
                break
        raw = buf[pos:end].encode("utf-8", errors="surrogateescape")
        yield index, byte, raw
        pos, byte, index = end, byte + len(raw), index + 1
        after = skip()
        if after == "]":
            pos, byte = pos + 1, byte + 1
            if skip():
                raise fail("content after the array")
            return
        if after != ",":
            raise fail(f"expected , or ] after an element, found {after!r}" if after else "the file ends inside the array")
        pos, byte = pos + 1, byte + 1


class JsonArrayReader:
    """`packcli.ingest.spans.Reader` for JSON arrays: spans are byte ranges starting at elements."""

    kind = SourceKind.json_array

    def schema(self, source: InputFile) -> None:
        """No schema: each element is checked as it is read, like a JSONL line."""
        return None

    def split(self, source: InputFile, per_unit: int) -> list[Span]:
        """Spans of at most ``per_unit`` elements and about `UNIT_BYTES` (one span for a compressed file).

        Raises:
            InputError: the file is not one JSON array (found by the scan, before any work).
        """
        if source.path.lower().endswith((".gz", ".zst")):
            return [Span(SourceKind.json_array, source.path, 0, 0, -1)]
        starts = [(0, -1)]  # (first element, its byte offset): found as the scan reaches it
        with read_errors(source.path), open_binary(source.path) as handle:
            for index, byte, _ in iter_elements(handle, source.path):
                first, start = starts[-1]
                if start < 0:
                    starts[-1] = (first, byte)
                elif index - first >= per_unit or byte - start >= UNIT_BYTES:
                    starts.append((index, byte))
        if starts[0][1] < 0:  # an empty array: one span that yields nothing
            return [Span(SourceKind.json_array, source.path, 0, 0, -1)]
        return [Span(SourceKind.json_array, source.path, first, start, starts[k + 1][1] if k + 1 < len(starts) else -1)
                for k, (first, start) in enumerate(starts)]

    def read(self, span: Span) -> Iterator[tuple[int, bytes]]:
        """(element index, raw bytes) of every element of the span."""
        inside = span.start > 0
        with read_errors(span.path), open_binary(span.path) as handle:
            if inside:
                handle.seek(span.start)
            for index, byte, raw in iter_elements(handle, span.path, offset=span.start, first=span.first,
                                                  inside=inside):
                if span.end >= 0 and byte >= span.end:
                    return
                yield index, raw


READER = JsonArrayReader()
