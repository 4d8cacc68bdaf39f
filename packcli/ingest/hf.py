"""Hugging Face ``datasets`` tables: ``save_to_disk`` directories, cached hub splits, ``.arrow`` files.

A `datasets.Dataset` is a list of Arrow IPC stream files (``data-00000-of-00003.arrow`` ...) whose
rows, in file order, are the dataset's rows. This module finds those files and reads them with
pyarrow by record batch, memory-mapped: ``datasets`` itself is imported only to find a cached hub
split (``hf:NAME[:CONFIG][:SPLIT]``), always offline, so packing never downloads anything.

Spans are row ranges of one file: a memory-mapped stream is walked batch by batch without decoding
the batches it skips, so unlike Parquet any row range is cheap to reach.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from packcli.contract import HUB_PREFIX
from packcli.errors import InputError
from packcli.ingest.columnar import span_rows
from packcli.ingest.spans import Source, SourceKind, Span, read_errors

DEFAULT_SPLIT = "train"
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def dataset_dir_source(path: Path) -> Source:
    """The source of a ``Dataset.save_to_disk`` directory (its ``state.json`` lists the data files).

    Raises:
        InputError: a ``DatasetDict`` directory (name one split's directory), or a plain directory.
    """
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        raise InputError(f"{path}: a DatasetDict with splits {', '.join(splits)}",
                         f"pass one split's directory, e.g. {path / (splits[0] if splits else DEFAULT_SPLIT)}")
    state = path / "state.json"
    if not state.is_file():
        raise InputError(f"{path}: is a directory", "pass the files inside it (e.g. 'DIR/*.jsonl', 'DIR/*.parquet'), "
                                                    "or a datasets.save_to_disk directory")
    with read_errors(state):
        data = json.loads(state.read_text(encoding="utf-8"))
    files = tuple(str(path / f["filename"]) for f in data.get("_data_files", []))
    if not files:
        raise InputError(f"{state}: lists no data files", "save the dataset again with Dataset.save_to_disk")
    return Source(str(path), SourceKind.dataset, files)


def parse_hub_name(text: str) -> tuple[str, str | None, str]:
    """``hf:NAME[:CONFIG][:SPLIT]`` -> (name, config or None, split); the split defaults to ``train``."""
    parts = text[len(HUB_PREFIX):].split(":")
    if not parts[0] or len(parts) > 3 or not all(parts):
        raise InputError(f"{text}: not a dataset name", "write hf:NAME, hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return parts[0], None, parts[1] if len(parts) == 2 else DEFAULT_SPLIT


def hub_source(text: str) -> Source:
    """The Arrow files of a hub split already in the local cache (``HF_DATASETS_CACHE`` or the default).

    Raises:
        InputError: ``datasets`` is not installed, the split is not cached, or it is a view (indices).
    """
    name, config, split = parse_hub_name(text)
    with _offline(text) as load_dataset:
        try:
            dataset = load_dataset(name, config, split=split, cache_dir=os.environ.get("HF_DATASETS_CACHE"))
        except Exception as exc:  # noqa: BLE001 - datasets raises many kinds (FileNotFoundError, ValueError, its own)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"{text}: not readable from the local Hugging Face cache ({first})",
                             "load it once where the hub is reachable (datasets.load_dataset), then pack offline; "
                             "or pass its files") from exc
    if getattr(dataset, "_indices", None) is not None:  # a cached table is never a view; be sure
        raise InputError(f"{text}: a view of a table (indices mapping)", "save it with save_to_disk and pass that")
    return Source(text, SourceKind.dataset, tuple(f["filename"] for f in dataset.cache_files))


@contextmanager
def _offline(text: str) -> Iterator[object]:
    """``datasets.load_dataset`` with the hub offline, whatever the environment says, and the
    environment as it was after.

    ``datasets`` and ``huggingface_hub`` read the variables when first imported, so they are set
    around that import; for a process that imported them before (a notebook), their flags are set
    for the duration of the call instead, and put back after.
    """
    saved = {v: os.environ.get(v) for v in OFFLINE_VARIABLES}
    os.environ.update({v: "1" for v in OFFLINE_VARIABLES})
    try:
        import datasets
        import huggingface_hub.constants as hub
    except ImportError as exc:
        raise InputError(f"{text}: reading a hub dataset needs the datasets library",
                         "pip install datasets, or pass the dataset's Parquet/JSONL files") from exc
    finally:
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
    before = datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE, datasets.logging.get_verbosity()
    datasets.config.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE = True
    datasets.logging.set_verbosity_error()  # not "Using the latest cached version ..." on packcli's stderr
    try:
        yield datasets.load_dataset
    finally:
        datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE = before[:2]
        datasets.logging.set_verbosity(before[2])


def _stream(path: str) -> pa.ipc.RecordBatchStreamReader:
    try:
        return pa.ipc.open_stream(pa.memory_map(path))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path}: not an Arrow stream file ({exc})",
                         "pass a datasets table (save_to_disk directory or its data-*.arrow files)") from exc


class DatasetReader:
    """`packcli.ingest.spans.Reader` for the Arrow stream files of a ``datasets`` table."""

    kind = SourceKind.dataset

    def schema(self, source: Source) -> pa.Schema:
        with read_errors(source.files[0]):
            return _stream(source.files[0]).schema

    def split(self, source: Source, per_unit: int) -> list[Span]:
        spans, offset = [], 0
        for path in source.files:
            with read_errors(path):
                rows = sum(batch.num_rows for batch in _stream(path))
            spans += [Span(SourceKind.dataset, path, offset + a, a, min(a + per_unit, rows))
                      for a in range(0, rows, per_unit)]
            offset += rows
        return spans

    def read(self, span: Span) -> Iterator[tuple[int, dict]]:
        with read_errors(span.path):
            yield from span_rows(_stream(span.path), 0, span.start, span.end, span.first)


READER = DatasetReader()
