"""Sources: what the inputs are, which reader reads each kind, and the checks made before any work starts.

An input is a JSONL file (plain, ``.gz``, ``.zst``), a ``.json`` file holding one array of records, a
Parquet file, or a Hugging Face ``datasets`` table: a ``save_to_disk`` directory, a single ``.arrow``
file, or ``hf:NAME[:CONFIG][:SPLIT]`` for a dataset already in the local cache (read offline). Each
kind has a `Reader` (`packcli.ingest.jsonl`, `packcli.ingest.jsonarray`, `packcli.ingest.parquet`,
`packcli.ingest.hf`, each implementing `packcli.ingest.spans.Reader`) that cuts a source into `Span` s (the units of work)
and yields a span's records; everything after reading (parsing, column mapping, rejects, ids) is
the same for every kind.

Records are numbered as their kind numbers them, so a message or a seam-table row points at the
record a user can open: JSONL lines from 1 (as an editor shows them), JSON array elements, Parquet
and dataset rows from 0 (as ``json.load(f)[i]``, ``pq.read_table(f).slice(row, 1)`` and ``dataset[row]``
address them).
"""

from __future__ import annotations

import glob
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from packcli.choices import Format
from packcli.contract import HUB_PREFIX, file_sha256
from packcli.errors import InputError
from packcli.ingest.fields import FieldMap
from packcli.ingest.spans import InputFile, Reader, Source, SourceKind, Span

JSON_NAMES = (".json", ".json.gz", ".json.zst")  # read as a JSON array when the file holds one, else as JSON Lines


def reader(kind: SourceKind) -> Reader:
    """The reader of ``kind`` (imported on first use: pyarrow's Parquet module and ``datasets`` are heavy)."""
    if kind is SourceKind.jsonl:
        from packcli.ingest.jsonl import READER
    elif kind is SourceKind.json_array:
        from packcli.ingest.jsonarray import READER
    elif kind is SourceKind.parquet:
        from packcli.ingest.parquet import READER
    else:
        from packcli.ingest.hf import READER
    return READER


def read_span(span: Span) -> Iterator[tuple[int, bytes | dict]]:
    """(record number, payload) of every record of ``span``, from its kind's reader."""
    return reader(span.kind).read(span)


def read_source(source: Source) -> Iterator[tuple[int, bytes | dict]]:
    """(record number, payload) of every record of ``source``, in order, in one pass (no units)."""
    if source.kind in (SourceKind.jsonl, SourceKind.json_array):  # the whole file, without a scan for spans
        yield from read_span(Span(source.kind, source.path, 1 if source.kind is SourceKind.jsonl else 0, 0, -1))
        return
    for span in reader(source.kind).split(source, sys.maxsize):
        yield from read_span(span)


def expand_inputs(patterns: Sequence[str | Path]) -> list[Source]:
    """Resolve paths, globs and ``hf:`` names into a list of sources, sorted by path, each file once
    (however it is named: a file reached by two paths is one input).

    Raises:
        InputError: a pattern matches nothing; a directory that is not a ``datasets`` table; a
            ``hf:`` name that is not in the local cache.
    """
    found: dict[str, Source] = {}
    for pattern in patterns:
        text = str(pattern)
        if text.startswith(HUB_PREFIX):
            from packcli.ingest.hf import hub_source

            if text not in found:
                found[text] = hub_source(text)
            continue
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches or not all(Path(m).exists() for m in matches):
            raise InputError(f"{text}: no such file", "check the path; globs are expanded by packcli when quoted")
        for match in matches:
            real = os.path.realpath(match)
            if real not in found:
                found[real] = source_of(Path(match))
    return sorted(found.values(), key=lambda s: s.path)


def is_dataset_dir(path: Path) -> bool:
    """Whether ``path`` is a ``datasets`` save (a ``Dataset``, or a ``DatasetDict`` of them)."""
    return path.is_dir() and any((path / name).is_file() for name in ("state.json", "dataset_dict.json"))


def source_of(path: Path) -> Source:
    """The source a path names: a JSONL, Parquet or .arrow file, or a datasets directory (by its name and kind)."""
    name = path.name.lower()
    if path.is_dir():
        from packcli.ingest.hf import dataset_dir_source

        return dataset_dir_source(path)
    if name.endswith(".parquet"):
        return Source(str(path), SourceKind.parquet, (str(path),))
    if name.endswith(".arrow"):
        return Source(str(path), SourceKind.dataset, (str(path),))
    if name.endswith(JSON_NAMES) and path.is_file():
        from packcli.ingest.jsonarray import Layout, sniff_layout

        if sniff_layout(path)[0] is Layout.array:
            return Source(str(path), SourceKind.json_array, (str(path),))
    return Source(str(path), SourceKind.jsonl, (str(path),))


def describe_input(source: Source | str | Path, *, content: bool = True) -> InputFile:
    """The source with its size and sha256: of the file as stored (compressed bytes for .gz/.zst), or,
    for a table of several Arrow files, the sha256 of the files' sha256 hex digests, one a line in
    row order (location-free: names and directories do not enter it).

    ``content=False`` leaves the sha256 empty: a reader that names no example (``stats``) need not read
    every input once more just to hash it."""
    if not isinstance(source, Source):
        source = source_of(Path(source))
    size = sum(Path(f).stat().st_size for f in source.files)
    if not content:
        return InputFile(source.path, source.kind, source.files, size=size, sha256="")
    digests = [file_sha256(f) for f in source.files]
    sha = digests[0] if len(digests) == 1 else hashlib.sha256("\n".join(digests).encode()).hexdigest()
    return InputFile(source.path, source.kind, source.files, size=size, sha256=sha)


def describe_inputs(sources: Sequence[Source]) -> list[InputFile]:
    """The sources described, in the order ``pack`` reads them: by name, then content (sha256).

    Never by directory, so the same inputs give the same example order, seam table and manifest
    wherever they sit; the paths stay in the manifest's provenance only.
    """
    return sorted((describe_input(s) for s in sources), key=lambda f: (f.name, f.sha256, f.path))


def check_sources(sources: Sequence[Source], fields: FieldMap, fmt: Format) -> None:
    """Every Parquet and dataset source has the columns the mapping and the format read.

    JSONL has no schema to check before reading; its records are checked one by one (rejects).

    Raises:
        InputError: one line naming each source and the column it lacks.
    """
    from packcli.ingest.columnar import schema_problems

    problems = []
    for source in sources:
        schema = reader(source.kind).schema(source)
        if schema is not None:
            problems += [f"{source.path}: {p}" for p in schema_problems(schema, fields, fmt)]
    if problems:
        raise InputError("; ".join(problems), "map the columns with `fields.messages`, `fields.role`, "
                                              "`fields.content`, `fields.prompt`, `fields.completion` or "
                                              "`fields.text`, or choose `input_format`")
