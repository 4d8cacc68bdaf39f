"""JSONL sources: plain, ``.gz`` or ``.zst`` files; one record per non-blank line, numbered from 1.

A plain file is cut into spans at line starts found by one fast scan of its bytes (numpy over 8 MiB
blocks), so a large file parallelises and resumes; a compressed file cannot be entered in the
middle, so it is one span.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from packcli.ingest.sources import InputFile, SourceKind, Span, read_errors


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
    """`packcli.ingest.sources.Reader` for JSONL: spans are byte ranges starting at line starts."""

    kind = SourceKind.jsonl

    def schema(self, source: InputFile) -> None:
        """JSONL has no schema: each line is checked as it is read."""
        return None

    def split(self, source: InputFile, per_unit: int) -> list[Span]:
        """Spans of at most ``per_unit`` physical lines (one span for a compressed file)."""
        compressed = source.path.lower().endswith((".gz", ".zst"))
        bounds = [(1, 0)] if compressed else _line_starts(Path(source.path), per_unit)
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


def _line_starts(path: Path, every: int) -> list[tuple[int, int]]:
    """(line number, byte offset) of line 1, 1+every, 1+2*every, ... in one pass over the bytes."""
    starts = [(1, 0)]
    seen = 0  # newlines seen so far
    offset = 0
    size = path.stat().st_size
    with read_errors(path), open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 23), b""):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            # line L starts after newline number L-1; we want L = 1 + k*every
            wanted = np.arange(((seen // every) + 1) * every, seen + len(newlines) + 1, every)
            for w in wanted:
                pos = offset + int(newlines[w - seen - 1]) + 1
                if pos < size:
                    starts.append((int(w) + 1, pos))
            seen += len(newlines)
            offset += len(block)
    return starts


READER = JsonlReader()
