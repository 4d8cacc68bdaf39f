"""JSONL sources: plain, ``.gz`` or ``.zst`` files; one record per non-blank line, numbered from 1.

A plain file is cut into spans at line starts found by one fast scan of its bytes (numpy over 8 MiB
blocks), so a large file parallelises and resumes: a span ends after ``per_unit`` lines or at the
first line start past `UNIT_BYTES`, whichever comes first, so a file of long conversations (kilobytes
a line) is cut as finely as one of short ones and its spans keep every worker busy to the end. A
compressed file cannot be entered in the middle, so it is one span.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from packcli.ingest.spans import InputFile, SourceKind, Span, read_errors

UNIT_BYTES = 8 << 20  # a span of a plain file ends at the first line start past this many bytes


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a JSONL file for reading raw lines, decompressing .gz and .zst transparently."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_lines(path: str | Path, file_index: int = 0) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, raw bytes) for every non-blank line.

    Raises:
        InputError: the file cannot be read or decompressed.
    """
    with read_errors(path), open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, raw


class JsonlReader:
    """`packcli.ingest.spans.Reader` for JSONL: spans are byte ranges starting at line starts."""

    kind = SourceKind.jsonl

    def schema(self, source: InputFile) -> None:
        """JSONL has no schema: each line is checked as it is read."""
        return None

    def split(self, source: InputFile, per_unit: int) -> list[Span]:
        """Spans of at most ``per_unit`` physical lines and about `UNIT_BYTES` (one span for a compressed file)."""
        compressed = source.path.lower().endswith((".gz", ".zst"))
        bounds = [(1, 0)] if compressed else _line_starts(Path(source.path), per_unit, UNIT_BYTES)
        return [Span(SourceKind.jsonl, source.path, line, start, bounds[k + 1][1] if k + 1 < len(bounds) else -1)
                for k, (line, start) in enumerate(bounds)]

    def read(self, span: Span) -> Iterator[tuple[int, bytes]]:
        """(line number, raw bytes) of every non-blank line of the span (``start``/``end``: byte offsets)."""
        with read_errors(span.path), open_binary(span.path) as handle:
            if span.start:
                handle.seek(span.start)
            position = span.start
            for number, raw in enumerate(handle, start=span.first):
                if span.end >= 0 and position >= span.end:
                    return
                position += len(raw)
                if raw.strip():
                    yield number, raw


def _line_starts(path: Path, every: int, max_bytes: int) -> list[tuple[int, int]]:
    """(line number, byte offset) of each span's first line, in one pass over the bytes: a span starts at
    line 1, then ``every`` lines after the previous start or at the first line starting ``max_bytes``
    or more after it, whichever comes first."""
    starts = [(1, 0)]
    line, byte = 1, 0  # the current span's first line and its offset
    seen = 0  # newlines before this block
    offset = 0  # bytes before this block
    size = path.stat().st_size
    with read_errors(path), open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            # the offsets of the lines that start after this block's newlines: next[j] starts line seen + j + 2
            after = offset + np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + 1
            while True:
                j = min(line + every - seen - 2, int(np.searchsorted(after, byte + max_bytes)))
                if j >= len(after) or after[j] >= size:
                    break
                line, byte = seen + j + 2, int(after[j])
                starts.append((line, byte))
            seen += len(after)
            offset += len(block)
    return starts


READER = JsonlReader()
