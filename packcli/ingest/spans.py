"""What every reader shares: the kinds of source, a source as resolved and as pinned, the `Span` a
unit of work reads, the `Reader` interface, and how a failure to read is reported.

Kept apart from `packcli.ingest.sources`, which picks a reader for each kind, so the readers
(`jsonl`, `jsonarray`, `parquet`, `hf`) import these types without importing the module that imports them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from packcli.contract import HUB_PREFIX
from packcli.errors import InputError


class SourceKind(str, Enum):
    """How a source is read."""

    jsonl = "jsonl"
    json_array = "json-array"  # a .json file holding one array of records
    parquet = "parquet"
    dataset = "dataset"  # the Arrow files of a `datasets` table (save_to_disk, a cached hub split, an .arrow file)


@dataclass(frozen=True)
class Source:
    """An input as resolved: the path as given, its kind, and the files read, in record order."""

    path: str
    kind: SourceKind
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        """The location-free name the manifest and the seam table give it: a file's or directory's
        base name, or the ``hf:`` name as given."""
        return self.path if self.path.startswith(HUB_PREFIX) else Path(self.path).name


@dataclass(frozen=True)
class InputFile(Source):
    """A source as the manifest pins it: with its size and sha256 (of its files' bytes as stored)."""

    size: int
    sha256: str


@dataclass(frozen=True)
class Span:
    """Records of one file from ``first`` on: bytes ``start``..``end`` of a JSONL file (-1: to the end),
    or rows ``start``..``end`` (of that file) of a Parquet or Arrow file. ``first`` is the number of
    the span's first record in its source (see the module docstring)."""

    kind: SourceKind
    path: str
    first: int
    start: int
    end: int


class Reader(Protocol):
    """What a source kind provides. Implementations are stateless, so any process can read any span."""

    kind: SourceKind

    def schema(self, source: Source) -> object | None:
        """The source's ``pyarrow.Schema`` (checked before any work), or None (JSONL: no schema)."""
        ...

    def split(self, source: Source, per_unit: int) -> list[Span]:
        """Spans of about ``per_unit`` records each, in record order, covering the source once."""
        ...

    def read(self, span: Span) -> Iterator[tuple[int, bytes | dict]]:
        """(record number, payload) of every record of the span: a JSONL line's bytes, or a row as a dict."""
        ...


@contextmanager
def read_errors(path: str | Path) -> Iterator[None]:
    """Turn a failure to read, decompress or decode ``path`` into an `InputError` that names it."""
    try:
        yield
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read: {exc}", "is the file complete and its extension right?") from exc
    except Exception as exc:
        import pyarrow as pa

        if isinstance(exc, pa.ArrowException):  # a corrupt or truncated Parquet/Arrow file
            raise InputError(f"{path}: cannot read: {exc}", "is the file complete and its extension right?") from exc
        if type(exc).__name__ == "ZstdError":  # zstandard raises its own error for corrupt frames
            raise InputError(f"{path}: cannot decompress: {exc}") from exc
        raise
