"""Reading inputs: where records come from, and what each record is.

    spans.py     the input kinds, a source, a `Span`, the `Reader` interface, read errors
    sources.py   which reader reads each kind, expanding inputs, the checks before work
    jsonl.py     JSONL files (plain, .gz, .zst): one record per non-blank line
    jsonarray.py .json files holding one array: one record per element, streamed; a file's layout
    parquet.py   Parquet files: one record per row, read by record batch
    hf.py        `datasets` tables: save_to_disk directories, cached hub splits, .arrow files
    columnar.py  what Parquet and Arrow share: rows as JSON-like dicts, schema checks
    fields.py    column mapping (`FieldMap`): fields with other names than packcli's
    records.py   format detection, validation and normalisation of one record
    messages.py  a chat record's messages as a chat template sees them: validated, reasoning aliased
"""

from packcli.ingest.fields import DEFAULT_FIELDS, FieldMap
from packcli.ingest.jsonl import open_binary, read_lines
from packcli.ingest.records import Kind, Record, Rejection, content_key, parse_record
from packcli.ingest.sources import (
    HUB_PREFIX,
    check_sources,
    describe_input,
    describe_inputs,
    expand_inputs,
    is_dataset_dir,
    read_source,
    read_span,
    reader,
    source_of,
)
from packcli.ingest.spans import InputFile, Source, SourceKind, Span, read_errors

__all__ = [
    "DEFAULT_FIELDS", "HUB_PREFIX", "FieldMap", "InputFile", "Kind", "Record", "Rejection", "Source",
    "SourceKind", "Span", "check_sources", "content_key", "describe_input", "describe_inputs", "expand_inputs",
    "is_dataset_dir", "open_binary", "parse_record", "read_errors", "read_lines", "read_source", "read_span", "reader",
    "source_of",
]
