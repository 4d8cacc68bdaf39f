"""What Parquet and Arrow sources share: rows as the dicts a JSONL line would give, and schema checks.

A table converted from JSONL has one schema for all its rows, so a field that a record did not have
is a null in that row (a struct of turns gets every key any turn had). Nulls are therefore read as
absent fields, recursively in structs: a record's strings, lists and keys come back as its JSON line
had them, and the same record gives the same example (and the same ``--dedupe exact`` key) from
either format. What a table's types cannot hold does not come back (docs/inputs.md): a struct's keys
in the table's order and without the ones whose value was null, and a whole number in a float column
as a float (5 as 5.0). Where a template prints such a field whole (tool arguments, tools, documents,
template variables) that changes the text: `type_warnings` names those columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from packcli.choices import Format
from packcli.ingest.fields import FieldMap

BATCH_ROWS = 1024  # rows converted to Python at once: small enough to stream, large enough to amortise


def present(value: object) -> object:
    """``value`` with every null field of every struct (dict) removed, at any depth."""
    if isinstance(value, dict):
        return {k: present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [present(v) for v in value]
    return value


def span_rows(batches: Iterable[pa.RecordBatch], row: int, start: int, end: int, first: int
              ) -> Iterator[tuple[int, dict]]:
    """Rows ``start``..``end`` of a file as (record number, dict), from its batches starting at row ``row``;
    row ``start`` is record number ``first``."""
    for batch in batches:
        lo, hi = max(start - row, 0), min(end - row, batch.num_rows)
        if hi > lo:
            for k, obj in enumerate(batch.slice(lo, hi - lo).to_pylist(), start=first + row + lo - start):
                yield k, present(obj)
        row += batch.num_rows
        if row >= end:
            return


def schema_problems(schema: pa.Schema, fields: FieldMap, fmt: Format) -> list[str]:
    """What the mapping and format would read that the table does not have, one line each."""
    names = set(schema.names)

    def missing(part: str) -> str:
        return f"no column {fields.option(part)}; columns: {', '.join(schema.names[:8]) or 'none'}"

    mapped = [part for part in ("messages", "prompt", "completion", "text") if getattr(fields, part) != part]
    needed = {Format.messages: ["messages"], Format.prompt_completion: ["prompt", "completion"],
              Format.text: ["text"]}.get(fmt, mapped if fmt is Format.auto else [])
    problems = [missing(part) for part in needed if getattr(fields, part) not in names]
    if fmt is Format.sharegpt and "conversations" not in names:
        problems.append(f"no column 'conversations' (`input_format='sharegpt'`); columns: "
                        f"{', '.join(schema.names[:8])}")
    if fmt is Format.auto and not problems:
        readable = {getattr(fields, p) for p in ("messages", "prompt", "completion", "text")} | {"conversations"}
        if not names & readable:
            problems.append(f"no column packcli reads (messages, conversations, prompt/completion, text); "
                            f"columns: {', '.join(schema.names[:8]) or 'none'}")
    if fields.messages in names and fmt in (Format.auto, Format.messages):
        problems += _turn_problems(schema.field(fields.messages).type, fields)
    return problems


def _turn_problems(kind: pa.DataType, fields: FieldMap) -> list[str]:
    """A ``messages`` column of structs must have the role and content keys the mapping reads."""
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
        return []
    keys = {kind.value_type.field(i).name for i in range(kind.value_type.num_fields)}
    return [f"the turns of column {fields.option('messages')} have no key {fields.option(part)}; keys: "
            f"{', '.join(sorted(keys))}" for part in ("role", "content") if getattr(fields, part) not in keys]


PRINTED_WHOLE = ("tools", "documents", "chat_template_kwargs", "arguments")  # fields templates print as JSON


def type_warnings(schema: pa.Schema) -> list[str]:
    """The columns (by path) whose Arrow type cannot hold the JSON they came from where a template prints it:
    a float field (whole numbers read back as 5.0), or a struct under a field templates print whole (keys in
    the table's order, null members dropped). One line each; empty for a table that keeps its JSON."""
    found: list[str] = []

    def walk(kind: pa.DataType, path: str, printed: bool, named: bool) -> None:
        if pa.types.is_floating(kind):
            found.append(f"{path} is {kind}: a whole number the JSON had as 5 reads back as 5.0")
        elif pa.types.is_struct(kind):
            if printed and not named:  # the outermost such struct only: what is inside it is said with it
                found.append(f"{path} is a struct: its keys read back in the table's order, without the ones whose "
                             "value was null")
                named = True
            for i in range(kind.num_fields):
                child = kind.field(i)
                walk(child.type, f"{path}.{child.name}", printed or child.name in PRINTED_WHOLE, named)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            walk(kind.value_type, f"{path}[]", printed, named)

    for column in schema:
        walk(column.type, column.name, column.name in PRINTED_WHOLE, False)
    return found
